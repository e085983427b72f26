//! `a2-store inspect URL health`: how a PostgreSQL store's tables are
//! doing (live and dead tuples, HOT updates, table and index size) and the
//! server's oldest open transaction, which holds back vacuum.

use a2_store::postgres::{self, Health, PostgresStore};
use a2_store::{OpenOptions, StoreUrl};
use serde_json::json;

use crate::failure::Failure;
use crate::output::{print, print_json, JSON_VERSION};
use crate::table::Table;
use crate::target;

/// Dead tuples above this share of a table's rows get a `vacuum` hint.
const DEAD_SHARE_HINT: f64 = 0.2;

/// An open transaction older than this gets a hint: it keeps vacuum from
/// cleaning anything newer than it.
const OLD_TRANSACTION_SECS: u64 = 60;

/// Runs `inspect URL health`.
pub async fn run(url: &str, json: bool) -> Result<(), Failure> {
    let parsed = target::parse(url)?;
    let StoreUrl::Postgres {
        url: connection,
        options,
    } = &parsed
    else {
        return Err(Failure::new(format!(
            "'{parsed}' is not a PostgreSQL store: `inspect health` reads PostgreSQL's statistics (SQLite and memory stores keep no dead tuples to report)"
        )));
    };
    let read_only = OpenOptions::default().with_read_only(true);
    let backend = postgres::options(options, read_only);
    let schema = backend.schema.clone();
    let exists = postgres::schema_exists(connection, &schema).await.ok();
    if exists == Some(false) {
        return Err(Failure::new(format!(
            "no schema '{schema}' on the PostgreSQL server of {parsed}: check the URL's database and ?schema= (this command never creates one)"
        )));
    }
    let store = PostgresStore::connect(connection, backend)
        .await
        .map_err(|error| Failure::store(&parsed.to_string(), "opening the store", &error))?;
    let health = store.health().await.map_err(|error| {
        Failure::store(&parsed.to_string(), "reading the schema's health", &error)
    })?;
    if json {
        print_json(&as_json(&health))
    } else {
        print(&render(&health))
    }
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0))
}

/// Bytes as B, KiB, MiB or GiB.
fn bytes(value: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut size = value as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

/// The table view, with a line on the oldest transaction and hints.
fn render(health: &Health) -> String {
    let mut table = Table::new([
        "table", "live", "dead", "dead %", "updates", "HOT %", "table", "indexes",
    ])
    .right_align([1, 2, 3, 4, 5, 6, 7]);
    let mut bloated = Vec::new();
    for t in &health.tables {
        let dead = share(t.dead_tuples, t.live_tuples + t.dead_tuples);
        if dead.is_some_and(|d| d > DEAD_SHARE_HINT) {
            bloated.push(t.name.clone());
        }
        table.row([
            t.name.clone(),
            t.live_tuples.to_string(),
            t.dead_tuples.to_string(),
            percent(dead),
            t.updates.to_string(),
            percent(share(t.hot_updates, t.updates)),
            bytes(t.table_bytes),
            bytes(t.index_bytes),
        ]);
    }
    let mut text = format!(
        "schema {}: {} tables, {} dead tuples, {} in all\n{}",
        health.schema,
        health.tables.len(),
        health.dead_tuples(),
        bytes(health.total_bytes()),
        table.render()
    );
    match &health.oldest_transaction {
        None => text.push_str("\noldest open transaction: none\n"),
        Some(tx) => {
            text.push_str(&format!(
                "\noldest open transaction: pid {}, open {} s, state {}, application '{}', {}\n",
                tx.pid,
                tx.age.as_secs(),
                tx.state.as_deref().unwrap_or("unknown"),
                tx.application_name,
                if tx.holds_horizon {
                    "holds the vacuum horizon"
                } else {
                    "holds no snapshot"
                }
            ));
            if tx.holds_horizon && tx.age.as_secs() >= OLD_TRANSACTION_SECS {
                text.push_str(
                    "hint: vacuum cannot remove rows that died after this transaction began: end it (pg_terminate_backend) if it is stuck\n",
                );
            }
        }
    }
    if !bloated.is_empty() {
        text.push_str(&format!(
            "hint: {} {} more than {:.0}% dead tuples: check that autovacuum runs (or VACUUM them)\n",
            bloated.join(", "),
            if bloated.len() == 1 { "has" } else { "have" },
            DEAD_SHARE_HINT * 100.0
        ));
    }
    text
}

/// The JSON view: every figure, ages in ms (also the console's health report).
pub fn as_json(health: &Health) -> serde_json::Value {
    json!({
        "version": JSON_VERSION,
        "schema": health.schema,
        "dead_tuples": health.dead_tuples(),
        "total_bytes": health.total_bytes(),
        "tables": health.tables.iter().map(|t| json!({
            "name": t.name,
            "live_tuples": t.live_tuples,
            "dead_tuples": t.dead_tuples,
            "updates": t.updates,
            "hot_updates": t.hot_updates,
            "table_bytes": t.table_bytes,
            "index_bytes": t.index_bytes,
        })).collect::<Vec<_>>(),
        "oldest_transaction": health.oldest_transaction.as_ref().map(|tx| json!({
            "pid": tx.pid,
            "age_ms": u64::try_from(tx.age.as_millis()).unwrap_or(u64::MAX),
            "state": tx.state,
            "application_name": tx.application_name,
            "holds_horizon": tx.holds_horizon,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_at_a_glance() {
        assert_eq!(bytes(500), "500 B");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(percent(share(30, 100)), "30%");
        assert_eq!(percent(share(0, 0)), "-");
    }
}
