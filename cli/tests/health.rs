//! `inspect URL health` through the real binary: a PostgreSQL store's
//! tables and oldest transaction (a fresh schema, when `A2_POSTGRES_URL` is
//! set), and a clear refusal for other stores.

#[path = "fixture/postgres.rs"]
mod postgres;

use std::process::{Command, Output};

use a2_store::prelude::*;

fn a2(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env_remove("A2_STORE_URL")
        .output()
        .expect("run a2-store")
}

#[test]
fn health_is_refused_for_stores_that_are_not_postgres() {
    let out = a2(&["inspect", "memory:", "health"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a PostgreSQL store"), "{err}");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn health_reports_tables_dead_tuples_and_the_oldest_transaction() {
    let Some(postgres::Scratch {
        schemas,
        server,
        schema,
        url: store_url,
    }) = postgres::scratch("health_reports_tables_dead_tuples_and_the_oldest_transaction")
    else {
        return;
    };
    let join = if server.contains('?') { '&' } else { '?' };
    let missing = format!("{server}{join}schema={schema}_missing");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = a2_store::open(&store_url, OpenOptions::default())
            .await
            .unwrap();
        let msg = NewEvent::new("msg", json!(1)).with_target(Target::lane("agent", "L"));
        store
            .append("s", vec![msg], AppendOptions::default())
            .await
            .unwrap();
        let lease = Duration::from_secs(30);
        let heads = store
            .claim_available(ClaimRequest::new("s", "w", lease))
            .await
            .unwrap()
            .into_heads();
        store
            .complete_attempt(CompleteRequest::for_head(&heads[0], vec![]))
            .await
            .unwrap();
    });

    let out = a2(&["inspect", &store_url, "health", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["schema"], schema.as_str());
    let names: Vec<&str> = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"events") && names.contains(&"cursors"),
        "{names:?}"
    );
    let events = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "events")
        .unwrap();
    assert!(events["table_bytes"].as_u64().unwrap() > 0, "{events}");
    assert!(report["dead_tuples"].is_u64(), "{report}");
    assert!(report.get("oldest_transaction").is_some(), "{report}");

    let out = a2(&["inspect", &store_url, "health"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("schema {schema}:")) && text.contains("oldest open transaction"),
        "{text}"
    );

    let out = a2(&["inspect", &missing, "health"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no schema") && err.contains("never creates one"),
        "{err}"
    );
    drop(schemas);
}
