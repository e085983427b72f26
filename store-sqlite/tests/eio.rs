//! A disk that fails with `EIO`: device-mapper is not available where
//! these tests run, so `tests/eio_shim.c`, compiled here with `gcc`, is
//! preloaded (`LD_PRELOAD`) into a child process (this test binary run
//! again on its ignored test `eio_child`) and makes reads, writes and
//! fsyncs of the files under one directory fail while a control file
//! says so. SQLite calls them through libc, so the shim sees every file
//! access of the store; nothing else of the parent is affected.
//!
//! The child turns faults on and off around single calls (an append, a
//! claim, a completion, a checkpoint, the fsync at commit, reads) and
//! checks that each failing call returns a typed `Backend` error naming
//! the file, never panics or hangs, and changed nothing (or, when the
//! store could not overwrite a commit whose fsync failed, `Unavailable`,
//! the one error whose call may have been applied), and that the
//! store works again without a reopen once the fault is lifted. It ends
//! by aborting (a crash: no checkpoint, the WAL is recovered by the next
//! open), and the parent reopens the file without the shim: it must hold
//! exactly what the child was told was committed, and pass `PRAGMA
//! integrity_check`.
//!
//! Linux only: the shim finds a descriptor's file in `/proc/self/fd`.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, Cursor, ErrorCode, Head, NewEvent,
    ReadOptions, Store, StoreError, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

/// The directory whose files fail (the shim reads it too).
const DATA: &str = "A2_EIO_DIR";
/// The directory of the control files (the shim reads it too).
const CONTROL: &str = "A2_EIO_CONTROL";
/// Which scenario the child runs.
const ROLE: &str = "A2_EIO_ROLE";
/// Where the child writes what it was told (`ACK <id>`, `UNKNOWN <id>`).
const ACKS: &str = "A2_EIO_ACKS";
const CHILD_TEST: &str = "eio_child";
/// How long a child may run before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(60);
/// How long one store call may take in the child.
const CALL_LIMIT: Duration = Duration::from_secs(10);

#[test]
fn a_failing_disk_fails_calls_typed_and_keeps_exactly_what_was_acknowledged() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let shim = build_shim(&root);
    let data = root.join("data");
    let control = root.join("control");
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&control).unwrap();
    let db = data.join("eio.db");
    let mut expected = Vec::new();
    for role in ["faults", "fsync-once", "fsync-stuck"] {
        let acks = root.join(format!("acks-{role}"));
        let status = run_child(&shim, &data, &control, &acks, role);
        let told = std::fs::read_to_string(&acks).unwrap_or_default();
        assert!(
            told.ends_with("DONE\n"),
            "child {role} did not finish ({status}):\n{told}"
        );
        assert_eq!(
            status.signal(),
            Some(6),
            "the child must end by aborting (SIGABRT): {status}"
        );
        // An unknown outcome is discarded by the next acknowledged write;
        // left last before the crash, recovery applies it (which is why
        // its message says the outcome is unknown).
        let mut unknown = Vec::new();
        for line in told.lines() {
            if let Some(id) = line.strip_prefix("ACK ") {
                unknown.clear();
                expected.push(id.to_owned());
            } else if let Some(id) = line.strip_prefix("UNKNOWN ") {
                unknown.push(id.to_owned());
            }
        }
        assert!(
            role != "fsync-stuck" || !unknown.is_empty(),
            "the stuck fsync left no unknown outcome"
        );
        expected.extend(unknown);
        verify(&db, &expected);
        let _ = std::fs::remove_dir_all(&control);
        std::fs::create_dir(&control).unwrap();
    }
    eprintln!(
        "{} events verified after 3 crashed children in {:?}",
        expected.len(),
        started.elapsed()
    );
}

/// Compiles the shim into `dir`; a test that cannot build it fails.
fn build_shim(dir: &Path) -> PathBuf {
    let source = dir.join("eio_shim.c");
    std::fs::write(&source, include_str!("eio_shim.c")).unwrap();
    let library = dir.join("libeio_shim.so");
    let output = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run gcc to build the EIO shim (this test needs a C compiler): {error}")
        });
    assert!(
        output.status.success(),
        "gcc could not build the EIO shim:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    library
}

/// Runs the child `role` with the shim preloaded; kills it (and fails) if
/// it runs longer than [`CHILD_LIMIT`].
fn run_child(shim: &Path, data: &Path, control: &Path, acks: &Path, role: &str) -> ExitStatus {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("LD_PRELOAD", shim)
        .env(DATA, data)
        .env(CONTROL, control)
        .env(ACKS, acks)
        .env(ROLE, role)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the child");
    let deadline = Instant::now() + CHILD_LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {role} hung (over {CHILD_LIMIT:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reopens the database without the shim: its log holds exactly
/// `expected` (ids in index order), and the file is sound.
fn verify(db: &Path, expected: &[String]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(db, SqliteOptions::default()).expect("reopen");
        let rows = store.read("s", ReadOptions::default()).await.unwrap();
        let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(ids, expected, "the log is not what was acknowledged");
        for (offset, row) in rows.iter().enumerate() {
            assert_eq!(row.index, offset as u64 + 1, "indexes are contiguous");
        }
    });
    let conn = rusqlite::Connection::open(db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// The child: runs its role's scenario on the database under the failing
/// directory, then aborts.
#[test]
#[ignore = "the child process of a_failing_disk_fails_calls_typed_and_keeps_exactly_what_was_acknowledged, run by it with the shim preloaded"]
fn eio_child() {
    let (Ok(data), Ok(role)) = (std::env::var(DATA), std::env::var(ROLE)) else {
        panic!(
            "run by a_failing_disk_fails_calls_typed_and_keeps_exactly_what_was_acknowledged only"
        );
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut child = Child::new(Path::new(&data));
    runtime.block_on(async {
        match role.as_str() {
            "faults" => faults(&mut child).await,
            "fsync-once" => fsync_once(&mut child).await,
            "fsync-stuck" => fsync_stuck(&mut child).await,
            other => panic!("unknown role {other}"),
        }
    });
    child.tell("DONE");
    // A crash: no store is closed, nothing checkpointed.
    std::process::abort();
}

/// What the child works with.
struct Child {
    db: PathBuf,
    control: PathBuf,
    acks: std::fs::File,
    store: Option<SqliteStore>,
}

impl Child {
    fn new(data: &Path) -> Self {
        let acks = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::env::var(ACKS).unwrap())
            .unwrap();
        let mut child = Self {
            db: data.join("eio.db"),
            control: PathBuf::from(std::env::var(CONTROL).unwrap()),
            acks,
            store: None,
        };
        child.check_the_shim(data);
        child.store = Some(child.open().unwrap());
        child
    }

    fn open(&self) -> Result<SqliteStore, StoreError> {
        SqliteStore::open(
            &self.db,
            SqliteOptions {
                durability: Durability::Full,
                ..SqliteOptions::default()
            },
        )
    }

    fn store(&self) -> &SqliteStore {
        self.store.as_ref().unwrap()
    }

    /// A file written under the failing directory fails with EIO while a
    /// `write` fault is on: the shim is loaded and sees this process.
    fn check_the_shim(&self, data: &Path) {
        self.fault("write", "");
        let error = std::fs::write(data.join("probe"), "x").expect_err(
            "the EIO shim is not active in the child (was LD_PRELOAD ignored or the binary linked statically?)",
        );
        assert_eq!(error.raw_os_error(), Some(5), "{error}");
        self.lift("write");
        std::fs::write(data.join("probe"), "x").unwrap();
        assert_eq!(self.hits(), "write other\n");
    }

    /// Turns a fault on: `name` is a class (`write`, `read`, `sync`),
    /// maybe limited to a kind of file (`write-wal`, `sync-db`, ...);
    /// `spec` "", "N" or "N M" (see the shim).
    fn fault(&self, name: &str, spec: &str) {
        std::fs::write(self.control.join(name), spec).unwrap();
    }

    fn lift(&self, name: &str) {
        std::fs::remove_file(self.control.join(name)).unwrap();
    }

    /// The faults the shim injected since the last call.
    fn hits(&self) -> String {
        let log = self.control.join("log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(log);
        text
    }

    fn tell(&mut self, line: &str) {
        writeln!(self.acks, "{line}").unwrap();
    }

    /// Appends `events`; on success records their ids as acknowledged.
    async fn append(&mut self, events: Vec<NewEvent>) -> Result<(), StoreError> {
        let ids: Vec<String> = events.iter().filter_map(|e| e.id.clone()).collect();
        within(self.store().append("s", events, Default::default())).await?;
        for id in ids {
            self.tell(&format!("ACK {id}"));
        }
        Ok(())
    }

    async fn state(&self) -> State {
        let store = self.store();
        State {
            ids: within(store.read("s", ReadOptions::default()))
                .await
                .unwrap()
                .into_iter()
                .map(|row| row.id)
                .collect(),
            cursors: within(store.cursors("s")).await.unwrap(),
        }
    }
}

/// Everything a failed call must leave as it was.
#[derive(Debug, PartialEq)]
struct State {
    ids: Vec<String>,
    cursors: Vec<Cursor>,
}

/// A call that must answer within [`CALL_LIMIT`].
async fn within<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .expect("a store call hung on the failing disk")
}

/// Events `name-0`, `name-1`, ... of `bytes` of payload each; the first
/// targets the lane `L` of consumer `worker`.
fn events(name: &str, count: usize, bytes: usize) -> Vec<NewEvent> {
    (0..count)
        .map(|j| {
            let event = NewEvent::new("msg", json!({ "fill": "x".repeat(bytes) }))
                .with_id(format!("{name}-{j}"));
            if j == 0 {
                event.with_target(Target::lane("worker", "L"))
            } else {
                event
            }
        })
        .collect()
}

/// The failure of a call on the failing disk: `Backend`, naming the file,
/// saying what failed (`says`) and keeping SQLite's error as the source.
fn assert_disk_error(error: &StoreError, db: &Path, says: &[&str]) {
    assert_failure(error, ErrorCode::Backend, db, says);
}

/// The failure of a commit whose fsync failed and that the store could
/// not overwrite: `Unavailable` (the one code whose call may have been
/// applied, retryable), saying so.
fn assert_unknown_outcome(error: &StoreError, db: &Path) {
    assert_failure(
        error,
        ErrorCode::Unavailable,
        db,
        &["(fsync)", "OUTCOME UNKNOWN", "repeat the same call"],
    );
    assert!(error.is_retryable());
}

fn assert_failure(error: &StoreError, code: ErrorCode, db: &Path, says: &[&str]) {
    assert_eq!(error.code(), code, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&db.display().to_string()),
        "names the file: {message}"
    );
    for part in says {
        assert!(message.contains(part), "says {part:?}: {message}");
    }
    let source = std::error::Error::source(error).expect("SQLite's error is the source");
    let code = source
        .downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code);
    assert!(
        matches!(
            code,
            Some(rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::DatabaseCorrupt)
        ),
        "the source is SQLite's I/O error: {source:?}"
    );
}

const WRITE_FAILED: &[&str] = &["disk or file system failed", "Error writing to disk"];

fn claim() -> ClaimRequest {
    ClaimRequest {
        session_id: "s".into(),
        holder: "w".into(),
        ttl_ms: Some(600_000),
        limit: Some(1),
        ..ClaimRequest::default()
    }
}

fn completion(head: &Head, reply: &str) -> CompleteRequest {
    CompleteRequest {
        session_id: "s".into(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: vec![NewEvent::new("done", json!("ok")).with_id(reply)],
        ..CompleteRequest::default()
    }
}

/// Every kind of fault, each lifted again, the store working on.
async fn faults(child: &mut Child) {
    let db = child.db.clone();
    child.append(events("a", 2, 10)).await.unwrap();

    // An append whose WAL write fails: typed, nothing stored, reads work.
    let before = child.state().await;
    child.fault("write-wal", "");
    let error = child.append(events("w1", 1, 10)).await.unwrap_err();
    assert_disk_error(&error, &db, WRITE_FAILED);
    assert!(error.to_string().contains("nothing was changed"), "{error}");
    assert_eq!(
        child.state().await,
        before,
        "a failed append changed the store"
    );
    assert!(child.hits().contains("write wal"));
    // Its frames half written: the first two writes pass, the third fails.
    child.fault("write-wal", "2");
    let error = child.append(events("w2", 4, 3000)).await.unwrap_err();
    assert_disk_error(&error, &db, WRITE_FAILED);
    assert_eq!(
        child.state().await,
        before,
        "a torn append changed the store"
    );
    child.lift("write-wal");
    // Lifted: the same calls work, with no reopen (ids were never stored).
    child.append(events("w1", 1, 10)).await.unwrap();
    child.append(events("w2", 4, 3000)).await.unwrap();

    // A claim and a completion whose commits fail change nothing.
    let before = child.state().await;
    child.fault("write-wal", "");
    let error = within(child.store().claim_available(claim()))
        .await
        .unwrap_err();
    assert_disk_error(&error, &db, WRITE_FAILED);
    assert_eq!(
        child.state().await,
        before,
        "a failed claim changed the store"
    );
    child.lift("write-wal");
    let ClaimResult::Claimed { heads, .. } = within(child.store().claim_available(claim()))
        .await
        .unwrap()
    else {
        panic!("the lane has a head once the disk works");
    };
    let head = heads[0].clone();
    assert_eq!(head.dispatch.attempt_count, 1, "the failed claim counted");
    let before = child.state().await;
    child.fault("write-wal", "");
    let error = within(child.store().complete_attempt(completion(&head, "r1")))
        .await
        .unwrap_err();
    assert_disk_error(&error, &db, WRITE_FAILED);
    assert_eq!(
        child.state().await,
        before,
        "a failed completion changed the store"
    );
    // The same completion, its commit's fsync failing once: overwritten,
    // not applied (the next commit would discard it anyway; `fsync_once`
    // checks the overwrite alone).
    child.lift("write-wal");
    child.fault("sync-wal", "0 1");
    let error = within(child.store().complete_attempt(completion(&head, "r1")))
        .await
        .unwrap_err();
    assert_disk_error(&error, &db, &["(fsync)", "was not applied"]);
    assert_eq!(
        child.state().await,
        before,
        "a completion whose fsync failed is visible"
    );
    child.lift("sync-wal");
    let done = within(child.store().complete_attempt(completion(&head, "r1")))
        .await
        .unwrap();
    let CompleteResult::Completed { events: replies } = done else {
        panic!("the attempt is still current: {done:?}");
    };
    assert_eq!(replies[0].cause, Some(head.cause()));
    child.tell("ACK r1");

    // The fsync at commit fails and keeps failing: the commit may be in
    // the WAL, and cannot be overwritten yet, so the outcome is unknown;
    // it is not visible, and the next commit discards it (the parent
    // checks after the crash that `u1` is not there).
    let before = child.state().await;
    child.fault("sync-wal", "");
    let error = child.append(events("u1", 1, 10)).await.unwrap_err();
    assert_unknown_outcome(&error, &db);
    child.tell("UNKNOWN u1-0");
    assert_eq!(
        child.state().await,
        before,
        "the unconfirmed commit is visible"
    );
    assert!(child.hits().contains("sync wal"));
    child.lift("sync-wal");
    child.append(events("u2", 1, 10)).await.unwrap();

    // A checkpoint whose writes and syncs of the database file fail:
    // commits go on into the WAL (SQLite ignores the failure of an
    // automatic checkpoint), nothing is lost.
    child.fault("write-db", "");
    child.fault("sync-db", "");
    // Over 1000 pages: the commit starts an automatic checkpoint.
    child.append(events("big", 1, 4_500_000)).await.unwrap();
    child.append(events("k1", 1, 10)).await.unwrap();
    assert!(child.hits().contains("write db"), "no checkpoint was tried");
    let kept = child.state().await;
    // Closed while the disk fails: the closing checkpoint fails too and
    // the WAL stays; reopened, SQLite recovers it.
    child.store = None;
    assert!(child.hits().contains("write db"));
    assert!(data_file(&db, "-wal").exists(), "the WAL was not kept");
    child.lift("write-db");
    child.lift("sync-db");
    child.store = Some(child.open().unwrap());
    assert_eq!(child.state().await, kept, "reopened, the WAL is not whole");

    // Reads that fail: SQLite reports EIO on a read as a malformed file.
    child.append(events("r0", 1, 10)).await.unwrap();
    let kept = child.state().await;
    child.append(events("r1", 1, 10)).await.unwrap();
    child.fault("read", "");
    let error = within(child.store().read("s", ReadOptions::default()))
        .await
        .unwrap_err();
    assert_disk_error(&error, &db, &["EIO", "nothing was changed"]);
    let error = within(child.store().claim_available(claim()))
        .await
        .unwrap_err();
    assert_disk_error(&error, &db, &[]);
    let error = child
        .open()
        .expect_err("opening a file that cannot be read");
    assert_disk_error(&error, &db, &[]);
    assert!(child.hits().contains("read"));
    child.lift("read");
    let mut now = kept;
    now.ids.push("r1-0".into());
    assert_eq!(child.state().await.ids, now.ids);
    child.append(events("z", 1, 10)).await.unwrap();
}

/// The fsync at commit fails once: the store overwrites the unconfirmed
/// commit at once, so the call is not applied even by a crash right
/// after (the parent checks that `f1` is not there).
async fn fsync_once(child: &mut Child) {
    child.append(events("b", 1, 10)).await.unwrap();
    let before = child.state().await;
    child.fault("sync-wal", "0 1");
    let error = child.append(events("f1", 3, 3000)).await.unwrap_err();
    assert_disk_error(&error, &child.db, &["(fsync)", "was not applied"]);
    assert_eq!(child.hits(), "sync wal\n");
    assert_eq!(child.state().await, before);
}

/// The disk dies at the fsync of a commit, so the store cannot overwrite
/// it, and the process dies before any other commit: recovery applies the
/// call, as its error warned (the parent checks that `u3` is there).
async fn fsync_stuck(child: &mut Child) {
    child.append(events("c", 1, 10)).await.unwrap();
    child.fault("die", "");
    child.fault("sync-wal", "");
    let error = child.append(events("u3", 2, 10)).await.unwrap_err();
    assert_unknown_outcome(&error, &child.db);
    child.tell("UNKNOWN u3-0");
    child.tell("UNKNOWN u3-1");
}

fn data_file(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
