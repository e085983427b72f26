//! Every per-operation body for memory, SQLite in memory, SQLite on a file
//! (NORMAL) and, when `A2_POSTGRES_URL` is set, PostgreSQL, next to the bare
//! baselines; FULL durability in groups of its own (`*_full`), where
//! PostgreSQL (which commits durably, like FULL) is measured again.
//! Group = operation, function id = backend.

use a2_benches::backends::{self, SqliteFileFactory};
use a2_benches::baseline::sqlite::Storage;
use a2_benches::baseline::{collections, sqlite};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{self, CursorKindBench, TargetKind};
use a2_conformance::StoreFactory;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use tokio::runtime::Runtime;

/// Runs `body` for every backend in a fresh group named `name`, then `baselines`.
fn group(
    c: &mut Criterion,
    name: &str,
    backends: &[&dyn StoreFactory],
    mut body: impl FnMut(&mut BenchmarkGroup<'_, WallTime>, &dyn StoreFactory),
    baselines: impl FnOnce(&mut BenchmarkGroup<'_, WallTime>),
) {
    let mut group = c.benchmark_group(name);
    for backend in backends {
        body(&mut group, *backend);
    }
    baselines(&mut group);
    group.finish();
}

fn operations(c: &mut Criterion, rt: &Runtime, backends: &[&dyn StoreFactory]) {
    for batch in [1, 10, 100] {
        group(
            c,
            "append",
            backends,
            |g, f| bench::append_batch(g, rt, f, batch),
            |g| {
                collections::append(g, batch);
                sqlite::append(g, Storage::Memory, batch);
                sqlite::append(g, Storage::File, batch);
            },
        );
    }
    for kind in [TargetKind::Event, TargetKind::Lane] {
        group(
            c,
            "append_targets",
            backends,
            |g, f| bench::append_with_targets(g, rt, f, kind),
            |_| {},
        );
    }
    for kind in [
        CursorKindBench::Event,
        CursorKindBench::Lane,
        CursorKindBench::Log,
    ] {
        group(
            c,
            "claim_complete",
            backends,
            |g, f| bench::claim_complete(g, rt, f, kind),
            |g| {
                if kind == CursorKindBench::Lane {
                    collections::claim_complete(g);
                    sqlite::claim_complete(g, Storage::Memory);
                    sqlite::claim_complete(g, Storage::File);
                }
            },
        );
    }
    group(
        c,
        "claim_fail_reclaim",
        backends,
        |g, f| bench::claim_fail_reclaim(g, rt, f),
        |_| {},
    );
    group(
        c,
        "renew_100",
        backends,
        |g, f| bench::renew_claims(g, rt, f),
        |_| {},
    );
    group(
        c,
        "read_1000",
        backends,
        |g, f| bench::read_rows(g, rt, f),
        |_| {},
    );
    group(
        c,
        "subscribe_latency",
        backends,
        |g, f| bench::subscribe_latency(g, rt, f),
        |_| {},
    );
    group(
        c,
        "state_pins",
        backends,
        |g, f| bench::state_with_pins(g, rt, f),
        |_| {},
    );
    group(
        c,
        "presence",
        backends,
        |g, f| bench::presence(g, rt, f),
        |_| {},
    );
    group(
        c,
        "clear_reclaim_10k",
        backends,
        |g, f| bench::clear_reclaim(g, rt, f),
        |_| {},
    );
}

fn durable(c: &mut Criterion, rt: &Runtime, full: &[&dyn StoreFactory]) {
    for batch in [1, 10, 100] {
        group(
            c,
            "append_full",
            full,
            |g, f| bench::append_batch(g, rt, f, batch),
            |g| sqlite::append(g, Storage::FileFull, batch),
        );
    }
    group(
        c,
        "claim_complete_full",
        full,
        |g, f| bench::claim_complete(g, rt, f, CursorKindBench::Lane),
        |g| sqlite::claim_complete(g, Storage::FileFull),
    );
}

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let backends = match backends::standard() {
        Ok(backends) => backends,
        Err(error) => panic!("cannot set up the backends: {error}"),
    };
    let full = match SqliteFileFactory::full() {
        Ok(full) => full,
        Err(error) => panic!("cannot set up the FULL backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("operations");
    let postgres = postgres.as_ref().map(|p| p as &dyn StoreFactory);
    let standard = backends
        .iter()
        .map(|b| b.as_ref())
        .chain(postgres)
        .collect::<Vec<_>>();
    let durable_backends = std::iter::once(&full as &dyn StoreFactory)
        .chain(postgres)
        .collect::<Vec<_>>();
    operations(&mut c, &rt, &standard);
    durable(&mut c, &rt, &durable_backends);
    c.final_summary();
}
