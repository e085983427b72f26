//! Marks a build made without `A2_POSTGRES_URL` (`cfg(a2_postgres_unset)`),
//! so the tests that need a server are reported as ignored, not passed; and
//! one on a machine without PostgreSQL's server binaries
//! (`cfg(a2_pg_bin_missing)`: no `initdb`/`pg_ctl` under `A2_PG_BIN` or
//! `/usr/lib/postgresql/*/bin`), so the tests that start a private cluster
//! are too.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(a2_postgres_unset)");
    println!("cargo::rerun-if-env-changed=A2_POSTGRES_URL");
    let unset = std::env::var_os("A2_POSTGRES_URL").is_none_or(|url| url.is_empty());
    if unset {
        println!("cargo::rustc-cfg=a2_postgres_unset");
    }
    println!("cargo::rustc-check-cfg=cfg(a2_pg_bin_missing)");
    println!("cargo::rerun-if-env-changed=A2_PG_BIN");
    if !server_binaries_installed() {
        println!("cargo::rustc-cfg=a2_pg_bin_missing");
    }
}

/// Whether `initdb` and `pg_ctl` are in `A2_PG_BIN` or in a
/// `/usr/lib/postgresql/<version>/bin`.
fn server_binaries_installed() -> bool {
    let has_both =
        |bin: &std::path::Path| bin.join("initdb").exists() && bin.join("pg_ctl").exists();
    if let Some(dir) = std::env::var_os("A2_PG_BIN") {
        return has_both(std::path::Path::new(&dir));
    }
    std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .filter_map(|entry| entry.ok())
            .any(|entry| has_both(&entry.path().join("bin")))
    })
}
