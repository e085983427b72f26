//! The whole conformance suite through both payload layers stacked,
//! `EncryptedStore` over `OffloadStore` (a 144-byte threshold, so most
//! cases offload ciphertext; a temporary local object store) over memory,
//! SQLite files and PostgreSQL: trials named
//! `<backend>+offload+encryption::<case>`. One more trial per backend,
//! `<backend>+offload+encryption::layers::payloads_are_offloaded_as_ciphertext`,
//! checks what lands where: envelopes in the objects, references and
//! small envelopes in the backend's rows, never the plaintext. The
//! PostgreSQL trials run only when `A2_POSTGRES_URL` is set; otherwise they
//! are reported as ignored (and said so on stderr), so the counts never
//! claim cases that did not run.
#![cfg(all(
    feature = "encryption",
    feature = "offload",
    feature = "memory",
    feature = "sqlite",
    feature = "postgres"
))]

mod stacked_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use a2_conformance::StoreFactory;
use a2_store::layer::offload::object_store::ObjectStoreExt;
use a2_store::prelude::*;
use a2_store::{CounterIds, ManualClock, PresenceMeta, ReadStateOptions, StateWrite};
use futures::TryStreamExt;
use libtest_mimic::{Failed, Trial};
use stacked_support::{postgres_url, stacked, Layers, Memory, Postgres, Sqlite};

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = suite("memory", Some(|| Memory));
    trials.extend(suite("sqlite", Some(Sqlite::new)));
    let postgres = postgres_url().map(|url| move || Postgres::new(&url));
    if postgres.is_none() {
        eprintln!(
            "stacked_conformance: the PostgreSQL trials were NOT run: {} is not set",
            stacked_support::POSTGRES_URL_VAR
        );
    }
    trials.extend(suite("postgres", postgres));
    libtest_mimic::run(&args, trials).exit();
}

/// The suite through both layers over the backends `make` builds, and the
/// check of what the layers store; all ignored when `make` is `None`.
fn suite<F, M>(backend: &str, make: Option<M>) -> Vec<Trial>
where
    F: StoreFactory + 'static,
    M: Fn() -> F + Clone + Send + Sync + 'static,
{
    let name = format!("{backend}+offload+encryption");
    let ignored = make.is_none();
    let check = make.clone();
    let mut trials = a2_conformance::trials(&name, make.map(|make| move || stacked(make())));
    let label = format!("{name}::layers::payloads_are_offloaded_as_ciphertext");
    trials.push(
        Trial::test(label, move || match check {
            Some(make) => block_on(payloads_are_offloaded_as_ciphertext(&make())),
            None => Ok(()),
        })
        .with_ignored_flag(ignored),
    );
    trials
}

fn block_on<F: std::future::Future<Output = ()>>(check: F) -> Result<(), Failed> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("could not start a tokio runtime: {error}"))?
        .block_on(check);
    Ok(())
}

/// Written in every payload: it must never be found below the layers.
const SECRET: &str = "the-plaintext-marker";

/// Event payloads, a snapshot state and a presence value through both
/// layers: the app reads back what it wrote; the offload layer sees only
/// envelopes (inline or in its objects); the backend's rows hold
/// references for the large payloads and envelopes for the small ones; the
/// objects' bytes are envelopes; the plaintext is nowhere below the layers.
async fn payloads_are_offloaded_as_ciphertext(backend: &dyn StoreFactory) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let clock = Arc::new(ManualClock::new(1_000));
    let ids = Arc::new(CounterIds::new("e"));
    let layers = Layers::open(backend, clock, ids, dir.path())
        .await
        .expect("a store with both layers");
    let store = &layers.store;

    // Small: its envelope (about 130 bytes) stays under the threshold;
    // the others' are far over it.
    let small = json!({"note": SECRET, "n": 1});
    let large = json!({"note": SECRET, "text": "x".repeat(1_000)});
    let reply = json!({"note": SECRET, "reply": "y".repeat(600)});
    let state = json!({"note": SECRET, "summary": "z".repeat(800)});
    let events = vec![
        NewEvent::new("msg", small.clone()).with_id("small"),
        NewEvent::new("tool.result", large.clone())
            .with_id("large")
            .with_target(Target::lane("agent", "main")),
    ];
    store
        .append("s", events, AppendOptions::default())
        .await
        .expect("append");
    let claim = ClaimRequest::new("s", "w", Duration::from_secs(30));
    let [head] = store
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads()
        .try_into()
        .expect("one head");
    assert_eq!(head.event.payload, large, "the claimed head, decoded");
    let returned = NewEvent::new("reply", reply.clone()).with_id("reply");
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![returned]))
        .await
        .expect("complete");
    store
        .write_state("s", "summary", vec![StateWrite::new(3, state.clone())])
        .await
        .expect("write state");
    let meta = PresenceMeta {
        at: 1,
        seen: None,
        ttl_ms: 60_000,
    };
    let presence = BTreeMap::from([("draft".to_owned(), json!(SECRET))]);
    store
        .set_presence("s", "alice", presence, meta)
        .await
        .expect("set presence");

    // Through both layers: what was written.
    let read = store.read("s", ReadOptions::default()).await.expect("read");
    let payloads: Vec<Value> = read.iter().map(|e| e.payload.as_value().clone()).collect();
    assert_eq!(payloads, [small, large, reply]);
    let read_state = |store: Arc<dyn Store>| async move {
        let read = store.read_state("s", "summary", ReadStateOptions::default());
        read.await
            .expect("read state")
            .snapshot
            .expect("a snapshot")
            .state
    };
    assert_eq!(read_state(Arc::clone(store)).await, state);
    let rows = store.read_presence("s").await.expect("read presence");
    assert_eq!(rows[0].value, json!(SECRET));

    // Below encryption, above offload: envelopes only, whether inline or
    // fetched from an object.
    let offload: Arc<dyn Store> = layers.offload.clone();
    let resolved = offload
        .read("s", ReadOptions::default())
        .await
        .expect("read");
    for event in &resolved {
        assert_envelope(event.payload.as_value(), &event.id);
    }
    assert_envelope(&read_state(Arc::clone(&offload)).await, "the state");

    // The backend's rows: the small payload inline as an envelope, the
    // large ones (and the state) as references; the presence value an
    // envelope.
    let raw = layers.backend.read("s", ReadOptions::default()).await;
    let raw = raw.expect("a raw read");
    assert_eq!(raw.len(), 3);
    assert_envelope(raw[0].payload.as_value(), "the small payload's row");
    let mut references = Vec::new();
    for row in &raw[1..] {
        references.push(reference(row.payload.as_value(), &row.id));
    }
    references.push(reference(
        &read_state(Arc::clone(&layers.backend)).await,
        "the state",
    ));
    let presence = layers.backend.read_presence("s").await.expect("presence");
    assert_envelope(&presence[0].value, "the presence value");
    let everything = format!("{raw:?} {presence:?} {references:?}");
    assert!(!everything.contains(SECRET), "plaintext in a row: {raw:?}");

    // The objects: one per reference, named by it, each an envelope.
    let objects = layers.offload.object_store();
    let listed: Vec<_> = objects.list(None).try_collect().await.expect("a listing");
    assert_eq!(listed.len(), 3, "one object per large payload: {listed:?}");
    for reference in &references {
        let found = listed
            .iter()
            .any(|m| m.location.as_ref().ends_with(reference));
        assert!(found, "no object for {reference} in {listed:?}");
    }
    for meta in &listed {
        let got = objects.get(&meta.location).await.expect("get");
        let bytes = got.bytes().await.expect("the object's bytes");
        let text = std::str::from_utf8(&bytes).expect("JSON text");
        assert!(!text.contains(SECRET), "plaintext in {}", meta.location);
        let value: Value = serde_json::from_str(text).expect("JSON");
        assert_envelope(&value, meta.location.as_ref());
    }
}

/// Asserts `value` is an encryption envelope under the current key.
fn assert_envelope(value: &Value, what: &str) {
    assert_eq!(value["$a2enc"], 1, "{what} is no envelope: {value}");
    assert_eq!(value["kid"], "k2", "{what}: {value}");
    assert!(value["ct"].is_string(), "{what}: {value}");
}

/// The SHA-256 of the object `value` (a row's payload) references.
fn reference(value: &Value, what: &str) -> String {
    assert_eq!(value["$a2ref"], 1, "{what} is no reference: {value}");
    assert!(value.get("$a2enc").is_none(), "{what}: {value}");
    let sha256 = value["sha256"].as_str().expect("a sha256");
    sha256.to_owned()
}
