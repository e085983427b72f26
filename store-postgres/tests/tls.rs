#![cfg(feature = "tls")]
//! TLS against a private PostgreSQL cluster this test starts with `ssl=on`,
//! a CA and server certificate it makes, and a `pg_hba.conf` that accepts
//! TCP clients only over TLS (`hostssl`). The cluster is stopped and its
//! directory removed when the test ends, pass or fail.
//!
//! Reported as ignored when the PostgreSQL server binaries (`initdb`,
//! `pg_ctl`) were not installed at build time (`cfg(a2_pg_bin_missing)`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use a2_store_api::ErrorCode;
use a2_store_postgres::{PostgresOptions, PostgresStore};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// Where Debian and Ubuntu install the server binaries, newest first.
fn server_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("A2_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a server binary, as user `postgres` when we are root (initdb and
/// the server refuse to run as root).
fn run(bin: &Path, tool: &str, args: &[&str]) {
    let program = bin.join(tool);
    let output = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&program)
            .args(args)
            .output()
    } else {
        Command::new(&program).args(args).output()
    }
    .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{tool} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A private cluster; stopped (immediately) and deleted on drop.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    ca: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let program = self.bin.join("pg_ctl");
        let args = [
            "-D",
            data.to_str().unwrap_or(""),
            "-m",
            "immediate",
            "-w",
            "stop",
        ];
        let _ = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        };
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// A CA, and a server certificate it signs for `localhost` and 127.0.0.1.
fn make_certificates(dir: &Path) -> PathBuf {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "a2 test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let server_key = KeyPair::generate().expect("server key");
    let mut server_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server = server_params
        .signed_by(&server_key, &ca, &ca_key)
        .expect("server certificate");
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).expect("write ca.crt");
    // A CA that signed nothing here: trusting only it is trusting the wrong CA.
    let other_key = KeyPair::generate().expect("other CA key");
    let mut other_params = CertificateParams::new(Vec::<String>::new()).expect("other params");
    other_params
        .distinguished_name
        .push(DnType::CommonName, "a2 unrelated CA");
    other_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = other_params.self_signed(&other_key).expect("other CA");
    std::fs::write(dir.join("other-ca.crt"), other.pem()).expect("write other-ca.crt");
    std::fs::write(dir.join("server.crt"), server.pem()).expect("write server.crt");
    let key_path = dir.join("server.key");
    std::fs::write(&key_path, server_key.serialize_pem()).expect("write server.key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
        .expect("chmod server.key");
    ca_path
}

fn start_cluster(bin: PathBuf) -> Cluster {
    let dir = tempfile::Builder::new()
        .prefix("a2-tls-")
        .tempdir()
        .expect("tempdir");
    let ca = make_certificates(dir.path());
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(status.success(), "chown to postgres failed");
    }
    let data = dir.path().join("data");
    let data_arg = data.to_str().expect("utf-8 temp path");
    run(
        &bin,
        "initdb",
        &["-D", data_arg, "-U", "postgres", "-A", "trust", "--no-sync"],
    );
    let port = free_port();
    let base = dir.path().display().to_string();
    let conf = format!(
        "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n\
         ssl = on\nssl_cert_file = '{base}/server.crt'\nssl_key_file = '{base}/server.key'\n\
         fsync = off\n"
    );
    let mut existing = std::fs::read_to_string(data.join("postgresql.conf")).expect("conf");
    existing.push_str(&conf);
    std::fs::write(data.join("postgresql.conf"), existing).expect("write conf");
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .expect("write pg_hba.conf");
    let cluster = Cluster { bin, dir, port, ca };
    let log = cluster.dir.path().join("server.log");
    run(
        &cluster.bin,
        "pg_ctl",
        &[
            "-D",
            data_arg,
            "-l",
            log.to_str().expect("utf-8 log path"),
            "-w",
            "-t",
            "60",
            "start",
        ],
    );
    cluster
}

async fn connect(url: &str) -> a2_store_api::Result<PostgresStore> {
    PostgresStore::connect(
        url,
        PostgresOptions {
            pool_size: 1,
            ..PostgresOptions::default()
        },
    )
    .await
}

#[cfg_attr(
    a2_pg_bin_missing,
    ignore = "needs PostgreSQL's server binaries (initdb, pg_ctl): install postgresql or set A2_PG_BIN"
)]
#[tokio::test]
async fn sslmodes_against_a_tls_only_server() {
    let Some(bin) = server_bin() else {
        eprintln!(
            "\ntls: not run: the PostgreSQL server binaries are gone since the build: no initdb, pg_ctl under /usr/lib/postgresql/*/bin; install postgresql or set A2_PG_BIN\n"
        );
        return;
    };
    let cluster = start_cluster(bin);
    let port = cluster.port;
    let ca = cluster.ca.display().to_string();
    let at =
        |host: &str, query: &str| format!("postgres://postgres@{host}:{port}/postgres?{query}");

    // Encrypted without verification.
    let store = connect(&at("127.0.0.1", "sslmode=require"))
        .await
        .expect("sslmode=require connects");
    drop(store);
    connect(&at("127.0.0.1", "sslmode=prefer"))
        .await
        .expect("sslmode=prefer connects over TLS");

    // Chain and host name against the test's CA (IP and DNS names).
    connect(&at(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-full with the CA connects");
    connect(&at(
        "localhost",
        &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-full with the CA connects by name");

    // A name the certificate does not carry: only verify-ca accepts it.
    let wrong_name = format!("hostaddr=127.0.0.1&sslrootcert={ca}");
    connect(&at(
        "db.example",
        &format!("sslmode=verify-ca&{wrong_name}"),
    ))
    .await
    .expect("verify-ca ignores the host name");
    let err = connect(&at(
        "db.example",
        &format!("sslmode=verify-full&{wrong_name}"),
    ))
    .await
    .expect_err("verify-full checks the host name");
    assert_eq!(err.code(), ErrorCode::Backend, "{err}");
    assert!(err.to_string().contains("TLS verification failed"), "{err}");
    assert!(
        err.to_string().contains("does not name the URL's host"),
        "{err}"
    );

    // Without the CA: trusting another CA, or the system's roots.
    let other = cluster
        .dir
        .path()
        .join("other-ca.crt")
        .display()
        .to_string();
    let err = connect(&at(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .await
    .expect_err("verify-full without the CA must fail");
    assert_eq!(err.code(), ErrorCode::Backend, "{err}");
    assert!(err.to_string().contains("TLS verification failed"), "{err}");
    assert!(err.to_string().contains("not trusted"), "{err}");
    assert!(err.to_string().contains("sslrootcert"), "{err}");
    let err = connect(&at("127.0.0.1", "sslmode=verify-full"))
        .await
        .expect_err("the system roots do not trust the test's CA");
    // A machine without a system trust store cannot verify at all.
    let text = err.to_string();
    assert!(
        text.contains("TLS verification failed") || text.contains("no system root certificates"),
        "{err}"
    );

    // The server takes TCP clients only over TLS.
    let err = connect(&at("127.0.0.1", "sslmode=disable"))
        .await
        .expect_err("sslmode=disable against hostssl must fail");
    assert!(err.to_string().contains("only over TLS"), "{err}");
}
