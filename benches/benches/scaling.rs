//! The scaling series for memory and SQLite on a file: the cost of one
//! operation as a session grows. Group `scaling_<family>_<operation>`,
//! function id = backend, parameter = the size of the fixture:
//! - `events`: events in the session (1k, 10k, 100k, 1M);
//! - `inflight`: event cursors claimed by another holder (100, 1k, 10k);
//! - `finished`: finished event cursors (1k, 10k, 100k).
//!
//! `A2_BENCH_MAX_EVENTS` caps every size (1,000 in `--test` mode).

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::settings;
use a2_conformance::bench::{CursorKindBench, ScalingOp, ScalingSeries, ScalingShape};
use a2_conformance::StoreFactory;
use criterion::Criterion;
use tokio::runtime::Runtime;

/// Runs `ops` on every shape for every backend, one group per operation,
/// keeping each backend's fixtures until the family is done.
fn family(
    c: &mut Criterion,
    rt: &Runtime,
    backends: &[Box<dyn StoreFactory>],
    shapes: &[ScalingShape],
    ops: &[ScalingOp],
) {
    let Some(first) = shapes.first() else {
        return;
    };
    let mut series = backends
        .iter()
        .map(|backend| ScalingSeries::new(backend.as_ref()))
        .collect::<Vec<_>>();
    for op in ops {
        let mut group = c.benchmark_group(format!("scaling_{}_{}", first.family(), op.label()));
        for shape in shapes {
            for backend in &mut series {
                backend.bench(&mut group, rt, *shape, *op);
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
    let backends: Vec<Box<dyn StoreFactory>> = vec![Box::new(MemoryFactory), Box::new(file)];
    let sizes = |all: &[u64], shape: fn(u64) -> ScalingShape| {
        let mut sizes = all
            .iter()
            .copied()
            .filter(|size| *size <= max)
            .map(shape)
            .collect::<Vec<_>>();
        if sizes.is_empty() {
            sizes.push(shape(max.max(1)));
        }
        sizes
    };
    let claim = |kind| ScalingOp::ClaimComplete(kind);
    family(
        &mut c,
        &rt,
        &backends,
        &sizes(&[1_000, 10_000, 100_000, 1_000_000], ScalingShape::Events),
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
        &sizes(&[100, 1_000, 10_000], ScalingShape::InFlight),
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
        &sizes(&[1_000, 10_000, 100_000], ScalingShape::Finished),
        &[
            claim(CursorKindBench::Event),
            ScalingOp::Append,
            ScalingOp::HasPending,
        ],
    );
    c.final_summary();
}
