//! Read-only opens: nothing is created, migrated or written, and writes are
//! typed errors.

use a2_store_api::{
    ClaimWorkRequest, ClearRequest, ConsumerDeclaration, ErrorCode, ListSessions, ListWork,
    NewEvent, ReadOptions, RewritePayloadsRequest, Store,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

fn read_only() -> SqliteOptions {
    SqliteOptions {
        read_only: true,
        ..SqliteOptions::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_read_only_file_is_readable_and_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    runtime().block_on(async {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .append(
                "s",
                vec![NewEvent::new("msg", json!(1))],
                Default::default(),
            )
            .await
            .unwrap();
    });
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&path, permissions).unwrap();
    let before = std::fs::read(&path).unwrap();
    runtime().block_on(async {
        let store = SqliteStore::open(&path, read_only()).unwrap();
        let sessions = store.sessions(ListSessions::default()).await.unwrap();
        assert_eq!(sessions.len(), 1);
        let rows = store.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(rows.len(), 1);
        let error = store
            .append(
                "s",
                vec![NewEvent::new("msg", json!(2))],
                Default::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert!(error.to_string().contains("read-only"), "{error}");
        let error = store
            .clear(ClearRequest {
                incarnation: None,
                session_id: "s".into(),
                if_last_index: None,
                cause: None,
            })
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        // A payload rewrite writes: refused like any other write.
        let rewrite = RewritePayloadsRequest::new("s").event(1, json!(1), json!("sealed"));
        let error = store.rewrite_payloads(rewrite).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert!(error.to_string().contains("read-only"), "{error}");
        // A claim across sessions writes even when nothing is claimable.
        let work = ClaimWorkRequest::new("w", vec![ConsumerDeclaration::targeted("agent")], 1_000);
        let error = store.claim_work(work).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        let listing = ListWork {
            consumers: vec!["agent".into()],
            ..ListWork::default()
        };
        assert_eq!(store.list_work(listing).await.unwrap(), Vec::new());
    });
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn missing_empty_and_foreign_files_are_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let error = SqliteStore::open(&missing, read_only()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(error.to_string().contains("missing.db"), "{error}");
    assert!(!missing.exists());

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let error = SqliteStore::open(&empty, read_only()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(error.to_string().contains("empty.db"), "{error}");
    assert!(
        error.to_string().contains("not an a2-store database"),
        "{error}"
    );
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);

    let text = dir.path().join("notes.txt");
    let content = "not a database at all\n".repeat(100);
    std::fs::write(&text, &content).unwrap();
    let error = SqliteStore::open(&text, read_only()).unwrap_err();
    assert!(error.to_string().contains("notes.txt"), "{error}");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), content);

    let error = SqliteStore::open_in_memory(read_only()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidInput);
}

#[test]
fn a_file_below_the_current_schema_version_is_refused_not_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    drop(old_file(&path));
    let before = std::fs::read(&path).unwrap();
    let error = SqliteStore::open(&path, read_only()).unwrap_err();
    // Version 0 is what an unmigrated file has: not a store yet.
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(
        error.to_string().contains("not an a2-store database"),
        "{error}"
    );
    assert!(error.to_string().contains("old.db"), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// A SQLite file with `user_version` 0 but a table in it: written by
/// something else, or by a build before the first migration.
fn old_file(path: &std::path::Path) -> std::fs::File {
    // A valid SQLite file is easiest made by the store itself; then the
    // version is reset through the header (bytes 60..64, big endian).
    let store = SqliteStore::open(path, SqliteOptions::default()).unwrap();
    drop(store);
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(60)).unwrap();
    file.write_all(&0_u32.to_be_bytes()).unwrap();
    file
}
