//! Opening each compiled-in backend through the facade, with injected clock and ids.
#![cfg(any(feature = "memory", feature = "sqlite"))]

use a2_store::{CounterIds, ManualClock, NewEvent, OpenOptions, ReadOptions, Store};
use serde_json::json;

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn injected() -> (OpenOptions, ManualClock) {
    let clock = ManualClock::new(42_000);
    let options = OpenOptions::default()
        .with_clock(clock.clone())
        .with_ids(CounterIds::new("e"));
    (options, clock)
}

/// Appends one event without an id and checks the injected clock and ids made it.
async fn round_trip(store: &dyn Store, session: &str) {
    let appended = store
        .append(
            session,
            vec![NewEvent::new("msg", json!({"a": 1}))],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(appended.events[0].id, "e1");
    assert_eq!(appended.events[0].created_at, 42_000);
    let rows = store.read(session, ReadOptions::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, json!({"a": 1}));
}

#[cfg(feature = "memory")]
#[test]
fn memory_uses_the_injected_clock_and_ids() {
    block_on(async {
        let (options, _clock) = injected();
        let store = a2_store::open("memory:", options).await.unwrap();
        round_trip(store.as_ref(), "s").await;
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_files_keep_their_data_across_opens() {
    use a2_store::ListSessions;
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite:{}?durability=normal&pool_size=2&busy_timeout_ms=1000&poll_interval_ms=10",
        dir.path().join("app.db").display()
    );
    block_on(async {
        let (options, _clock) = injected();
        let store = a2_store::open(&url, options).await.unwrap();
        round_trip(store.as_ref(), "s").await;
        drop(store);
        let again = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let sessions = again.sessions(ListSessions::default()).await.unwrap();
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].head, 1);
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_in_memory_is_private() {
    use a2_store::ListSessions;
    block_on(async {
        let (options, _clock) = injected();
        let store = a2_store::open("sqlite::memory:", options).await.unwrap();
        round_trip(store.as_ref(), "s").await;
        let other = a2_store::open("sqlite::memory:", OpenOptions::default())
            .await
            .unwrap();
        assert!(other
            .sessions(ListSessions::default())
            .await
            .unwrap()
            .is_empty());
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_errors_keep_the_backend_code() {
    use a2_store::ErrorCode;
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no-such-dir").join("app.db");
    block_on(async {
        let err = a2_store::open(
            &format!("sqlite:{}", missing_dir.display()),
            OpenOptions::default(),
        )
        .await
        .err()
        .unwrap();
        assert_ne!(err.code(), ErrorCode::InvalidInput, "{err}");
        assert!(err.to_string().contains("no-such-dir"), "{err}");
    });
}
