//! Bloat: append + claim + complete cycles on one lane with autovacuum off
//! on the schema's tables, the sizes of the queue's state tables watched
//! through `PostgresStore::health`. Two phases: without and then with a
//! transaction held open on a side connection (it holds vacuum's horizon,
//! so no dead version can be removed, not even a HOT one).
//!
//! The store rotates its state tables (`Rotation`): a table that grew by
//! `min_growth` and doubled since its last rotation is truncated and its
//! live rows put back, which reclaims it whatever the horizon. Asserted,
//! in each phase: the state tables' size, sampled every 1% of the cycles
//! (and 20 times before the base), never exceeds twice its largest sample
//! over the phase's first tenth (or first 1% in the long form), so it stays
//! bounded however many cycles run; without rotation it grows with the cycles (a few hundred bytes a
//! cycle). Also asserted: `health` reports the held transaction as holding
//! back the horizon. Printed, not asserted: the sizes at the base and at
//! the end, the largest sample, and the mean time of a cycle over the
//! first and the last tenth of each phase (time is a bench's to judge).
//!
//! Short by default (2,000 cycles a phase, growth 128 KiB); with
//! `A2_PG_SOAK=1`, 1,000,000 cycles a phase with the default rotation
//! (256 KiB), compared with the first 10,000. `A2_PG_SOAK_CYCLES=N` sets
//! another count a phase, `A2_PG_SOAK_FREE_CYCLES=N` another for the
//! first phase (0 skips it).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{CounterIds, SystemClock};
// The state tables: the log (`events`) and the replay records
// (`completions`) grow with the work done, by design, until the session is
// cleared and reclaimed.
use a2_store_postgres::{Health, PostgresOptions, PostgresStore, Rotation, STATE_TABLES};
use support::PgFactory;

fn bytes_of(health: &Health, tables: &[&str]) -> u64 {
    health
        .tables
        .iter()
        .filter(|table| tables.contains(&table.name.as_str()))
        .map(|table| table.total_bytes())
        .sum()
}

fn describe(health: &Health) -> String {
    health
        .tables
        .iter()
        .filter(|table| STATE_TABLES.contains(&table.name.as_str()))
        .map(|t| {
            format!(
                "{}: {} + {} bytes, {} dead, {}/{} HOT",
                t.name, t.table_bytes, t.index_bytes, t.dead_tuples, t.hot_updates, t.updates
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Runs `cycles` cycles from `first`, sampling the state tables' size every
/// 1% of them (and 20 times up to `base_after`); asserts that no sample after `base_after` cycles exceeds
/// twice the largest up to it, and prints what it saw.
async fn phase(store: &PostgresStore, name: &str, first: u64, cycles: u64, base_after: u64) {
    let every = (cycles / 100).max(1);
    // Twenty samples at least before the base, so its largest is near the
    // top of a rotation's saw-tooth, as the later ones can be.
    let base_every = (base_after / 20).max(1);
    let tenth = (cycles / 10).max(1);
    let mut base_peak = 0;
    let mut base = None;
    let mut peak_after = 0;
    let mut started = Instant::now();
    let mut first_tenth = None;
    for n in 1..=cycles {
        support::lane_cycle(store, "soak", first + n).await;
        if n == tenth {
            first_tenth = Some(started.elapsed() / u32::try_from(tenth).unwrap_or(u32::MAX));
        }
        if n == cycles - tenth {
            started = Instant::now();
        }
        if n % every == 0 || (n <= base_after && n % base_every == 0) {
            let health = store.health().await.expect("health");
            let state = bytes_of(&health, &STATE_TABLES);
            if n % tenth == 0 {
                eprintln!("{name}: {n} cycles: {state} bytes");
            }
            if n <= base_after {
                base_peak = base_peak.max(state);
            } else {
                peak_after = peak_after.max(state);
            }
            if n == base_after {
                eprintln!(
                    "{name}: after {n} cycles: {state} bytes; {}",
                    describe(&health)
                );
                base = Some(state);
            }
        }
    }
    let last_tenth = started.elapsed() / u32::try_from(tenth).unwrap_or(u32::MAX);
    let health = store.health().await.expect("health");
    let end = bytes_of(&health, &STATE_TABLES);
    eprintln!(
        "{name}: after {cycles} cycles: {end} bytes; {}",
        describe(&health)
    );
    eprintln!(
        "{name}: end {end} bytes = {:.2}x the {} after {base_after}; largest sample {peak_after} after, \
         {base_peak} up to it ({:.2}x); a cycle took {:?} over the first tenth, {last_tenth:?} over the last",
        end as f64 / base.unwrap_or(1).max(1) as f64,
        base.unwrap_or(0),
        peak_after as f64 / base_peak.max(1) as f64,
        first_tenth.unwrap_or_default(),
    );
    assert!(
        peak_after <= 2 * base_peak,
        "{name}: the state tables reached {peak_after} bytes, more than twice {base_peak} \
         (their largest size in the first {base_after} cycles): {}",
        describe(&health)
    );
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_tables_stay_bounded_without_vacuum_even_under_a_held_transaction() {
    let Some(factory) = PgFactory::from_env("soak") else {
        return;
    };
    let long = std::env::var("A2_PG_SOAK").is_ok_and(|v| v == "1");
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let cycles = number("A2_PG_SOAK_CYCLES").unwrap_or(if long { 1_000_000 } else { 2_000 });
    let free_cycles = number("A2_PG_SOAK_FREE_CYCLES").unwrap_or(cycles);
    let base_of = |cycles: u64| {
        if long || cycles >= 100_000 {
            cycles / 100
        } else {
            cycles / 10
        }
    };
    let rotation = if long || cycles >= 100_000 {
        Rotation::default()
    } else {
        Rotation {
            interval: Some(Duration::from_millis(50)),
            min_growth: 128 << 10,
            ..Rotation::default()
        }
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(
        factory.url(),
        PostgresOptions {
            rotation,
            ..support::options(
                &schema,
                Arc::new(SystemClock),
                Arc::new(CounterIds::new("s")),
            )
        },
    )
    .await
    .expect("connect");
    let raw = support::raw_client(factory.url()).await;
    let tables = raw
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .expect("tables");
    for row in tables {
        let table: String = row.get(0);
        raw.batch_execute(&format!(
            "ALTER TABLE \"{schema}\".\"{table}\" SET (autovacuum_enabled = false)"
        ))
        .await
        .expect("autovacuum off");
    }
    if free_cycles > 0 {
        phase(
            &store,
            "without a held transaction",
            0,
            free_cycles,
            base_of(free_cycles),
        )
        .await;
    }

    // Held open for the whole second phase, the way an idle client's is.
    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("BEGIN; SELECT 1")
        .await
        .expect("open a transaction");
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    phase(
        &store,
        "under a held transaction",
        free_cycles,
        cycles,
        base_of(cycles),
    )
    .await;
    let health = store.health().await.expect("health");
    let oldest = health
        .oldest_transaction
        .clone()
        .expect("the held transaction is open");
    // Other tests may hold older transactions on a shared server.
    if oldest.pid == holder_pid {
        assert!(oldest.holds_horizon, "{oldest:?}");
        assert_eq!(oldest.state.as_deref(), Some("idle in transaction"));
    }
    holder.batch_execute("COMMIT").await.expect("commit");
}
