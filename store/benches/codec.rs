//! What the encryption layer (`a2_store::EncryptedStore`) costs, with 1 KB
//! payloads (a chat message: a few short fields and ~900 characters of text).
//!
//! - group `codec_payload` (memory backend): append a batch of 100 events,
//!   then read them back, bare and through the layer. The difference per
//!   event is the per-payload encode + decode cost (JSON text, HMAC
//!   nonce of the place, AES-256-GCM-SIV, base64, both ways).
//! - group `codec_claim_complete` (SQLite, a file at `durability=normal`,
//!   and a private in-memory database): claim one head (its 1 KB payload
//!   decrypted) and complete it returning one 1 KB event (encrypted),
//!   bare and through the layer. The heads are appended beforehand, untimed.
//!
//! `cargo bench -p a2-store --features encryption,memory,sqlite --bench codec`
//! (add `postgres` and set `A2_POSTGRES_URL` for the PostgreSQL side of the
//! alternating mode, on scratch schemas dropped afterwards)
//!
//! With `A2_CODEC_ALTERNATE=<rounds>` the bench skips criterion and times
//! bare and encrypted alternately, one batch (memory) or one claim +
//! complete (SQLite) on each side in turn, in one process, printing the
//! median of each and their difference: the figures to compare (both sides
//! see the same machine state, bursts of load elsewhere hit both alike).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{
    json, ClaimRequest, CompleteRequest, EncryptedStore, Keyring, NewEvent, OpenOptions,
    ReadOptions, SecretKey, Store, Target, Value,
};
use criterion::{criterion_group, BenchmarkId, Criterion};

/// Events per batch of the payload group.
const BATCH: usize = 100;

/// A 1 KB chat message.
fn payload(n: usize) -> Value {
    let text: String = "The quick brown fox jumps over the lazy dog. "
        .chars()
        .cycle()
        .take(900)
        .collect();
    json!({"role": "user", "turn": n, "lang": "en", "text": text})
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn keys() -> Arc<Keyring> {
    Arc::new(
        Keyring::new()
            .with_key("k1", SecretKey::from_bytes([7; 32]))
            .expect("a keyring"),
    )
}

/// `inner` bare, or behind the layer.
fn wrap(inner: Arc<dyn Store>, encrypted: bool) -> Arc<dyn Store> {
    if encrypted {
        Arc::new(EncryptedStore::new(inner, keys()))
    } else {
        inner
    }
}

async fn memory(encrypted: bool) -> Arc<dyn Store> {
    let inner = a2_store::open("memory:", OpenOptions::default())
        .await
        .expect("a memory store");
    wrap(inner, encrypted)
}

/// One append of [`BATCH`] 1 KB events into a new session, then a read of them.
async fn append_and_read(store: &dyn Store, session: &str) {
    let events = (0..BATCH)
        .map(|n| NewEvent::new("msg", payload(n)))
        .collect();
    store
        .append(session, events, Default::default())
        .await
        .expect("append");
    let rows = store
        .read(session, ReadOptions::default())
        .await
        .expect("read");
    assert_eq!(rows.len(), BATCH);
}

/// `iters` heads with 1 KB payloads on lane `agent`/`main` of `session`.
async fn prefill(store: &dyn Store, session: &str, iters: u64) {
    let mut left = iters;
    let mut n = 0;
    while left > 0 {
        let take = left.min(500);
        let events = (0..take)
            .map(|_| {
                n += 1;
                NewEvent::new("job", payload(n)).with_target(Target::lane("agent", "main"))
            })
            .collect();
        store
            .append(session, events, Default::default())
            .await
            .expect("prefill");
        left -= take;
    }
}

/// Claims one head of `session` and completes it with one 1 KB reply.
async fn claim_complete(store: &dyn Store, session: &str) {
    let request = ClaimRequest {
        limit: Some(1),
        ..ClaimRequest::new(session, "w", Duration::from_secs(60))
    };
    let head = store
        .claim_available(request)
        .await
        .expect("claim")
        .into_heads()
        .pop()
        .expect("a head to claim");
    let reply = NewEvent::new("reply", payload(0));
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
        .await
        .expect("complete");
}

/// The SQLite backends of the claim + complete group.
#[derive(Debug, Clone, Copy)]
enum Sqlite {
    File,
    Memory,
}

impl Sqlite {
    fn name(self) -> &'static str {
        match self {
            Sqlite::File => "sqlite-file",
            Sqlite::Memory => "sqlite-memory",
        }
    }

    async fn open(self, dir: &tempfile::TempDir, encrypted: bool) -> Arc<dyn Store> {
        let url = match self {
            Sqlite::File => format!(
                "sqlite:{}?durability=normal",
                dir.path().join(format!("bench-{encrypted}.db")).display()
            ),
            Sqlite::Memory => "sqlite::memory:".to_owned(),
        };
        let inner = a2_store::open(&url, OpenOptions::default())
            .await
            .expect("a SQLite store");
        wrap(inner, encrypted)
    }
}

fn label(encrypted: bool) -> &'static str {
    if encrypted {
        "encrypted"
    } else {
        "bare"
    }
}

fn payloads(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("codec_payload");
    group.throughput(criterion::Throughput::Elements(BATCH as u64));
    for encrypted in [false, true] {
        let store = rt.block_on(memory(encrypted));
        let mut session = 0u64;
        group.bench_function(
            BenchmarkId::new("memory_append_read_1k", label(encrypted)),
            |b| {
                b.iter(|| {
                    session += 1;
                    rt.block_on(append_and_read(store.as_ref(), &format!("s{session}")));
                })
            },
        );
    }
    group.finish();
}

fn claims(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut group = c.benchmark_group("codec_claim_complete");
    for backend in [Sqlite::File, Sqlite::Memory] {
        for encrypted in [false, true] {
            let store = rt.block_on(backend.open(&dir, encrypted));
            let mut session = 0u64;
            let id = BenchmarkId::new(backend.name(), label(encrypted));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    session += 1;
                    let session = format!("s{session}");
                    rt.block_on(async {
                        prefill(store.as_ref(), &session, iters).await;
                        let start = Instant::now();
                        for _ in 0..iters {
                            claim_complete(store.as_ref(), &session).await;
                        }
                        start.elapsed()
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, payloads, claims);

/// Bare and encrypted timed alternately: `rounds` rounds, each timing a
/// block of operations on each side; prints the medians per operation.
fn alternate(rounds: usize) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let report = |what: &str, unit: &str, bare: Vec<f64>, enc: Vec<f64>| {
        let (bare, enc) = (median(bare), median(enc));
        println!(
            "{what}: bare {bare:.2} {unit}, encrypted {enc:.2} {unit}, difference {:.2} {unit} ({:+.1}%)",
            enc - bare,
            (enc / bare - 1.0) * 100.0
        );
    };
    // Per payload on memory: (append + read of a batch) / BATCH, in µs,
    // one batch on each side in turn.
    let stores = [rt.block_on(memory(false)), rt.block_on(memory(true))];
    let mut times = [Vec::new(), Vec::new()];
    let mut session = 0;
    for _ in 0..rounds * 10 {
        for (side, store) in stores.iter().enumerate() {
            session += 1;
            let start = Instant::now();
            rt.block_on(append_and_read(store.as_ref(), &format!("s{session}")));
            times[side].push(start.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
        }
    }
    let [bare, enc] = times;
    report(
        "memory, per 1 KB payload appended and read",
        "µs",
        bare,
        enc,
    );
    // Claim + complete: one operation on each side in turn, each timed
    // alone (so a burst of load elsewhere hits both sides alike).
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut backends: Vec<(String, [Arc<dyn Store>; 2])> = [Sqlite::File, Sqlite::Memory]
        .into_iter()
        .map(|backend| {
            let stores = [
                rt.block_on(backend.open(&dir, false)),
                rt.block_on(backend.open(&dir, true)),
            ];
            (backend.name().to_owned(), stores)
        })
        .collect();
    #[cfg(feature = "postgres")]
    let scratch = postgres_scratch();
    #[cfg(feature = "postgres")]
    if let Some(scratch) = &scratch {
        let open = |encrypted: bool| async move {
            let inner: Arc<dyn Store> = Arc::new(
                scratch
                    .create(
                        Arc::new(a2_store::SystemClock),
                        Arc::new(a2_store::RandomIds),
                    )
                    .await
                    .expect("a PostgreSQL store on a scratch schema"),
            );
            wrap(inner, encrypted)
        };
        let stores = [rt.block_on(open(false)), rt.block_on(open(true))];
        backends.push(("postgres".to_owned(), stores));
    }
    for (name, stores) in &backends {
        const BLOCK: u64 = 200;
        let mut times = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let session = format!("r{round}");
            for store in stores {
                rt.block_on(prefill(store.as_ref(), &session, BLOCK));
            }
            for _ in 0..BLOCK {
                for (side, store) in stores.iter().enumerate() {
                    let start = Instant::now();
                    rt.block_on(claim_complete(store.as_ref(), &session));
                    times[side].push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        let [bare, enc] = times;
        report(
            &format!("{name}, claim + complete with 1 KB payloads"),
            "µs",
            bare,
            enc,
        );
    }
    drop(backends);
    #[cfg(feature = "postgres")]
    if let Some(scratch) = &scratch {
        rt.block_on(scratch.drop_all())
            .expect("the scratch schemas dropped");
    }
}

/// Scratch schemas on `A2_POSTGRES_URL` for the PostgreSQL side (none
/// when it is unset: the PostgreSQL figures are then left out).
#[cfg(feature = "postgres")]
fn postgres_scratch() -> Option<a2_store::postgres::ScratchSchemas> {
    let url = std::env::var("A2_POSTGRES_URL").ok()?;
    Some(a2_store::postgres::ScratchSchemas::new(
        url,
        "a2codecbench_",
    ))
}

fn main() {
    if let Some(rounds) = std::env::var("A2_CODEC_ALTERNATE")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
    {
        alternate(rounds);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
