//! The web console's page renders (`a2-store-console`), each a whole request
//! through the router (`tower::ServiceExt::oneshot`: routing, the store
//! calls, the HTML and the security headers; no socket), on memory, SQLite
//! on a file (durability NORMAL) and, when `A2_POSTGRES_URL` is set,
//! PostgreSQL, each holding `A2_BENCH_MAX_SESSIONS` sessions (default
//! 100,000; 1,000 in `--test` mode):
//! - `console_page/<backend>-sessions`: `GET /sessions?limit=50`, the
//!   first page of the sessions list;
//! - `console_page/<backend>-sessions-middle`: `GET
//!   /sessions?after=<the middle session>&limit=50`, a page from the middle
//!   of the list;
//! - `console_page/<backend>-sessions-by-consumer`: `GET
//!   /sessions?consumer=agent&limit=50`, the sessions with work of a
//!   consumer (the store's work index);
//! - `console_page/<backend>-session`: `GET /sessions/<id>`, a session of
//!   50 events (messages and the replies they caused) with its cursors.
//!
//! Parameter = sessions in the store. One iteration is one page.
//!
//! Every session holds a message and its reply; every hundredth has a
//! message claimable by `agent` instead (1% with work, as in `work`).
//! Besides criterion's figures, each benchmark prints the p50 and p99 of
//! every request it timed: the target is at most 50 ms p99 per page
//! on 100k sessions.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{payload, START_MS};
use a2_conformance::StoreFactory;
use a2_store_api::{
    AppendOptions, ClaimRequest, CompleteRequest, ManualClock, NewEvent, RandomIds, Store, Target,
};
use a2_store_console::{router, ConsoleOptions};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;
use tower::ServiceExt;

/// The consumer whose work the fixture holds.
const CONSUMER: &str = "agent";

/// Store calls the fixture builder keeps in flight at once (the benchmark
/// PostgreSQL pools hold 8 connections).
const BUILD_CALLS: usize = 16;

/// The session the session page shows.
const LONG_SESSION: &str = "console-long";

/// Events of [`LONG_SESSION`]: the console's page of a timeline.
const LONG_EVENTS: u64 = 50;

/// The largest page a render may return.
const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// The id of the `index`th session of the fixture.
fn session_id(index: u64) -> String {
    format!("console-{index:07}")
}

/// The two events of an idle session, or the claimable message of a
/// session with work.
fn session_events(index: u64) -> Vec<NewEvent> {
    if index.is_multiple_of(100) {
        vec![NewEvent::new("user.message", payload(index))
            .with_target(Target::lane(CONSUMER, "main"))]
    } else {
        vec![
            NewEvent::new("user.message", payload(index)),
            NewEvent::new("agent.reply", payload(index + 1)),
        ]
    }
}

/// A store of `sessions` sessions and [`LONG_SESSION`], and the console
/// over it.
struct Fixture {
    sessions: u64,
    app: axum::Router,
    _store: Arc<dyn Store>,
}

impl Fixture {
    async fn build(factory: &dyn StoreFactory, sessions: u64) -> Fixture {
        let clock = ManualClock::new(START_MS);
        let store = match factory
            .create(Arc::new(clock.clone()), Arc::new(RandomIds))
            .await
        {
            Ok(store) => store,
            Err(error) => panic!("cannot create a {} store: {error}", factory.name()),
        };
        let shared: &dyn Store = store.as_ref();
        let started = Instant::now();
        futures::stream::iter(0..sessions)
            .map(|index| async move {
                if let Err(error) = shared
                    .append(
                        &session_id(index),
                        session_events(index),
                        AppendOptions::default(),
                    )
                    .await
                {
                    panic!("fixture append: {error}");
                }
            })
            .buffer_unordered(BUILD_CALLS)
            .collect::<Vec<()>>()
            .await;
        long_session(shared, &clock).await;
        eprintln!(
            "console: built {sessions} sessions on {} in {:.1} s",
            factory.name(),
            started.elapsed().as_secs_f64()
        );
        let options = ConsoleOptions::default().with_consumers(vec![CONSUMER.to_owned()]);
        Fixture {
            sessions,
            app: router(store.clone(), options),
            _store: store,
        }
    }

    /// Renders `path` once; the time it took. Panics unless the page is a
    /// 200 with a body.
    async fn render(&self, path: &str) -> Duration {
        self.page(path).await.0
    }

    /// Renders `path` once: the time it took and the page. Panics unless
    /// the answer is a 200.
    async fn page(&self, path: &str) -> (Duration, String) {
        let request = match Request::get(path).body(Body::empty()) {
            Ok(request) => request,
            Err(error) => panic!("request {path}: {error}"),
        };
        let start = Instant::now();
        let response = match self.app.clone().oneshot(request).await {
            Ok(response) => response,
            Err(error) => match error {},
        };
        let status = response.status();
        let body = match axum::body::to_bytes(response.into_body(), BODY_LIMIT).await {
            Ok(body) => body,
            Err(error) => panic!("reading the page {path}: {error}"),
        };
        let took = start.elapsed();
        let page = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        (took, page)
    }

    /// Checks once (untimed) that `path` shows what it should: `rows` rows
    /// of `testid`.
    async fn check(&self, path: &str, testid: &str, rows: usize) {
        let (_, page) = self.page(path).await;
        let shown = page.matches(&format!("data-testid=\"{testid}\"")).count();
        assert_eq!(
            shown, rows,
            "{path}: {shown} {testid} rows, {rows} expected"
        );
    }
}

/// [`LONG_SESSION`]: messages for `agent`, each claimed and completed with
/// a reply (so the timeline shows causes), [`LONG_EVENTS`] events in all.
async fn long_session(store: &dyn Store, clock: &ManualClock) {
    let mut seq = 0;
    while seq + 2 <= LONG_EVENTS {
        clock.advance(1_000);
        let message =
            NewEvent::new("user.message", payload(seq)).with_target(Target::lane(CONSUMER, "main"));
        if let Err(error) = store
            .append(LONG_SESSION, vec![message], AppendOptions::default())
            .await
        {
            panic!("long session append: {error}");
        }
        let claim = ClaimRequest::new(LONG_SESSION, "worker-1", Duration::from_secs(60));
        let heads = match store.claim_available(claim).await {
            Ok(result) => result.into_heads(),
            Err(error) => panic!("long session claim: {error}"),
        };
        for head in heads {
            let reply = NewEvent::new("agent.reply", payload(seq + 1));
            if let Err(error) = store
                .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
                .await
            {
                panic!("long session complete: {error}");
            }
        }
        seq += 2;
    }
}

/// A page measured.
struct Page {
    /// The function id's suffix.
    name: &'static str,
    /// What is requested on a store of so many sessions.
    path: fn(u64) -> String,
    /// The `data-testid` of the rows the page shows.
    testid: &'static str,
    /// How many rows it shows on a store of so many sessions.
    rows: fn(u64) -> usize,
}

/// The pages measured.
const PAGES: [Page; 4] = [
    Page {
        name: "sessions",
        path: |_| "/sessions?limit=50".to_owned(),
        testid: "session-row",
        rows: |sessions| (sessions as usize + 1).min(50),
    },
    Page {
        name: "sessions-middle",
        path: |sessions| format!("/sessions?after={}&limit=50", session_id(sessions / 2)),
        // The ids after the middle one, and `console-long` (which sorts
        // after every numbered id).
        testid: "session-row",
        rows: |sessions| ((sessions - sessions / 2) as usize).min(50),
    },
    Page {
        name: "sessions-by-consumer",
        path: |_| format!("/sessions?consumer={CONSUMER}&limit=50"),
        testid: "session-row",
        rows: |sessions| (sessions.div_ceil(100) as usize).min(50),
    },
    Page {
        name: "session",
        path: |_| format!("/sessions/{LONG_SESSION}"),
        testid: "event",
        rows: |_| LONG_EVENTS as usize,
    },
];

/// Every request's time of one benchmark, for its percentiles.
type Samples = Arc<Mutex<Vec<Duration>>>;

/// The `q` quantile of `samples` (sorted in place).
fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64) * q).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

fn bench_pages(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    sessions: u64,
) {
    let fixture = rt.block_on(Fixture::build(factory, sessions));
    for Page {
        name,
        path,
        testid,
        rows,
    } in PAGES
    {
        let path = path(fixture.sessions);
        let path = path.as_str();
        rt.block_on(fixture.check(path, testid, rows(fixture.sessions)));
        let samples: Samples = Arc::default();
        let id = BenchmarkId::new(format!("{}-{name}", factory.name()), fixture.sessions);
        group.throughput(Throughput::Elements(1));
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    let mut times = Vec::with_capacity(iters as usize);
                    for _ in 0..iters {
                        let took = fixture.render(path).await;
                        times.push(took);
                        total += took;
                    }
                    samples
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend(times);
                    total
                })
            })
        });
        let mut all = std::mem::take(&mut *samples.lock().unwrap_or_else(PoisonError::into_inner));
        eprintln!(
            "console_page/{}-{name}/{}: {} requests, p50 {:.2} ms, p99 {:.2} ms",
            factory.name(),
            fixture.sessions,
            all.len(),
            quantile(&mut all, 0.50).as_secs_f64() * 1e3,
            quantile(&mut all, 0.99).as_secs_f64() * 1e3,
        );
    }
}

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let sessions = settings::work_settings().max_sessions.max(1);
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("console");
    let mut backends: Vec<&dyn StoreFactory> = vec![&MemoryFactory, &file];
    if let Some(postgres) = &postgres {
        backends.push(postgres);
    }
    let mut group = c.benchmark_group("console_page");
    for backend in backends {
        bench_pages(&mut group, &rt, backend, sessions);
    }
    group.finish();
    c.final_summary();
}
