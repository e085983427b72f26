//! The scaling series for memory, SQLite on a file and, when
//! `A2_POSTGRES_URL` is set, PostgreSQL: the cost of one operation as a
//! session grows. Group `scaling_<family>_<operation>`,
//! function id = backend, parameter = the size of the fixture:
//! - `events`: events in the session (1k, 10k, 100k, 1M);
//! - `inflight`: event cursors claimed by another holder (100, 1k, 10k);
//! - `finished`: finished event cursors (1k, 10k, 100k).
//!
//! `A2_BENCH_MAX_EVENTS` caps every size (1,000 in `--test` mode);
//! PostgreSQL's sizes are capped lower, at `A2_BENCH_POSTGRES_MAX_EVENTS`
//! (default 100,000), because pre-filling its fixtures is slow.

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{CursorKindBench, ScalingOp, ScalingSeries, ScalingShape};
use a2_conformance::StoreFactory;
use criterion::Criterion;
use tokio::runtime::Runtime;

/// A backend of the series and the largest fixture it is measured on.
struct Backend<'a> {
    factory: &'a dyn StoreFactory,
    max: u64,
}

/// The shapes of `all` sizes a backend capped at `max` is measured on: every
/// size up to `max`, or only `max` itself when every size is larger.
fn shapes_up_to(all: &[u64], shape: fn(u64) -> ScalingShape, max: u64) -> Vec<ScalingShape> {
    let mut shapes = all
        .iter()
        .copied()
        .filter(|size| *size <= max)
        .map(shape)
        .collect::<Vec<_>>();
    if shapes.is_empty() {
        shapes.push(shape(max.max(1)));
    }
    shapes
}

/// Runs `ops` on the shapes of `sizes` for every backend (up to its cap),
/// one group per operation, keeping each backend's fixtures until the
/// family is done.
fn family(
    c: &mut Criterion,
    rt: &Runtime,
    backends: &[Backend<'_>],
    sizes: &[u64],
    shape: fn(u64) -> ScalingShape,
    ops: &[ScalingOp],
) {
    let plans = backends
        .iter()
        .map(|backend| shapes_up_to(sizes, shape, backend.max))
        .collect::<Vec<_>>();
    let mut all = plans.iter().flatten().copied().collect::<Vec<_>>();
    all.sort_by_key(|shape| shape.size());
    all.dedup();
    let Some(first) = all.first() else {
        return;
    };
    let mut series = backends
        .iter()
        .map(|backend| ScalingSeries::new(backend.factory))
        .collect::<Vec<_>>();
    for op in ops {
        let mut group = c.benchmark_group(format!("scaling_{}_{}", first.family(), op.label()));
        for shape in &all {
            for (backend, plan) in series.iter_mut().zip(&plans) {
                if plan.contains(shape) {
                    backend.bench(&mut group, rt, *shape, *op);
                }
            }
        }
        group.finish();
    }
    for backend in &mut series {
        backend.release();
    }
}

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let max = settings::bench_settings().max_events;
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("scaling");
    let mut backends = vec![
        Backend {
            factory: &MemoryFactory,
            max,
        },
        Backend {
            factory: &file,
            max,
        },
    ];
    if let Some(postgres) = &postgres {
        backends.push(Backend {
            factory: postgres,
            max: settings::postgres_max_events(),
        });
    }
    let claim = |kind| ScalingOp::ClaimComplete(kind);
    family(
        &mut c,
        &rt,
        &backends,
        &[1_000, 10_000, 100_000, 1_000_000],
        ScalingShape::Events,
        &[
            ScalingOp::Append,
            ScalingOp::HasPending,
            claim(CursorKindBench::Lane),
            claim(CursorKindBench::Log),
            claim(CursorKindBench::Event),
        ],
    );
    family(
        &mut c,
        &rt,
        &backends,
        &[100, 1_000, 10_000],
        ScalingShape::InFlight,
        &[
            claim(CursorKindBench::Event),
            claim(CursorKindBench::Lane),
            ScalingOp::Append,
            ScalingOp::HasPending,
        ],
    );
    family(
        &mut c,
        &rt,
        &backends,
        &[1_000, 10_000, 100_000],
        ScalingShape::Finished,
        &[
            claim(CursorKindBench::Event),
            ScalingOp::Append,
            ScalingOp::HasPending,
        ],
    );
    c.final_summary();
}
