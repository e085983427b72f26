//! What the offloading layer (`a2_store::OffloadStore`) costs for a 10 MB
//! payload, on SQLite (a file, default durability) with a local object
//! store (files, synced):
//!
//! - `layer_append`: one append of a 10 MB event into a session through the
//!   layer (serialized, hashed and written to a staging object at once,
//!   the object synced and renamed to its content key, then the small
//!   row);
//! - `object_store_put`: writing 10 MB of the same JSON to the same object
//!   store alone, under a new key.
//!
//! Issue 40's target: the append costs at most 1.5 times the put.
//!
//! `cargo bench -p a2-store --features offload,sqlite --bench offload`
//!
//! First, the two are timed alternately, round after round, in the same
//! process (`A2_OFFLOAD_ROUNDS`, 15 by default; 0 skips it), and the medians
//! and their ratio are printed: the figure to compare, as both sides see the
//! same machine state, with the append's steps timed on their own. Then
//! criterion measures each on its own. Every object written is deleted
//! again, untimed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::layer::offload::object_store::path::Path;
use a2_store::layer::offload::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use a2_store::layer::offload::OffloadStore;
use a2_store::{json, NewEvent, OpenOptions, Store, Value};
use criterion::{criterion_group, Criterion};
use futures::TryStreamExt;
use sha2::Digest;

/// The payload's size.
const SIZE: usize = 10 * 1024 * 1024;

fn payload() -> Value {
    json!({"tool": "fetch", "body": "x".repeat(SIZE)})
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The layer over a SQLite file, both in `dir`.
async fn layer(dir: &std::path::Path) -> OffloadStore {
    let url = format!("sqlite:{}", dir.join("store.db").display());
    let backend = a2_store::open(&url, OpenOptions::default())
        .await
        .expect("a SQLite store");
    OffloadStore::local(backend, dir.join("objects")).expect("a local object store")
}

/// The session every timed append goes to. It holds one offloaded payload
/// from the start, so its directories exist, as the baseline's does.
const SESSION: &str = "bench";

/// The layer's session made ready: its anchor payload appended; the path
/// of that object.
async fn anchor(store: &OffloadStore, payload: &Value) -> Path {
    let event = NewEvent::new("anchor", payload.clone());
    store
        .append(SESSION, vec![event], Default::default())
        .await
        .expect("append");
    let objects: Vec<_> = store
        .object_store()
        .list(None)
        .try_collect()
        .await
        .expect("a listing");
    objects
        .into_iter()
        .next()
        .expect("the anchor object")
        .location
}

/// One append of a 10 MB payload (distinct per `n`) into the session; the
/// time it took. Its object is deleted afterwards, untimed (the row stays,
/// never read).
async fn append(store: &OffloadStore, keep: &Path, n: usize, payload: &Value) -> Duration {
    let mut payload = payload.clone();
    payload["n"] = json!(n);
    let event = NewEvent::new("tool.result", payload);
    let start = Instant::now();
    store
        .append(SESSION, vec![event], Default::default())
        .await
        .expect("append");
    let elapsed = start.elapsed();
    let objects: Vec<_> = store
        .object_store()
        .list(None)
        .try_collect()
        .await
        .expect("a listing");
    for object in objects {
        if object.location != *keep && !object.location.as_ref().starts_with("baseline") {
            store
                .object_store()
                .delete(&object.location)
                .await
                .expect("delete");
        }
    }
    elapsed
}

/// One put of `bytes` under a new key; the time it took. Deleted
/// afterwards, untimed.
async fn put(objects: &Arc<dyn ObjectStore>, n: usize, bytes: &[u8]) -> Duration {
    let path = Path::from(format!("baseline/{n}"));
    let body = PutPayload::from(bytes.to_vec());
    let start = Instant::now();
    objects.put(&path, body).await.expect("put");
    let elapsed = start.elapsed();
    objects.delete(&path).await.expect("delete");
    elapsed
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// The alternating comparison: medians and their ratio, printed.
fn alternate(rounds: usize) {
    let runtime = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let payload = payload();
    let bytes = serde_json::to_vec(&payload).expect("json");
    runtime.block_on(async {
        let store = layer(dir.path()).await;
        let objects = Arc::clone(store.object_store());
        let keep = anchor(&store, &payload).await;
        // One of each to warm up.
        append(&store, &keep, usize::MAX, &payload).await;
        put(&objects, usize::MAX, &bytes).await;
        let (mut appends, mut puts) = (Vec::new(), Vec::new());
        for n in 0..rounds {
            appends.push(append(&store, &keep, n, &payload).await);
            puts.push(put(&objects, n, &bytes).await);
        }
        // Where the append's time goes: its steps on their own.
        let (mut serialize, mut hash, mut row) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..rounds {
            let start = Instant::now();
            let text = serde_json::to_vec(&payload).expect("json");
            serialize.push(start.elapsed());
            let start = Instant::now();
            std::hint::black_box(sha2::Sha256::digest(&text));
            hash.push(start.elapsed());
            let small = NewEvent::new("tool.result", json!({"$ref": n}));
            let session = format!("row-{n}");
            let start = Instant::now();
            store
                .inner()
                .append(&session, vec![small], Default::default())
                .await
                .expect("append");
            row.push(start.elapsed());
        }
        let ms = |times: Vec<Duration>| median(times).as_secs_f64() * 1e3;
        println!(
            "offload steps (medians): serialize {:.1} ms, sha256 {:.1} ms, the small row alone \
             {:.1} ms",
            ms(serialize),
            ms(hash),
            ms(row)
        );
        let (append, put) = (median(appends), median(puts));
        println!(
            "offload, {} bytes, {rounds} alternating rounds: append through the layer {:.1} ms, \
             put to the object store alone {:.1} ms, ratio {:.2} (target <= 1.5)",
            bytes.len(),
            append.as_secs_f64() * 1e3,
            put.as_secs_f64() * 1e3,
            append.as_secs_f64() / put.as_secs_f64().max(f64::MIN_POSITIVE),
        );
    });
}

fn bench(c: &mut Criterion) {
    let runtime = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let payload = payload();
    let bytes = serde_json::to_vec(&payload).expect("json");
    let store = runtime.block_on(layer(dir.path()));
    let keep = runtime.block_on(anchor(&store, &payload));
    let objects = Arc::clone(store.object_store());
    let mut group = c.benchmark_group("offload_10mb");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("layer_append", |b| {
        b.to_async(&runtime).iter_custom(|iterations| {
            let (store, keep, payload) = (&store, &keep, &payload);
            async move {
                let mut total = Duration::ZERO;
                for n in 0..iterations {
                    total += append(store, keep, n as usize, payload).await;
                }
                total
            }
        })
    });
    group.bench_function("object_store_put", |b| {
        b.to_async(&runtime).iter_custom(|iterations| {
            let (objects, bytes) = (&objects, &bytes);
            async move {
                let mut total = Duration::ZERO;
                for n in 0..iterations {
                    total += put(objects, n as usize, bytes).await;
                }
                total
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    let rounds = std::env::var("A2_OFFLOAD_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(15);
    if rounds > 0 {
        alternate(rounds);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
