//! Marks a build made without `A2_POSTGRES_URL` (`cfg(a2_postgres_unset)`),
//! so the tests that need a server are reported as ignored, not passed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(a2_postgres_unset)");
    println!("cargo::rerun-if-env-changed=A2_POSTGRES_URL");
    let unset = std::env::var_os("A2_POSTGRES_URL").is_none_or(|url| url.is_empty());
    if unset {
        println!("cargo::rustc-cfg=a2_postgres_unset");
    }
}
