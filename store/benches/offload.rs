//! What the offloading layer (`a2_store::OffloadStore`) costs for a 10 MB
//! payload, on SQLite (a file, default durability) with a local object
//! store (files, synced):
//!
//! - `layer_append`: one append of a 10 MB event into a new session through
//!   the layer (serialize, SHA-256, write and sync the object, then the
//!   small row);
//! - `object_store_put`: writing the same 10 MB of JSON to the same object
//!   store alone, under a new key.
//!
//! Issue 40's target: the append costs at most 1.5 times the put.
//!
//! `cargo bench -p a2-store --features offload,sqlite --bench offload`
//!
//! First, the two are timed alternately, round after round, in the same
//! process (`A2_OFFLOAD_ROUNDS`, 15 by default; 0 skips it), and the medians
//! and their ratio are printed: the figure to compare, as both sides see the
//! same machine state. Then criterion measures each on its own. Every
//! session and object written is deleted again, untimed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::layer::offload::object_store::path::Path;
use a2_store::layer::offload::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use a2_store::layer::offload::OffloadStore;
use a2_store::{json, DeleteSessionRequest, NewEvent, OpenOptions, Store, Value};
use criterion::{criterion_group, Criterion};

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

/// One append of `payload` into a new session; the time it took. The
/// session (and its object) is deleted afterwards, untimed.
async fn append(store: &OffloadStore, n: usize, payload: &Value) -> Duration {
    let session = format!("bench-{n}");
    let event = NewEvent::new("tool.result", payload.clone());
    let start = Instant::now();
    store
        .append(&session, vec![event], Default::default())
        .await
        .expect("append");
    let elapsed = start.elapsed();
    store
        .delete_session(DeleteSessionRequest::new(&session))
        .await
        .expect("delete");
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
        // One of each to warm up.
        append(&store, usize::MAX, &payload).await;
        put(&objects, usize::MAX, &bytes).await;
        let (mut appends, mut puts) = (Vec::new(), Vec::new());
        for n in 0..rounds {
            appends.push(append(&store, n, &payload).await);
            puts.push(put(&objects, n, &bytes).await);
        }
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
    let objects = Arc::clone(store.object_store());
    let mut group = c.benchmark_group("offload_10mb");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("layer_append", |b| {
        b.to_async(&runtime).iter_custom(|iterations| {
            let (store, payload) = (&store, &payload);
            async move {
                let mut total = Duration::ZERO;
                for n in 0..iterations {
                    total += append(store, n as usize, payload).await;
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
