//! What the crash tests share: a child process that is this test binary
//! re-executed, and killed with SIGKILL while it works.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A random number below `bound` (not 0), different on every call.
pub fn random_below(bound: u64) -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(bound);
    hasher.finish() % bound
}

/// The names of the environment variables that make a run of the test
/// binary the child: the database, the run number and the log.
pub struct ChildVars {
    pub db: &'static str,
    pub run: &'static str,
    pub log: &'static str,
}

/// Starts this test binary again as the child of `test` for run `run`,
/// writing its acknowledgements to `log`.
pub fn spawn_child(test: &str, vars: &ChildVars, db: &Path, run: usize, log: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(vars.db, db)
        .env(vars.run, run.to_string())
        .env(vars.log, log)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child")
}

/// SIGKILLs a child that must still be running, and reaps it.
pub fn kill_running(process: &mut Child) {
    if let Some(status) = process.try_wait().unwrap() {
        panic!("the child stopped on its own ({status}): it must run until killed");
    }
    process.kill().expect("SIGKILL the child");
    process.wait().unwrap();
}
