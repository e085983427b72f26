//! What the observability layer (`a2_store::ObservedStore`) costs: the
//! shared `claim_complete` body on a lane, for memory and SQLite in memory,
//! with the layer off and with each half on, in one run so the figures
//! compare. Group `layer_claim_complete`, function id = backend plus what is
//! on (`memory`, `memory+tracing`, `memory+metrics`, `memory+tracing+metrics`,
//! the same for `sqlite-memory`), parameter `lane`.
//!
//! "On" means recorded, not merely compiled in: tracing runs under a global
//! `tracing-subscriber` fmt subscriber at INFO that formats one line per
//! closed span (to a sink), and metrics under a global Prometheus recorder
//! (`metrics-exporter-prometheus`, latency in buckets, upkeep every second),
//! what an app that exports both would run. Without the layer neither sees a
//! call, so the plain rows measure the backend alone.

use std::sync::Arc;
use std::time::Duration;

use a2_benches::backends::{MemoryFactory, SqliteMemoryFactory};
use a2_benches::settings;
use a2_conformance::bench::{self, CursorKindBench};
use a2_conformance::{Capabilities, StoreFactory};
use a2_store::ObservedStore;
use a2_store_api::{Clock, IdGenerator, Result, Store};
use async_trait::async_trait;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tracing_subscriber::fmt::format::FmtSpan;

/// A backend's factory whose stores are wrapped in the layer.
struct Observed {
    inner: &'static dyn StoreFactory,
    name: String,
    tracing: bool,
    metrics: bool,
}

impl Observed {
    fn new(inner: &'static dyn StoreFactory, tracing: bool, metrics: bool) -> Self {
        let mut name = inner.name().to_owned();
        if tracing {
            name.push_str("+tracing");
        }
        if metrics {
            name.push_str("+metrics");
        }
        Self {
            inner,
            name,
            tracing,
            metrics,
        }
    }
}

#[async_trait]
impl StoreFactory for Observed {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let store = self.inner.create(clock, ids).await?;
        let observed = ObservedStore::new(store, self.inner.name())
            .with_tracing(self.tracing)
            .with_metrics(self.metrics);
        Ok(Arc::new(observed))
    }
}

/// Installs the global subscriber and recorder the "on" rows report to.
fn install_exporters() {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(std::io::sink)
        .finish();
    if let Err(error) = tracing::subscriber::set_global_default(subscriber) {
        panic!("cannot install the tracing subscriber: {error}");
    }
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
    install_exporters();
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let backends: [&'static dyn StoreFactory; 2] = [&MemoryFactory, &SqliteMemoryFactory];
    let observed: Vec<[Observed; 3]> = backends
        .iter()
        .map(|backend| {
            [
                Observed::new(*backend, true, false),
                Observed::new(*backend, false, true),
                Observed::new(*backend, true, true),
            ]
        })
        .collect();
    let mut group = c.benchmark_group("layer_claim_complete");
    for (backend, layered) in backends.iter().zip(&observed) {
        // The plain row runs the bare backend, without the wrapper.
        bench::claim_complete(&mut group, &rt, *backend, CursorKindBench::Lane);
        for factory in layered {
            bench::claim_complete(&mut group, &rt, factory, CursorKindBench::Lane);
        }
    }
    group.finish();
    c.final_summary();
}
