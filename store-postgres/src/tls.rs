//! TLS to the server: the libpq keys `sslmode` and `sslrootcert`, taken out
//! of the connection URL before the driver reads it, and the connector that
//! carries them out (rustls, feature `tls`).
//!
//! | `sslmode` | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers TLS | no |
//! | `require` | always | no; the chain when `sslrootcert` is given (as libpq) |
//! | `verify-ca` | always | the chain, against `sslrootcert` or the system roots |
//! | `verify-full` | always | the chain and the host name |
//!
//! `sslrootcert=PATH` names a PEM file of trusted certificates;
//! `sslrootcert=system` (or leaving it out) trusts the system's roots.

use std::path::PathBuf;

use a2_store_api::{Result, StoreError};

/// How hard a connection insists on TLS and what it checks (`sslmode=`),
/// with the meanings libpq gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// `disable`: never TLS.
    Disable,
    /// `prefer`: TLS when the server offers it, unverified; plain otherwise.
    #[default]
    Prefer,
    /// `require`: always TLS; the certificate is checked only when a root
    /// certificate file is given (then as `verify-ca`).
    Require,
    /// `verify-ca`: always TLS, and the server's certificate must chain to a
    /// trusted root.
    VerifyCa,
    /// `verify-full`: as `verify-ca`, and the certificate must name the host.
    VerifyFull,
}

impl SslMode {
    /// Parses an `sslmode` value.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// The `sslmode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// Which roots a verifying connection trusts (`sslrootcert=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    /// The system's trusted roots (`sslrootcert=system`, or none given).
    System,
    /// The certificates of a PEM file (`sslrootcert=PATH`).
    File(PathBuf),
}

/// The TLS settings of a connection URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// `sslmode=`; `prefer` when not given.
    pub mode: SslMode,
    /// `sslrootcert=`; `None` when not given (the system roots where needed).
    pub root_cert: Option<RootCerts>,
}

impl TlsSettings {
    /// What the certificate check amounts to: `None` for no check, else
    /// whether the host name is checked too.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    fn verification(&self) -> Option<bool> {
        match (self.mode, &self.root_cert) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => None,
            (SslMode::Require | SslMode::VerifyCa, _) => Some(false),
            (SslMode::VerifyFull, _) => Some(true),
        }
    }

    /// The driver's mode: it only knows whether TLS is off, optional or
    /// required; the connector does the checking.
    fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// Splits the TLS keys `sslmode` and `sslrootcert` off a connection string
/// (a `postgres://` URL's query, or the `key=value` words of a libpq-style
/// string), returning the rest for the driver and the settings.
///
/// Errors: `InvalidInput` for an unknown `sslmode` or a key given twice.
pub fn split_tls_settings(url: &str) -> Result<(String, TlsSettings)> {
    let mut settings = TlsSettings::default();
    let mut seen_mode = false;
    let mut take = |key: &str, value: &str| -> Result<bool> {
        match key {
            "sslmode" => {
                if std::mem::replace(&mut seen_mode, true) {
                    return Err(twice("sslmode"));
                }
                // The value is not echoed: with an unencoded `&` or a quote
                // in a password, it may be a piece of the password.
                settings.mode = SslMode::parse(value).ok_or_else(|| {
                    StoreError::invalid_input(
                        "the sslmode value is not a TLS mode: use disable, prefer, require, verify-ca or verify-full",
                    )
                })?;
                Ok(true)
            }
            "sslrootcert" => {
                if settings.root_cert.is_some() {
                    return Err(twice("sslrootcert"));
                }
                if value.is_empty() {
                    return Err(StoreError::invalid_input(
                        "sslrootcert is empty: write sslrootcert=PATH to a PEM file, or sslrootcert=system",
                    ));
                }
                settings.root_cert = Some(if value == "system" {
                    RootCerts::System
                } else {
                    RootCerts::File(PathBuf::from(percent_decode(value)))
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, value)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in conninfo_pairs(url) {
            if !take(pair.key, &pair.value)? {
                kept.push(pair.text);
            }
        }
        kept.join(" ")
    };
    Ok((rest, settings))
}

/// One `key = value` of a libpq key=value connection string: the key, the
/// value unquoted (`'…'` with `\'` and `\\` escapes), and the pair's
/// text as written.
struct ConninfoPair<'a> {
    key: &'a str,
    value: String,
    text: &'a str,
}

/// The pairs of a key=value connection string, read as libpq reads them:
/// spaces around `=` allowed, a quoted value may hold spaces, quotes and
/// `sslmode=` text without ending the pair. A malformed tail (an
/// unterminated quote) is one last pair, left for the driver to refuse.
fn conninfo_pairs(text: &str) -> Vec<ConninfoPair<'_>> {
    let bytes = text.as_bytes();
    let mut pairs = Vec::new();
    let mut at = 0;
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        let start = skip_space(at);
        if start >= bytes.len() {
            break;
        }
        let mut i = start;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[start..i];
        i = skip_space(i);
        let mut value = Vec::new();
        if i < bytes.len() && bytes[i] == b'=' {
            i = skip_space(i + 1);
            if i < bytes.len() && bytes[i] == b'\'' {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    value.push(bytes[i]);
                    i += 1;
                }
                i = (i + 1).min(bytes.len());
            } else {
                while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    value.push(bytes[i]);
                    i += 1;
                }
            }
        }
        pairs.push(ConninfoPair {
            key,
            value: String::from_utf8_lossy(&value).into_owned(),
            text: &text[start..i],
        });
        at = i;
    }
    pairs
}

fn twice(key: &str) -> StoreError {
    StoreError::invalid_input(format!(
        "option '{key}' is given twice in the PostgreSQL URL: keep one"
    ))
}

/// Decodes `%XX` escapes (a path in a URL query may carry them).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector every connection of a store uses.
#[cfg(feature = "tls")]
pub(crate) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
/// The connector every connection of a store uses.
#[cfg(not(feature = "tls"))]
pub(crate) type Connector = tokio_postgres::NoTls;

/// Parses `url` into the driver's configuration (TLS mode set) and the
/// connector that carries out its TLS settings.
///
/// Errors: `InvalidInput` for a malformed URL, an unknown `sslmode`, a root
/// certificate file that cannot be read or holds no certificate, or (in a
/// build without the `tls` feature) a mode that needs TLS. Messages never
/// repeat the URL, so they cannot leak a password in it.
pub(crate) fn prepare(url: &str) -> Result<(tokio_postgres::Config, Connector)> {
    let (driver_url, settings) = split_tls_settings(url)?;
    let mut config: tokio_postgres::Config = driver_url.parse().map_err(|error| {
        StoreError::invalid_input(format!(
            "the URL is not a valid PostgreSQL URL: {}",
            parse_problem(&error, may_hold_secret(&driver_url))
        ))
    })?;
    config.ssl_mode(settings.driver_mode());
    let connector = connector(&settings)?;
    Ok((config, connector))
}

/// Whether a connection string may carry a secret: a password in a URL's
/// user part, or a key such as `password` or `scram_client_key`.
fn may_hold_secret(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let user_password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .is_some_and(|(user, _)| user.contains(':'));
    user_password || lower.contains("password") || lower.contains("scram_")
}

/// What the driver found wrong with a connection string, in words that
/// quote nothing of it when it `may_hold_secret`: the driver's own details
/// may name an unknown option, which can be a piece of a password split
/// off at an `&`, `=` or space that was not percent-encoded, or show one
/// of its characters.
fn parse_problem(error: &tokio_postgres::Error, may_hold_secret: bool) -> String {
    /// libpq's connection keywords: an unknown option named so is safe to name.
    const LIBPQ_KEYS: &str = "host hostaddr port dbname user passfile require_auth \
        channel_binding connect_timeout client_encoding options application_name \
        fallback_application_name keepalives keepalives_idle keepalives_interval \
        keepalives_count keepalives_retries tcp_user_timeout replication gssencmode sslmode \
        sslnegotiation sslcompression sslcert sslkey sslcertmode sslrootcert sslcrl sslcrldir \
        sslsni requirepeer ssl_min_protocol_version ssl_max_protocol_version \
        min_protocol_version max_protocol_version krbsrvname gsslib gssdelegation service \
        target_session_attrs load_balance_hosts";
    let detail = std::error::Error::source(error)
        .map(ToString::to_string)
        .unwrap_or_default();
    if detail.starts_with("invalid value for option `") {
        // Names one of the driver's fixed keys, never the value.
        return format!("{detail}: check that key's value");
    }
    if let Some(name) = detail
        .strip_prefix("unknown option `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return if LIBPQ_KEYS.split_whitespace().any(|key| key == name) {
            format!("the driver does not support the option `{name}`: leave it out")
        } else if !may_hold_secret {
            format!("unknown option `{name}`: check the spelling of the URL's query keys")
        } else {
            "it holds an option the driver does not know (not named here: it may be a piece \
             of the password): check the query keys, and percent-encode `&`, `=`, `@`, `/` \
             and spaces in a password"
                .to_owned()
        };
    }
    if detail.starts_with("invalid utf-8") || detail.starts_with("incomplete utf-8") {
        return format!("a percent-escape does not decode to UTF-8 ({detail})");
    }
    match detail.as_str() {
        "unterminated parameter" => {
            "a query parameter has no `=`: write key=value pairs joined by &, \
             and percent-encode `&` in a password"
                .to_owned()
        }
        "unterminated quoted connection parameter value" => {
            "a quoted value has no closing `'`".to_owned()
        }
        "unexpected EOF" => "it ends where a value is expected".to_owned(),
        _ if detail.starts_with("unexpected character") => {
            "a keyword is not followed by `=`: write key=value pairs".to_owned()
        }
        // Anything else is not repeated: it could quote the password.
        _ => "check its form: postgres://USER@HOST:PORT/DATABASE?KEY=VALUE".to_owned(),
    }
}

#[cfg(not(feature = "tls"))]
fn connector(settings: &TlsSettings) -> Result<Connector> {
    match settings.mode {
        SslMode::Disable | SslMode::Prefer => Ok(tokio_postgres::NoTls),
        mode => Err(StoreError::invalid_input(format!(
            "sslmode={} needs TLS, which this build lacks: enable the `tls` feature of a2-store-postgres",
            mode.as_str()
        ))),
    }
}

#[cfg(feature = "tls")]
fn connector(settings: &TlsSettings) -> Result<Connector> {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::ClientConfig;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| StoreError::backend("setting up TLS", error))?;
    let config = match settings.verification() {
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verify::Unverified { provider }))
            .with_no_client_auth(),
        Some(check_name) => {
            let roots = Arc::new(root_store(settings.root_cert.as_ref())?);
            let chain = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                .build()
                .map_err(|error| StoreError::backend("setting up TLS verification", error))?;
            if check_name {
                builder.with_webpki_verifier(chain).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verify::ChainOnly { chain }))
                    .with_no_client_auth()
            }
        }
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The trusted roots: a PEM file's certificates or the system's.
#[cfg(feature = "tls")]
fn root_store(roots: Option<&RootCerts>) -> Result<rustls::RootCertStore> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let mut store = rustls::RootCertStore::empty();
    match roots {
        Some(RootCerts::File(path)) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|error| {
                    StoreError::invalid_input(format!(
                        "sslrootcert={shown}: cannot read the root certificates: {error}"
                    ))
                })?;
            for cert in certs {
                store.add(cert).map_err(|error| {
                    StoreError::invalid_input(format!(
                        "sslrootcert={shown}: a certificate in it is not usable as a root: {error}"
                    ))
                })?;
            }
            if store.is_empty() {
                return Err(StoreError::invalid_input(format!(
                    "sslrootcert={shown} holds no PEM certificate"
                )));
            }
        }
        Some(RootCerts::System) | None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(StoreError::invalid_input(
                    "no system root certificates were found to verify the server: give sslrootcert=PATH",
                ));
            }
        }
    }
    Ok(store)
}

/// The certificate verifiers rustls does not ship: none (`prefer`,
/// `require`) and chain without host name (`verify-ca`). Both still check
/// the handshake signatures, so the session key belongs to the certificate.
#[cfg(feature = "tls")]
mod verify {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

    /// Accepts any certificate: encryption without authentication, as libpq's
    /// `require` without a root certificate.
    #[derive(Debug)]
    pub(super) struct Unverified {
        pub(super) provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for Unverified {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// Checks the chain to a trusted root but not the host name
    /// (`verify-ca`): rustls checks the name only after the chain, so a
    /// name mismatch means the chain was good.
    #[derive(Debug)]
    pub(super) struct ChainOnly {
        pub(super) chain: Arc<WebPkiServerVerifier>,
    }

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            match self
                .chain
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Err(Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.chain.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.chain.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.chain.supported_verify_schemes()
        }
    }
}

/// Whether a driver error is a TLS failure, and which.
pub(crate) fn tls_failure(error: &tokio_postgres::Error) -> Option<TlsFailure> {
    if !error
        .to_string()
        .starts_with("error performing TLS handshake")
    {
        return None;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(failure) = certificate_error(current) {
            return Some(failure);
        }
        if current.to_string().contains("server does not support TLS") {
            return Some(TlsFailure::NotOffered);
        }
        source = current.source();
    }
    Some(TlsFailure::Handshake)
}

/// Whether `error` is rustls rejecting the server's certificate (directly
/// or wrapped in the I/O error the TLS stream reports), and how.
#[cfg(feature = "tls")]
fn certificate_error(error: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    let rustls_error = error.downcast_ref::<rustls::Error>().or_else(|| {
        error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    });
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        )) => Some(TlsFailure::WrongName),
        Some(rustls::Error::InvalidCertificate(_)) => Some(TlsFailure::Untrusted),
        _ => None,
    }
}

/// Without TLS support no certificate is ever checked.
#[cfg(not(feature = "tls"))]
fn certificate_error(_error: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    None
}

/// What went wrong with TLS on connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) enum TlsFailure {
    /// The server's certificate does not chain to a trusted root (or is
    /// otherwise invalid).
    Untrusted,
    /// The server's certificate is trusted but does not name the host.
    WrongName,
    /// The server does not offer TLS although the mode requires it.
    NotOffered,
    /// Any other handshake failure.
    Handshake,
}

impl TlsFailure {
    /// The message naming the failure and its remedy.
    pub(crate) fn message(self, what: &str) -> String {
        match self {
            Self::Untrusted => format!(
                "{what}: TLS verification failed: the server's certificate is not trusted — give its CA with sslrootcert=PATH, or use sslmode=require to encrypt without verifying"
            ),
            Self::WrongName => format!(
                "{what}: TLS verification failed: the server's certificate does not name the URL's host — connect by a name the certificate carries, or use sslmode=verify-ca to check only the chain"
            ),
            Self::NotOffered => format!(
                "{what}: TLS failed: the server does not offer TLS — enable ssl on the server, or use sslmode=prefer or sslmode=disable"
            ),
            Self::Handshake => format!(
                "{what}: the TLS handshake with the server failed — check the server's TLS setup and the URL's sslmode"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_split_off_urls_and_key_value_strings() {
        let (rest, settings) = split_tls_settings(
            "postgres://u:pw@h/db?sslmode=verify-full&connect_timeout=3&sslrootcert=/etc/ca%20x.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:pw@h/db?connect_timeout=3");
        assert_eq!(settings.mode, SslMode::VerifyFull);
        assert_eq!(
            settings.root_cert,
            Some(RootCerts::File("/etc/ca x.pem".into()))
        );
        let (rest, settings) = split_tls_settings("host=h sslmode=require user=u").unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(settings.mode, SslMode::Require);
        let (rest, settings) = split_tls_settings("postgres://h/db").unwrap();
        assert_eq!(rest, "postgres://h/db");
        assert_eq!(settings, TlsSettings::default());
        let (_, settings) = split_tls_settings("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(settings.root_cert, Some(RootCerts::System));
        assert!(split_tls_settings("postgres://h/db?sslmode=strict").is_err());
        assert!(split_tls_settings("postgres://h/db?sslmode=require&sslmode=disable").is_err());
    }

    /// Quoted values keep their spaces and are never read as keys of their
    /// own, and a bad sslmode value is not echoed (it may be a piece of a
    /// password).
    #[test]
    fn key_value_strings_are_read_as_libpq_reads_them() {
        let (rest, settings) = split_tls_settings(
            "host=h password = 'a  b sslmode=x \\' q' sslmode = 'verify-ca' user=u",
        )
        .unwrap();
        assert_eq!(rest, "host=h password = 'a  b sslmode=x \\' q' user=u");
        assert_eq!(settings.mode, SslMode::VerifyCa);
        let error = split_tls_settings("host=h sslmode=S3cret").unwrap_err();
        assert!(!error.to_string().contains("S3cret"), "{error}");
        let error = split_tls_settings("postgres://u@h/db?sslmode=S3cret").unwrap_err();
        assert!(!error.to_string().contains("S3cret"), "{error}");
        // An unterminated quote is one last pair, for the driver to refuse.
        let (rest, _) = split_tls_settings("host=h password='open").unwrap();
        assert_eq!(rest, "host=h password='open");
    }

    #[test]
    fn modes_follow_libpq() {
        let with = |mode, root_cert| TlsSettings { mode, root_cert }.verification();
        assert_eq!(with(SslMode::Disable, None), None);
        assert_eq!(with(SslMode::Prefer, None), None);
        assert_eq!(with(SslMode::Require, None), None);
        let file = Some(RootCerts::File("ca.pem".into()));
        assert_eq!(with(SslMode::Require, file.clone()), Some(false));
        assert_eq!(with(SslMode::VerifyCa, None), Some(false));
        assert_eq!(with(SslMode::VerifyFull, file), Some(true));
        for mode in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert_eq!(SslMode::parse(mode).map(SslMode::as_str), Some(mode));
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_missing_root_file_is_named() {
        let Err(err) =
            prepare("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
        else {
            panic!("a missing root file was accepted");
        };
        assert_eq!(err.code(), a2_store_api::ErrorCode::InvalidInput);
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }
}
