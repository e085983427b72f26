//! What the observability layer (`a2_store::ObservedStore`) costs: the
//! shared `claim_complete` body on a lane, for memory and SQLite in memory,
//! bare and wrapped, in one run so the rows compare. Group
//! `layer_claim_complete`, parameter `lane`, function id = backend plus what
//! the layer records:
//!
//! - `memory` / `sqlite-memory`: the bare backend, no wrapper;
//! - `+tracing`: spans on, under a `tracing-subscriber` registry with no
//!   output layer (the layer's own cost plus span bookkeeping);
//! - `+tracing-fmt`: spans on, under a fmt subscriber at INFO writing one
//!   line per closed span (to a sink): what logging every call costs;
//! - `+metrics`: metrics on, into a Prometheus recorder
//!   (`metrics-exporter-prometheus`, latency in buckets, upkeep every second);
//! - `+tracing-fmt+metrics`: both, as an app exporting both would run.
//!
//! Each row runs under its own subscriber (`tracing::subscriber::with_default`
//! around the row); the Prometheus recorder is global, and only rows with
//! metrics on report to it.

use std::sync::Arc;
use std::time::Duration;

use a2_benches::backends::{MemoryFactory, SqliteMemoryFactory};
use a2_benches::settings;
use a2_conformance::bench::{self, CursorKindBench};
use a2_conformance::{Layered, StoreFactory, StoreLayer};
use a2_store::ObservedStore;
use a2_store_api::{IdGenerator, Result, Store};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tracing::Dispatch;
use tracing_subscriber::fmt::format::FmtSpan;

/// Which subscriber a row's spans go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spans {
    /// Spans off.
    Off,
    /// A registry that keeps spans and writes nothing.
    Registry,
    /// A fmt subscriber writing a line per closed span to a sink.
    Fmt,
}

impl Spans {
    fn suffix(self) -> &'static str {
        match self {
            Self::Off => "",
            Self::Registry => "+tracing",
            Self::Fmt => "+tracing-fmt",
        }
    }

    /// The row's subscriber (the no-op one when spans are off).
    fn dispatch(self) -> Dispatch {
        match self {
            Self::Off => Dispatch::none(),
            Self::Registry => Dispatch::new(tracing_subscriber::registry()),
            Self::Fmt => Dispatch::new(
                tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::INFO)
                    .with_span_events(FmtSpan::CLOSE)
                    .with_ansi(false)
                    .with_writer(std::io::sink)
                    .finish(),
            ),
        }
    }
}

/// The observation layer with a row's settings: every store of a backend's
/// factory wrapped in it ([`Layered`]).
struct Observation {
    /// The backend's name, the layer's `backend` label.
    backend: String,
    spans: Spans,
    metrics: bool,
}

impl StoreLayer for Observation {
    type Call = ();

    fn suffix(&self) -> String {
        let mut suffix = self.spans.suffix().to_owned();
        if self.metrics {
            suffix.push_str("+metrics");
        }
        suffix
    }

    fn begin(&self, ids: Arc<dyn IdGenerator>) -> ((), Arc<dyn IdGenerator>) {
        ((), ids)
    }

    fn wrap(&self, _: &(), store: Arc<dyn Store>) -> Result<Arc<dyn Store>> {
        let observed = ObservedStore::new(store, self.backend.clone())
            .with_tracing(self.spans != Spans::Off)
            .with_metrics(self.metrics);
        Ok(Arc::new(observed))
    }
}

/// Installs the global Prometheus recorder the metrics rows report to.
fn install_recorder() {
    let builder = match PrometheusBuilder::new().set_buckets_for_metric(
        Matcher::Full("a2_store_call_duration_seconds".into()),
        &[
            0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0,
        ],
    ) {
        Ok(builder) => builder,
        Err(error) => panic!("cannot configure the Prometheus recorder: {error}"),
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    if let Err(error) = metrics::set_global_recorder(recorder) {
        panic!("cannot install the metrics recorder: {error}");
    }
    // What the exporter's own task does: drain histogram samples into buckets.
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        handle.run_upkeep();
    });
}

fn main() {
    install_recorder();
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let backends: [&'static dyn StoreFactory; 2] = [&MemoryFactory, &SqliteMemoryFactory];
    let layered = [
        (Spans::Registry, false),
        (Spans::Fmt, false),
        (Spans::Off, true),
        (Spans::Fmt, true),
    ];
    let mut group = c.benchmark_group("layer_claim_complete");
    for backend in backends {
        // The plain row runs the bare backend, without the wrapper.
        bench::claim_complete(&mut group, &rt, backend, CursorKindBench::Lane);
        for (spans, metrics) in layered {
            let layer = Observation {
                backend: backend.name().to_owned(),
                spans,
                metrics,
            };
            let factory = Layered::new(backend, layer);
            // The body runs the store on this thread (`block_on`), where
            // the row's subscriber is the default.
            tracing::dispatcher::with_default(&spans.dispatch(), || {
                bench::claim_complete(&mut group, &rt, &factory, CursorKindBench::Lane);
            });
        }
    }
    group.finish();
    c.final_summary();
}
