//! Opening bad paths and bad files: each is a typed error naming the path,
//! and a newer schema is refused without being rewritten.

use std::io::{Seek, SeekFrom, Write};

use a2_store_api::{ErrorCode, NewEvent, ReadOptions, Store, StoreError};
use a2_store_sqlite::{SqliteOptions, SqliteStore, SCHEMA_VERSION};
use serde_json::json;

#[path = "common/schema.rs"]
mod schema;

fn open_err(path: &std::path::Path) -> StoreError {
    match SqliteStore::open(path, SqliteOptions::default()) {
        Ok(_) => panic!("opening {} should fail", path.display()),
        Err(error) => error,
    }
}

fn assert_names_path(error: &StoreError, path: &std::path::Path) {
    let shown = path.display().to_string();
    assert!(
        error.to_string().contains(&shown),
        "error '{error}' should name '{shown}'"
    );
}

#[test]
fn missing_directory_is_a_typed_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("store.db");
    let error = open_err(&path);
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, &path);
    assert!(!path.exists());
}

#[test]
fn a_file_that_is_not_sqlite_is_a_typed_error_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are not the pages you are looking for\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let error = open_err(&path);
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, &path);
    assert!(
        error.to_string().contains("not a SQLite database"),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn a_read_only_file_is_a_typed_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&path, permissions).unwrap();
    let error = open_err(&path);
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, &path);
    assert!(error.to_string().contains("read-only"), "{error}");
}

#[test]
fn a_directory_in_place_of_the_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = open_err(dir.path());
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, dir.path());
}

#[tokio::test]
async fn a_corrupted_database_is_a_typed_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let events = (0..50)
            .map(|n| NewEvent::new("msg", json!({ "n": n, "pad": "x".repeat(100) })))
            .collect();
        store.append("s", events, Default::default()).await.unwrap();
    }
    // Overwrite the schema page after the 100-byte header and everything after it.
    let len = std::fs::metadata(&path).unwrap().len();
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(100)).unwrap();
    file.write_all(&vec![0xA5; usize::try_from(len).unwrap() - 100])
        .unwrap();
    drop(file);
    let error = open_err(&path);
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, &path);
}

#[test]
fn a_newer_schema_is_refused_and_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    let newer = SCHEMA_VERSION + 1;
    {
        // A newer build may have left the file in another journal mode.
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        conn.pragma_update(None, "user_version", newer).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let error = open_err(&path);
    assert_eq!(error.code(), ErrorCode::IncompatibleSchema);
    assert_names_path(&error, &path);
    let message = error.to_string();
    assert!(message.contains(&newer.to_string()), "{message}");
    assert!(message.contains(&SCHEMA_VERSION.to_string()), "{message}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, newer);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "the journal mode was not switched");
    drop(conn);
    assert_eq!(std::fs::read(&path).unwrap().len(), before.len());
}

#[tokio::test]
async fn reopening_keeps_the_data_and_applies_no_migration_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .append(
                "s",
                vec![NewEvent::new("msg", json!(1)).with_id("a")],
                Default::default(),
            )
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].id, "a");
}

#[tokio::test]
async fn corrupted_data_pages_fail_reads_with_a_typed_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let events = (0..400)
            .map(|n| NewEvent::new("msg", json!({ "n": n, "pad": "y".repeat(200) })))
            .collect();
        store.append("s", events, Default::default()).await.unwrap();
    }
    // Keep the header and schema pages, trash every page after the first few.
    let page = 4096;
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 8 * page, "the database spans many pages");
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(4 * page)).unwrap();
    file.write_all(&vec![0x5A; usize::try_from(len - 4 * page).unwrap()])
        .unwrap();
    drop(file);
    let outcome = match SqliteStore::open(&path, SqliteOptions::default()) {
        Err(error) => Err(error),
        Ok(store) => store.read("s", ReadOptions::default()).await.map(|_| ()),
    };
    let error = outcome.expect_err("corrupted pages must not read back");
    assert_eq!(error.code(), ErrorCode::Backend);
    assert_names_path(&error, &path);
}

#[tokio::test]
async fn extreme_options_are_clamped_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        busy_timeout: std::time::Duration::MAX,
        poll_interval: std::time::Duration::ZERO,
        pool_size: 0,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open(dir.path().join("store.db"), options).unwrap();
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1))],
            Default::default(),
        )
        .await
        .unwrap();
    let mut stream = store.subscribe("s", 0).await.unwrap();
    let first = futures::StreamExt::next(&mut stream)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.index, 1);
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        1
    );
}

/// Turns the database back into the schema version 2 wrote: no lane
/// schedules, pauses, fork origins or cross-session dead-letter index.
fn downgrade_to_version_2(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    schema::undo_version_4(&conn);
    conn.execute_batch(
        "DROP TABLE pauses;
         DROP INDEX cursors_dead_all;
         ALTER TABLE lane_queue DROP COLUMN not_before;
         ALTER TABLE sessions DROP COLUMN forked_from;
         ALTER TABLE sessions DROP COLUMN forked_through;
         PRAGMA user_version = 2;",
    )
    .unwrap();
}

#[tokio::test]
async fn a_store_written_at_version_2_upgrades_with_its_data_intact() {
    use a2_store_api::{
        ClaimRequest, CompleteRequest, ForkRequest, ListSessions, PauseRequest, Target,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let queued = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .append("s", vec![queued(1), queued(2)], Default::default())
            .await
            .unwrap();
    }
    downgrade_to_version_2(&path);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        2
    );
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!((cursors.len(), cursors[0].head), (1, Some(1)));
    // The queue kept its entries (unscheduled): the lane moves on at once.
    let lease = std::time::Duration::from_secs(30);
    let claim = |session: &str| ClaimRequest::new(session, "w", lease);
    let head = store
        .claim_available(claim("s"))
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![]))
        .await
        .unwrap();
    let next = store.claim_available(claim("s")).await.unwrap();
    assert_eq!(next.heads()[0].event.index, 2);
    // The new tables and columns work on the upgraded file.
    store
        .pause(PauseRequest::in_session("agent", "s"))
        .await
        .unwrap();
    assert_eq!(store.pauses(Some("s")).await.unwrap().len(), 1);
    store.fork(ForkRequest::new("s", "t")).await.unwrap();
    let listed = store.sessions(ListSessions::default()).await.unwrap();
    assert_eq!(listed[0].forked_from, None);
    assert_eq!(listed[1].forked_from.as_ref().map(|o| o.index), Some(2));
}
