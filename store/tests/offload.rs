//! The offloading layer's own behaviour: a 10 MB round trip with a small
//! row, replays, the reserved key, missing and corrupted objects as typed
//! errors, objects removed by delete, prune and reclaim, forks that outlive
//! their origin, and the sweep of orphans.

mod offload_support;

use std::sync::Arc;
use std::time::Duration;

use a2_store::layer::offload::object_store::path::Path;
use a2_store::layer::offload::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use a2_store::layer::offload::OffloadStore;
use a2_store::prelude::*;
use a2_store::{ReadStateOptions, StateWrite};
use futures::TryStreamExt;
use tempfile::TempDir;

/// A store of `backend` behind the layer with a 1 KiB threshold, its
/// objects in a fresh directory.
async fn layered(backend: Arc<dyn Store>) -> (OffloadStore, TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = OffloadStore::local(backend, dir.path())
        .expect("a local object store")
        .with_threshold(1024);
    (store, dir)
}

async fn memory() -> (OffloadStore, TempDir) {
    layered(
        a2_store::open("memory:", OpenOptions::default())
            .await
            .expect("memory"),
    )
    .await
}

/// Every object in the store.
async fn objects(store: &OffloadStore) -> Vec<Path> {
    let metas: Vec<_> = store
        .object_store()
        .list(None)
        .try_collect()
        .await
        .expect("a listing");
    let mut paths: Vec<Path> = metas.into_iter().map(|meta| meta.location).collect();
    paths.sort();
    paths
}

/// Sweeps session `s` twice, finding `examined` objects each time, one of
/// them unreferenced: with an hour's grace it is young and kept, with none
/// it is deleted.
async fn sweeps_one_orphan(store: &OffloadStore, examined: u64) {
    let young = store
        .sweep("s", Duration::from_secs(3600))
        .await
        .expect("sweep");
    assert_eq!(
        (young.examined, young.deleted, young.kept_young),
        (examined, 0, 1)
    );
    let swept = store.sweep("s", Duration::ZERO).await.expect("sweep");
    assert_eq!((swept.examined, swept.deleted), (examined, 1));
}

/// A payload whose JSON is about `bytes` long, distinct per `tag`.
fn big(tag: &str, bytes: usize) -> Value {
    json!({"tag": tag, "text": "x".repeat(bytes)})
}

/// The payload as the row holds it (through the wrapped store).
async fn row_payload(store: &OffloadStore, session: &str, index: u64) -> Value {
    let rows = store
        .inner()
        .read(
            session,
            ReadOptions::new().with_after(index - 1).with_through(index),
        )
        .await
        .expect("a raw read");
    rows[0].payload.as_value().clone()
}

#[tokio::test]
async fn a_10_mb_payload_round_trips_and_its_row_stays_under_1_kb() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("store.db").display());
    let backend = a2_store::open(&url, OpenOptions::default())
        .await
        .expect("sqlite");
    let (store, _objects) = layered(backend).await;
    let payload = big("ten", 10 * 1024 * 1024);
    let event = NewEvent::new("tool.result", payload.clone())
        .with_id("r1")
        .with_target(Target::lane("agent", "main"));
    let appended = store
        .append("s", vec![event.clone()], AppendOptions::default())
        .await
        .expect("append");
    assert_eq!(appended.events[0].payload, payload);

    // The row holds the reference only.
    let row = row_payload(&store, "s", 1).await;
    let row_bytes = serde_json::to_vec(&row).expect("json").len();
    assert!(row_bytes < 1024, "row of {row_bytes} bytes: {row}");
    assert_eq!(row["$a2ref"], 1);
    assert_eq!(
        row["len"].as_u64(),
        Some(serde_json::to_vec(&payload).expect("json").len() as u64)
    );
    assert_eq!(objects(&store).await.len(), 1);

    // Every way back resolves it.
    let read = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(read[0].payload, payload);
    let mut stream = store.subscribe("s", 0).await.expect("subscribe");
    let first = stream.next().await.expect("an item").expect("an event");
    assert_eq!(first.payload, payload);
    let claim = ClaimRequest::new("s", "w", Duration::from_secs(30));
    let heads = store
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(heads[0].event.payload, payload);

    // A replay: the same ids and payload give the same row, one object.
    let again = store
        .append("s", vec![event], AppendOptions::default())
        .await
        .expect("replay");
    assert_eq!(again.events, appended.events);
    assert_eq!(row_payload(&store, "s", 1).await, row);
    assert_eq!(objects(&store).await.len(), 1);

    // The same for a large snapshot state.
    let state = big("state", 2 * 1024 * 1024);
    store
        .write_state("s", "summary", vec![StateWrite::new(1, state.clone())])
        .await
        .expect("write state");
    let raw = store
        .inner()
        .read_state("s", "summary", ReadStateOptions::default())
        .await
        .expect("raw state");
    let raw_state = raw.snapshot.expect("a snapshot").state;
    assert!(serde_json::to_vec(&raw_state).expect("json").len() < 1024);
    let resolved = store
        .read_state("s", "summary", ReadStateOptions::default())
        .await
        .expect("read state");
    assert_eq!(resolved.snapshot.expect("a snapshot").state, state);
}

#[tokio::test]
async fn small_payloads_stay_inline_and_the_reserved_key_is_refused() {
    let (store, _dir) = memory().await;
    let small = json!({"text": "hi"});
    store
        .append(
            "s",
            vec![NewEvent::new("msg", small.clone())],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    assert_eq!(row_payload(&store, "s", 1).await, small);
    assert!(objects(&store).await.is_empty());

    for payload in [
        json!({"$a2ref": 1, "sha256": "00", "len": 2}),
        json!({"$a2ref": "mine", "text": "x".repeat(4096)}),
    ] {
        let refused = store
            .append(
                "s",
                vec![NewEvent::new("msg", payload)],
                AppendOptions::default(),
            )
            .await
            .expect_err("the reserved key is refused");
        assert_eq!(refused.code(), ErrorCode::InvalidInput);
        assert!(refused.to_string().contains("$a2ref"), "{refused}");
    }
    let refused = store
        .write_state("s", "r", vec![StateWrite::new(1, json!({"$a2ref": 1}))])
        .await
        .expect_err("the reserved key is refused in states");
    assert_eq!(refused.code(), ErrorCode::InvalidInput);
    // Nested, the key is plain data.
    let nested = json!({"inner": {"$a2ref": 1}});
    let appended = store
        .append(
            "s",
            vec![NewEvent::new("msg", nested.clone())],
            AppendOptions::default(),
        )
        .await
        .expect("nested use");
    assert_eq!(appended.events[0].payload, nested);
    assert_eq!(
        store.read("s", ReadOptions::default()).await.expect("read")[1].payload,
        nested
    );
}

#[tokio::test]
async fn a_missing_object_is_a_typed_error_naming_the_event() {
    let (store, _dir) = memory().await;
    store
        .append(
            "chat-9",
            vec![
                NewEvent::new("msg", json!("small")).with_id("m1"),
                NewEvent::new("tool.result", big("a", 4096)).with_id("m2"),
            ],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let [path] = objects(&store).await.try_into().expect("one object");
    store.object_store().delete(&path).await.expect("delete");

    let error = store
        .read("chat-9", ReadOptions::default())
        .await
        .expect_err("a missing object fails the read");
    assert_eq!(error.code(), ErrorCode::Backend);
    let message = error.to_string();
    for part in ["'m2'", "index 2", "'chat-9'", "missing"] {
        assert!(message.contains(part), "{part} not in {message}");
    }
    // Rows without a reference still read.
    let first = store
        .read("chat-9", ReadOptions::new().with_through(1))
        .await
        .expect("the inline row");
    assert_eq!(first[0].payload, json!("small"));
    // A stream yields the error, then ends.
    let mut stream = store.subscribe("chat-9", 0).await.expect("subscribe");
    assert_eq!(stream.next().await.expect("an item").expect("m1").id, "m1");
    let error = stream.next().await.expect("an item").expect_err("m2 fails");
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn a_corrupted_object_is_a_typed_error() {
    let (store, _dir) = memory().await;
    store
        .append(
            "s",
            vec![NewEvent::new("tool.result", big("a", 4096)).with_id("e1")],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let [path] = objects(&store).await.try_into().expect("one object");
    let mut bytes = store
        .object_store()
        .get(&path)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
        .to_vec();
    // One flipped byte inside the text keeps it valid JSON of the same length.
    let last = bytes.len() - 4;
    bytes[last] = b'y';
    store
        .object_store()
        .put(&path, PutPayload::from(bytes))
        .await
        .expect("put");
    let error = store
        .read("s", ReadOptions::default())
        .await
        .expect_err("a corrupted object fails the read");
    assert_eq!(error.code(), ErrorCode::Backend);
    let message = error.to_string();
    for part in ["'e1'", "index 1", "'s'", "does not match"] {
        assert!(message.contains(part), "{part} not in {message}");
    }

    // A corrupted state names the reducer.
    store
        .write_state("s", "summary", vec![StateWrite::new(1, big("st", 4096))])
        .await
        .expect("write state");
    let state_path = objects(&store)
        .await
        .into_iter()
        .find(|path| path.as_ref().contains("/states/"))
        .expect("a state object");
    store
        .object_store()
        .put(&state_path, PutPayload::from(b"{}".to_vec()))
        .await
        .expect("put");
    let error = store
        .read_state("s", "summary", ReadStateOptions::default())
        .await
        .expect_err("a corrupted state fails the read");
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(error.to_string().contains("reducer 'summary'"), "{error}");
}

#[tokio::test]
async fn delete_and_prune_remove_the_sessions_objects() {
    let clock = ManualClock::new(1_000);
    let backend = a2_store::open("memory:", OpenOptions::default().with_clock(clock.clone()))
        .await
        .expect("memory");
    let (store, _dir) = layered(backend).await;
    for session in ["a", "b", "c"] {
        store
            .append(
                session,
                vec![NewEvent::new("tool.result", big(session, 4096))],
                AppendOptions::default(),
            )
            .await
            .expect("append");
    }
    store
        .write_state("a", "r", vec![StateWrite::new(1, big("state", 4096))])
        .await
        .expect("write state");
    assert_eq!(objects(&store).await.len(), 4);

    let deleted = store
        .delete_session(DeleteSessionRequest::new("a"))
        .await
        .expect("delete");
    assert!(matches!(deleted, DeleteSessionResult::Deleted { .. }));
    assert_eq!(objects(&store).await.len(), 2, "a's event and state went");

    // A dry run keeps them; a prune removes what it deleted.
    clock.advance(3_600_000);
    let preview = store
        .prune(PruneRequest::idle_for(Duration::from_secs(60)).dry_run())
        .await
        .expect("dry run");
    assert_eq!(preview.sessions.len(), 2);
    assert_eq!(objects(&store).await.len(), 2);
    let pruned = store
        .prune(PruneRequest::idle_for(Duration::from_secs(60)))
        .await
        .expect("prune");
    assert_eq!(pruned.sessions.len(), 2);
    assert!(objects(&store).await.is_empty());
}

#[tokio::test]
async fn a_delete_that_finds_no_session_keeps_the_objects_of_its_states() {
    // A session of states only has no events: delete_session answers
    // NotFound and keeps the states, so their objects must stay too (the
    // differential test through the layers found this).
    let (store, _dir) = memory().await;
    store
        .write_state("s", "r", vec![StateWrite::new(1, big("state", 4096))])
        .await
        .expect("write state");
    let deleted = store
        .delete_session(DeleteSessionRequest::new("s"))
        .await
        .expect("delete");
    assert!(matches!(deleted, DeleteSessionResult::NotFound));
    assert_eq!(objects(&store).await.len(), 1);
    let read = store
        .read_state("s", "r", Default::default())
        .await
        .expect("the state still reads");
    assert_eq!(read.snapshot.map(|s| s.state), Some(big("state", 4096)));
}

#[tokio::test]
async fn reclaim_removes_objects_only_reclaimed_rows_referenced() {
    let (store, _dir) = memory().await;
    let shared = big("shared", 4096);
    store
        .append(
            "s",
            vec![
                NewEvent::new("t", big("only-below", 4096)),
                NewEvent::new("t", shared.clone()),
            ],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    assert_eq!(objects(&store).await.len(), 2);
    store.clear(ClearRequest::new("s")).await.expect("clear");
    // The same content again above the clear: its object must stay.
    store
        .append(
            "s",
            vec![NewEvent::new("t", shared.clone())],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let reclaimed = store.reclaim("s").await.expect("reclaim");
    assert_eq!((reclaimed.reclaimed, reclaimed.done), (2, true));
    assert_eq!(objects(&store).await.len(), 1);
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows.last().expect("a row").payload, shared);
}

#[tokio::test]
async fn a_fork_outlives_its_origin() {
    let (store, _dir) = memory().await;
    let turns: Vec<Value> = (0..3).map(|n| big(&format!("turn-{n}"), 4096)).collect();
    store
        .append(
            "origin",
            turns
                .iter()
                .map(|turn| NewEvent::new("turn", turn.clone()))
                .collect(),
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let fork = store
        .fork(ForkRequest::new("origin", "fork").through(2))
        .await
        .expect("fork");
    assert_eq!(fork.copied, 2);
    store
        .delete_session(DeleteSessionRequest::new("origin").forced())
        .await
        .expect("delete the origin");
    let rows = store
        .read("fork", ReadOptions::default())
        .await
        .expect("read the fork");
    let payloads: Vec<&Value> = rows.iter().map(|row| row.payload.as_value()).collect();
    assert_eq!(payloads, vec![&turns[0], &turns[1]]);
    assert_eq!(objects(&store).await.len(), 2, "the fork's copies only");

    // A fork through the head copies every row.
    let whole = store
        .fork(ForkRequest::new("fork", "fork-2"))
        .await
        .expect("fork of the fork");
    assert_eq!(whole.copied, 2);
    store
        .delete_session(DeleteSessionRequest::new("fork").forced())
        .await
        .expect("delete");
    assert_eq!(
        store
            .read("fork-2", ReadOptions::default())
            .await
            .expect("read")
            .len(),
        2
    );
}

#[tokio::test]
async fn a_sweep_deletes_orphans_and_keeps_referenced_objects() {
    let (store, _dir) = memory().await;
    store
        .append(
            "s",
            vec![NewEvent::new("t", big("kept", 4096)).with_id("e1")],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    // A replay with another payload is refused, after its object was written.
    let conflict = store
        .append(
            "s",
            vec![NewEvent::new("t", big("orphan", 4096)).with_id("e1")],
            AppendOptions::default(),
        )
        .await
        .expect_err("a conflicting replay");
    assert_eq!(conflict.code(), ErrorCode::IdempotencyConflict);
    assert_eq!(objects(&store).await.len(), 2);

    sweeps_one_orphan(&store, 2).await;
    assert_eq!(objects(&store).await.len(), 1);
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows[0].payload, big("kept", 4096));
}

#[tokio::test]
async fn a_sweep_deletes_staging_objects_a_dead_write_left() {
    let (store, _dir) = memory().await;
    store
        .append(
            "s",
            vec![NewEvent::new("t", big("kept", 4096))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    // Nothing of the write is left but its object: the staging object was
    // renamed to its content key.
    let written = objects(&store).await;
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].as_ref().contains("/events/"), "{written:?}");
    // What a process death between a streamed write and its rename leaves.
    let session_dir = written[0]
        .as_ref()
        .split("/events/")
        .next()
        .expect("the session's directory");
    let leftover = Path::from(format!("{session_dir}/staging/dead-write"));
    store
        .object_store()
        .put(&leftover, PutPayload::from_static(b"{\"partial\""))
        .await
        .expect("put");

    sweeps_one_orphan(&store, 2).await;
    assert_eq!(objects(&store).await, written);
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows[0].payload, big("kept", 4096));
}

#[tokio::test]
async fn completions_offload_returned_events() {
    let (store, _dir) = memory().await;
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1)).with_target(Target::lane("agent", "main"))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let head = store
        .claim_available(ClaimRequest::new("s", "w", Duration::from_secs(30)))
        .await
        .expect("claim")
        .into_heads()
        .remove(0);
    let reply = NewEvent::new("reply", big("reply", 8192)).with_id("reply-1");
    let done = store
        .complete_attempt(CompleteRequest::for_head(&head, vec![reply.clone()]))
        .await
        .expect("complete");
    let CompleteResult::Completed { events } = &done else {
        panic!("superseded: {done:?}");
    };
    assert_eq!(events[0].payload, big("reply", 8192));
    assert_eq!(row_payload(&store, "s", 2).await["$a2ref"], 1);
    // A repeated completion replays the same answer.
    let again = store
        .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
        .await
        .expect("replay");
    assert_eq!(again, done);
}
