//! Data keys: [`SecretKey`], the [`KeyProvider`] trait apps implement, and
//! [`Keyring`], an in-memory provider with a text, environment and file
//! loader.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use a2_store_api::{Result, StoreError};
use aes_gcm_siv::{Aes256GcmSiv, KeyInit};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// The environment variable [`Keyring::from_env`] reads by default.
pub const KEYS_ENV: &str = "A2_STORE_KEYS";

/// The longest key id, in bytes: it is stored with every encrypted payload.
pub const MAX_KEY_ID_BYTES: usize = 64;

/// Domain separation of the two keys derived from a data key.
const CIPHER_LABEL: &[u8] = b"a2-store payload encryption v1: AES-256-GCM-SIV key";
const NONCE_LABEL: &[u8] = b"a2-store payload encryption v1: synthetic nonce key";

/// A 256-bit data key, as the encryption layer uses it: the cipher key and
/// the synthetic-nonce key are derived from it once (HMAC-SHA256 under two
/// labels) and the raw bytes are wiped. Cheap to clone (shared).
///
/// Its `Debug` output never shows key material, and no error of this
/// crate ever contains it.
///
/// ```
/// use a2_store::SecretKey;
///
/// let key = SecretKey::from_bytes([7; 32]);
/// let same = SecretKey::from_base64("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=").unwrap();
/// assert_eq!(format!("{key:?}"), "SecretKey(..)");
/// # let _ = same;
/// ```
#[derive(Clone)]
pub struct SecretKey(Arc<Derived>);

/// What a [`SecretKey`] holds: the derived keys, ready to use.
pub(crate) struct Derived {
    /// The AEAD, keyed with the derived cipher key.
    pub(crate) cipher: Aes256GcmSiv,
    /// HMAC-SHA256 keyed with the derived nonce key (cloned per payload).
    pub(crate) nonce_mac: Hmac<Sha256>,
}

impl SecretKey {
    /// A key from its 32 bytes (generate them with a CSPRNG, e.g.
    /// `openssl rand -base64 32`).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        let master = Zeroizing::new(bytes);
        let cipher_key = Zeroizing::new(derive(&master, CIPHER_LABEL));
        let nonce_key = Zeroizing::new(derive(&master, NONCE_LABEL));
        let cipher = Aes256GcmSiv::new(&(*cipher_key).into());
        Self(Arc::new(Derived {
            cipher,
            nonce_mac: hmac_of(&nonce_key),
        }))
    }

    /// A key from the standard base64 of its 32 bytes (padding optional).
    /// An `InvalidInput` error says what is wrong without repeating the text.
    pub fn from_base64(text: &str) -> Result<Self> {
        let text = text.trim();
        let decoded = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
                .map_err(|_| {
                    StoreError::invalid_input(
                        "a data key is not valid base64: give the standard base64 of 32 random bytes",
                    )
                })?,
        );
        let bytes: [u8; 32] = decoded.as_slice().try_into().map_err(|_| {
            StoreError::invalid_input(format!(
                "a data key is {} bytes long: a key is exactly 32 bytes (44 base64 characters)",
                decoded.len()
            ))
        })?;
        let bytes = Zeroizing::new(bytes);
        Ok(Self::from_bytes(*bytes))
    }

    pub(crate) fn derived(&self) -> &Derived {
        &self.0
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// HMAC-SHA256 keyed with `key` (32 bytes, zero-padded to the block as
/// HMAC itself pads shorter keys).
fn hmac_of(key: &[u8; 32]) -> Hmac<Sha256> {
    let mut block = Zeroizing::new([0u8; 64]);
    block[..32].copy_from_slice(key);
    <Hmac<Sha256> as KeyInit>::new(&(*block).into())
}

/// HMAC-SHA256(master, label): a derived 32-byte key.
fn derive(master: &[u8; 32], label: &[u8]) -> [u8; 32] {
    let mut mac = hmac_of(master);
    mac.update(label);
    mac.finalize().into_bytes().into()
}

/// Where the encryption layer gets its keys: the current key (new payloads
/// are encrypted with it, its id stored beside them) and any key by id
/// (to read what older keys wrote). Implement it over a KMS or a secret
/// manager; [`Keyring`] is the in-memory one.
///
/// A provider must keep every key whose id rows still name: a payload whose
/// key is gone cannot be read (a `Backend` error naming the key id).
///
/// ```
/// use a2_store::{KeyProvider, Keyring, SecretKey};
///
/// let ring = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32])).unwrap();
/// let (kid, _key) = ring.current().unwrap();
/// assert_eq!(&*kid, "k1");
/// assert!(ring.key("k1").is_some() && ring.key("k9").is_none());
/// ```
pub trait KeyProvider: Send + Sync + fmt::Debug {
    /// The id and key new payloads are encrypted with. An error (say, no
    /// key loaded) fails the write that asked, naming no key material.
    fn current(&self) -> Result<(Arc<str>, SecretKey)>;

    /// The key with id `kid`, `None` when this provider does not hold it.
    fn key(&self, kid: &str) -> Option<SecretKey>;
}

/// Keys loaded at once, one of them current: an in-memory [`KeyProvider`].
/// Clones share the ring, so a key added or made current through one clone
/// is seen by every store using another (rotation without a restart).
///
/// Rotation: [`insert`](Self::insert) the new key, then
/// [`set_current`](Self::set_current) it. New payloads are encrypted with
/// it; rows written under older keys stay readable as long as their keys
/// stay in the ring.
///
/// ```
/// use a2_store::{KeyProvider, Keyring, SecretKey};
///
/// let ring = Keyring::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap();
/// ring.insert("k2", SecretKey::from_bytes([2; 32])).unwrap();
/// ring.set_current("k2").unwrap();
/// assert_eq!(&*ring.current().unwrap().0, "k2");
/// assert!(ring.key("k1").is_some()); // still reads what k1 wrote
/// assert_eq!(ring.key_ids(), ["k1", "k2"]);
/// ```
#[derive(Clone, Default)]
pub struct Keyring(Arc<RwLock<Ring>>);

#[derive(Default)]
struct Ring {
    keys: BTreeMap<Arc<str>, SecretKey>,
    current: Option<Arc<str>>,
}

impl Keyring {
    /// An empty ring (a write through the layer fails until a key is added).
    pub fn new() -> Self {
        Self::default()
    }

    /// The ring with `key` added as `kid`; the first key added is current.
    pub fn with_key(self, kid: &str, key: SecretKey) -> Result<Self> {
        self.insert(kid, key)?;
        Ok(self)
    }

    /// Adds `key` as `kid` (current if it is the first key). Refused with
    /// `InvalidInput` when `kid` is malformed or already holds a key: a key
    /// id names one key for good, since rows store it.
    pub fn insert(&self, kid: &str, key: SecretKey) -> Result<()> {
        check_key_id(kid)?;
        let mut ring = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if ring.keys.contains_key(kid) {
            return Err(StoreError::invalid_input(format!(
                "key id '{kid}' is already in the keyring: give a new key a new id"
            )));
        }
        let kid: Arc<str> = Arc::from(kid);
        ring.keys.insert(Arc::clone(&kid), key);
        if ring.current.is_none() {
            ring.current = Some(kid);
        }
        Ok(())
    }

    /// Makes `kid` the key new payloads are encrypted with.
    pub fn set_current(&self, kid: &str) -> Result<()> {
        let mut ring = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let Some((kid, _)) = ring.keys.get_key_value(kid) else {
            return Err(StoreError::invalid_input(format!(
                "key id '{kid}' is not in the keyring: insert the key before making it current"
            )));
        };
        ring.current = Some(Arc::clone(kid));
        Ok(())
    }

    /// The id of the current key, if any key is loaded.
    pub fn current_id(&self) -> Option<String> {
        let ring = self.0.read().unwrap_or_else(PoisonError::into_inner);
        ring.current.as_deref().map(str::to_owned)
    }

    /// Every key id held, sorted.
    pub fn key_ids(&self) -> Vec<String> {
        let ring = self.0.read().unwrap_or_else(PoisonError::into_inner);
        ring.keys.keys().map(|kid| kid.to_string()).collect()
    }

    /// A ring from text: entries `kid:<base64 of 32 bytes>`, separated by
    /// commas or newlines; blank lines and lines starting with `#` are
    /// skipped. The **last** entry is current, so rotating means appending
    /// a line. Errors name the entry (its position and key id), never the
    /// key.
    pub fn parse(text: &str) -> Result<Self> {
        let ring = Self::new();
        let mut last = None;
        let entries = text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|entry| !entry.is_empty() && !entry.starts_with('#'));
        for (position, entry) in entries.enumerate() {
            let number = position + 1;
            let Some((kid, key)) = entry.split_once(':') else {
                return Err(StoreError::invalid_input(format!(
                    "key entry {number} has no ':': write each key as kid:<base64 of 32 bytes>"
                )));
            };
            let kid = kid.trim();
            check_key_id(kid).map_err(|error| prefixed(&format!("key entry {number}"), &error))?;
            let key = SecretKey::from_base64(key)
                .map_err(|error| prefixed(&format!("key entry {number} ('{kid}')"), &error))?;
            ring.insert(kid, key)?;
            last = Some(kid.to_owned());
        }
        let Some(last) = last else {
            return Err(StoreError::invalid_input(
                "no key found: give at least one kid:<base64 of 32 bytes>",
            ));
        };
        ring.set_current(&last)?;
        Ok(ring)
    }

    /// A ring from the environment variable `var` (see [`parse`](Self::parse);
    /// [`KEYS_ENV`], `A2_STORE_KEYS`, is the conventional name), e.g.
    /// `A2_STORE_KEYS=k1:<base64>,k2:<base64>`.
    ///
    /// ```
    /// use a2_store::Keyring;
    ///
    /// // Unset: an error naming the variable (never a key).
    /// let error = Keyring::from_env("A2_STORE_KEYS_OF_NO_APP").unwrap_err();
    /// assert!(error.to_string().contains("A2_STORE_KEYS_OF_NO_APP is not set"));
    /// ```
    pub fn from_env(var: &str) -> Result<Self> {
        let text = Zeroizing::new(std::env::var(var).map_err(|_| {
            StoreError::invalid_input(format!(
                "environment variable {var} is not set (or not UTF-8): set it to kid:<base64 of 32 bytes>,..."
            ))
        })?);
        Self::parse(&text).map_err(|error| prefixed(var, &error))
    }

    /// A ring from a file with one `kid:<base64>` per line (see
    /// [`parse`](Self::parse)); the last line is current.
    ///
    /// ```
    /// use a2_store::Keyring;
    ///
    /// let path = std::env::temp_dir().join(format!("a2-doc-keys-{}", std::process::id()));
    /// std::fs::write(&path, "# rotated 2026-01\nk1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\nk2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n").unwrap();
    /// let ring = Keyring::from_file(&path).unwrap();
    /// # std::fs::remove_file(&path).unwrap();
    /// assert_eq!(ring.current_id().as_deref(), Some("k2"));
    /// ```
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|error| {
            StoreError::invalid_input(format!(
                "cannot read the key file {}: {error}",
                path.display()
            ))
        })?);
        Self::parse(&text).map_err(|error| prefixed(&path.display().to_string(), &error))
    }
}

impl KeyProvider for Keyring {
    fn current(&self) -> Result<(Arc<str>, SecretKey)> {
        let ring = self.0.read().unwrap_or_else(PoisonError::into_inner);
        ring.current
            .as_ref()
            .and_then(|kid| Some((Arc::clone(kid), ring.keys.get(kid)?.clone())))
            .ok_or_else(|| {
                StoreError::invalid_input(
                    "the keyring holds no key: add one before writing through the encryption layer",
                )
            })
    }

    fn key(&self, kid: &str) -> Option<SecretKey> {
        let ring = self.0.read().unwrap_or_else(PoisonError::into_inner);
        ring.keys.get(kid).cloned()
    }
}

impl fmt::Debug for Keyring {
    /// The key ids and the current one; never key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ring = self.0.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Keyring")
            .field("keys", &ring.keys.keys().collect::<Vec<_>>())
            .field("current", &ring.current)
            .finish()
    }
}

/// A key id: 1 to [`MAX_KEY_ID_BYTES`] of ASCII letters, digits, `.`, `_`, `-`.
fn check_key_id(kid: &str) -> Result<()> {
    let valid = !kid.is_empty()
        && kid.len() <= MAX_KEY_ID_BYTES
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::invalid_input(format!(
            "key id {kid:?} is not valid: use 1 to {MAX_KEY_ID_BYTES} ASCII letters, digits, '.', '_' or '-'"
        )))
    }
}

/// `error`'s message (an `InvalidInput`) with `what` in front.
fn prefixed(what: &str, error: &StoreError) -> StoreError {
    let message = error.to_string();
    let message = message.strip_prefix("invalid input: ").unwrap_or(&message);
    StoreError::invalid_input(format!("{what}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI";

    #[test]
    fn parse_takes_commas_lines_and_comments_and_makes_the_last_current() {
        let ring = Keyring::parse(&format!("# keys\nk1:{K1}\n\n k2 : {K2} \n")).unwrap();
        assert_eq!(ring.key_ids(), ["k1", "k2"]);
        assert_eq!(ring.current_id().as_deref(), Some("k2"));
        let ring = Keyring::parse(&format!("k2:{K2},k1:{K1}")).unwrap();
        assert_eq!(ring.current_id().as_deref(), Some("k1"));
    }

    #[test]
    fn bad_entries_are_named_without_their_key() {
        let cases = [
            (String::new(), "no key found"),
            ("k1".to_owned(), "key entry 1 has no ':'"),
            (
                format!("k1:{K1},bad id:{K2}"),
                "key entry 2: key id \"bad id\"",
            ),
            (
                "k1:AAAA".to_owned(),
                "key entry 1 ('k1'): a data key is 3 bytes",
            ),
            ("k1:not*base64".to_owned(), "not valid base64"),
            (format!("k1:{K1},k1:{K2}"), "already in the keyring"),
        ];
        for (text, expected) in cases {
            let error = Keyring::parse(&text).unwrap_err();
            let message = error.to_string();
            assert_eq!(error.code(), a2_store_api::ErrorCode::InvalidInput);
            assert!(message.contains(expected), "{message}");
            assert!(!message.contains(K1) && !message.contains(K2), "{message}");
        }
    }

    #[test]
    fn debug_shows_ids_never_keys() {
        let ring = Keyring::parse(&format!("k1:{K1}")).unwrap();
        let shown = format!("{ring:?} {:?}", ring.current().unwrap());
        assert!(
            shown.contains("k1") && shown.contains("SecretKey(..)"),
            "{shown}"
        );
        assert!(!shown.contains(K1));
    }

    #[test]
    fn current_needs_a_key_and_set_current_a_known_id() {
        let ring = Keyring::new();
        assert!(ring.current().is_err());
        assert!(ring.set_current("k1").is_err());
        ring.insert("k1", SecretKey::from_bytes([1; 32])).unwrap();
        ring.insert("k2", SecretKey::from_bytes([2; 32])).unwrap();
        assert_eq!(&*ring.current().unwrap().0, "k1");
        ring.clone().set_current("k2").unwrap();
        assert_eq!(&*ring.current().unwrap().0, "k2", "clones share the ring");
    }

    #[test]
    fn from_file_and_env_read_the_same_format() {
        let dir = std::env::temp_dir().join(format!("a2-keys-{}", std::process::id()));
        std::fs::write(&dir, format!("k1:{K1}\nk2:{K2}\n")).unwrap();
        let ring = Keyring::from_file(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(ring.current_id().as_deref(), Some("k2"));
        let missing = Keyring::from_file(&dir).unwrap_err();
        assert!(missing.to_string().contains("cannot read the key file"));
        let unset = Keyring::from_env("A2_STORE_KEYS_SURELY_UNSET").unwrap_err();
        assert!(unset.to_string().contains("is not set"));
    }
}
