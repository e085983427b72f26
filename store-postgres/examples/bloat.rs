//! What claim + complete cycles leave behind without vacuum, for the README's
//! "Bloat" figures: for each of two fresh schemas (autovacuum off on every
//! table), one as migrated and one with a fill factor of 80 set on
//! `cursors` and `work` (an experiment: the schema does not set it),
//! appends N event heads (in batches of 100), claims and completes each
//! one, then prints per table updates, HOT updates and dead tuples
//! (`pg_stat_user_tables`) and the heap and index sizes
//! (`pg_relation_size`).
//!
//! ```sh
//! A2_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release -p a2-store-postgres --example bloat -- 2000
//! ```
//!
//! Both schemas are dropped at the end.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{ClaimResult, CompleteRequest, RandomIds, Store, StoreError, SystemClock};
use a2_store_postgres::scratch::fresh_schema_name;
use a2_store_postgres::{PostgresOptions, PostgresStore};
use tokio_postgres::NoTls;

mod support;
use support::{append_jobs, claim_one};

/// The tables a cycle writes.
const TABLES: [&str; 5] = ["cursors", "work", "sessions", "completions", "events"];

fn backend(what: &str) -> impl FnOnce(tokio_postgres::Error) -> StoreError + '_ {
    move |error| StoreError::backend(what, error)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> a2_store_api::Result<()> {
    let Ok(url) = std::env::var("A2_POSTGRES_URL") else {
        eprintln!("set A2_POSTGRES_URL to a PostgreSQL server");
        return Ok(());
    };
    let cycles: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let plain = if url.contains("sslmode=") {
        url.clone()
    } else if url.contains('?') {
        format!("{url}&sslmode=disable")
    } else {
        format!("{url}?sslmode=disable")
    };
    let (client, connection) = tokio_postgres::connect(&plain, NoTls)
        .await
        .map_err(backend("connecting"))?;
    tokio::spawn(connection);
    for (layout, fill) in [
        ("as migrated", false),
        ("fill factor 80 on cursors and work", true),
    ] {
        let schema = fresh_schema_name("a2bloat_")?;
        let store = PostgresStore::connect(
            &url,
            PostgresOptions {
                schema: schema.clone(),
                clock: Arc::new(SystemClock),
                ids: Arc::new(RandomIds),
                pool_size: 2,
                ..PostgresOptions::default()
            },
        )
        .await?;
        let mut setup = String::new();
        for table in TABLES {
            setup.push_str(&format!(
                "ALTER TABLE \"{schema}\".\"{table}\" SET (autovacuum_enabled = false); "
            ));
        }
        if fill {
            setup.push_str(&format!(
                "ALTER TABLE \"{schema}\".cursors SET (fillfactor = 80); \
                 ALTER TABLE \"{schema}\".work SET (fillfactor = 80);"
            ));
        }
        client
            .batch_execute(&setup)
            .await
            .map_err(backend("autovacuum off"))?;
        run(&store, cycles).await?;
        // Backends report their statistics when idle, at most once a second.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .map_err(backend("statistics"))?;
        println!("{layout}, {cycles} cycles:");
        println!("| table | updates | HOT | dead tuples | heap bytes | indexes (bytes) |");
        println!("|---|---|---|---|---|---|");
        for table in TABLES {
            let row = client
                .query_one(
                    "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, pg_relation_size(relid) \
                     FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
                    &[&schema, &table],
                )
                .await
                .map_err(backend("table statistics"))?;
            let indexes = client
                .query(
                    "SELECT indexrelname::text, pg_relation_size(indexrelid) \
                     FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = $2 \
                     ORDER BY indexrelname",
                    &[&schema, &table],
                )
                .await
                .map_err(backend("index sizes"))?;
            let indexes: Vec<String> = indexes
                .iter()
                .map(|row| format!("{} {}", row.get::<_, String>(0), row.get::<_, i64>(1)))
                .collect();
            println!(
                "| `{table}` | {} | {} | {} | {} | {} |",
                row.get::<_, i64>(0),
                row.get::<_, i64>(1),
                row.get::<_, i64>(2),
                row.get::<_, i64>(3),
                indexes.join(", ")
            );
        }
        println!();
        store.drop_schema().await?;
    }
    Ok(())
}

/// Appends `cycles` event heads to one session, then claims and completes
/// each one.
async fn run(store: &PostgresStore, cycles: usize) -> a2_store_api::Result<()> {
    let session = "bloat";
    append_jobs(store, session, cycles).await?;
    let request = claim_one(session);
    loop {
        let ClaimResult::Claimed { heads, .. } = store.claim_available(request.clone()).await?
        else {
            return Ok(());
        };
        for head in heads {
            store
                .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
                .await?;
        }
    }
}
