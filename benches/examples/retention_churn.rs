//! The retention churn soak: sessions created, worked to their end and
//! pruned as fast as they come, for as long as asked; the store's storage
//! must stop growing.
//!
//! Each round, `--workers` tasks (default 8) run `--round` sessions
//! (default 1,000) through their whole life: a message queued on a lane,
//! claimed, completed with a reply. Then the store's clock moves two
//! minutes on and `prune` (idle one minute) deletes every finished session,
//! page after page. The storage is measured after the first `--early`
//! sessions (default 10,000) and at the end of `--sessions` (default
//! 100,000): the SQLite file with its WAL, or the PostgreSQL schema's
//! tables with their indexes and TOAST, with a transaction held open on
//! another connection for the whole run (vacuum can remove nothing), as the
//! issue asks. Exits 1 when the end is above twice the early size.
//!
//! ```text
//! cargo run --release -p a2-benches --example retention_churn -- sqlite --sessions 1000000
//! A2_POSTGRES_URL=postgres://... cargo run --release -p a2-benches --example retention_churn -- postgres
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_benches::postgres::{SCHEMA_PREFIX, URL_VAR};
use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, ManualClock, NewEvent, PruneRequest,
    RandomIds, Store, Target,
};
use a2_store_postgres::ScratchSchemas;
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

/// Where the store's clock starts.
const START_MS: i64 = 1_700_000_000_000;

struct Args {
    backend: String,
    sessions: u64,
    early: u64,
    round: u64,
    workers: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        backend: "sqlite".into(),
        sessions: 100_000,
        early: 10_000,
        round: 1_000,
        workers: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.replace('_', "").parse::<u64>().ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match arg.as_str() {
            "--sessions" => args.sessions = value("--sessions")?,
            "--early" => args.early = value("--early")?,
            "--round" => args.round = value("--round")?,
            "--workers" => args.workers = usize::try_from(value("--workers")?).unwrap_or(1),
            "sqlite" | "postgres" => args.backend = arg,
            other => return Err(format!("unknown argument '{other}': sqlite or postgres, --sessions, --early, --round, --workers")),
        }
    }
    if args.early >= args.sessions {
        return Err("--early must be below --sessions".into());
    }
    Ok(args)
}

/// The storage a store under churn is measured by.
enum Storage {
    /// A SQLite file (and its WAL).
    Sqlite { path: PathBuf },
    /// A PostgreSQL schema, with the connection holding a transaction open.
    Postgres(Box<PgStorage>),
}

/// A PostgreSQL schema measured by `client` while `holder` keeps a
/// transaction open.
struct PgStorage {
    client: tokio_postgres::Client,
    holder: tokio_postgres::Client,
    schema: String,
}

impl Storage {
    async fn bytes(&self) -> Result<u64, String> {
        match self {
            Self::Sqlite { path } => {
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                let main = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
                let wal = std::fs::metadata(PathBuf::from(wal)).map_or(0, |m| m.len());
                Ok(main + wal)
            }
            Self::Postgres(pg) => {
                let PgStorage { client, schema, .. } = pg.as_ref();
                let row = client
                    .query_one(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[schema],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let bytes: i64 = row.get(0);
                Ok(u64::try_from(bytes).unwrap_or(0))
            }
        }
    }

    /// Whether the held transaction is still open (PostgreSQL).
    async fn still_held(&self) -> bool {
        match self {
            Self::Sqlite { .. } => true,
            Self::Postgres(pg) => pg
                .holder
                .query_one("SELECT txid_current_if_assigned() IS NOT NULL", &[])
                .await
                .map(|row| row.get::<_, bool>(0))
                .unwrap_or(false),
        }
    }
}

/// A client of `url`, its connection driven on the runtime.
async fn client(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect to {URL_VAR}: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// One session's whole life: queued, claimed, completed with a reply.
async fn live(store: &dyn Store, session: &str) -> Result<(), String> {
    let message = NewEvent::new("msg", json!({"text": "hello there"}))
        .with_target(Target::lane("agent", "main"));
    store
        .append(session, vec![message], AppendOptions::default())
        .await
        .map_err(|e| format!("append: {e}"))?;
    let claim = ClaimRequest::new(session, "worker", Duration::from_secs(60));
    let head = match store.claim_available(claim).await {
        Ok(ClaimResult::Claimed { mut heads, .. }) if !heads.is_empty() => heads.swap_remove(0),
        other => return Err(format!("claim of '{session}': {other:?}")),
    };
    let reply = NewEvent::new("reply", json!({"text": "hi"}));
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
        .await
        .map_err(|e| format!("complete: {e}"))?;
    Ok(())
}

/// Prunes every finished session idle for a minute; returns how many went.
async fn prune_all(store: &dyn Store) -> Result<u64, String> {
    let mut pruned = 0;
    let mut from = None;
    loop {
        let page = store
            .prune(
                PruneRequest::idle_for(Duration::from_secs(60))
                    .with_limit(1_000)
                    .after(from),
            )
            .await
            .map_err(|e| format!("prune: {e}"))?;
        pruned += page.sessions.len() as u64;
        if !page.more() {
            return Ok(pruned);
        }
        from = page.next;
    }
}

async fn run(args: Args) -> Result<bool, String> {
    let clock = ManualClock::new(START_MS);
    let ids = Arc::new(RandomIds);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut scratch = None;
    let (store, storage): (Arc<dyn Store>, Storage) = match args.backend.as_str() {
        "sqlite" => {
            let path = dir.path().join("churn.db");
            let options = SqliteOptions {
                clock: Arc::new(clock.clone()),
                ids,
                ..SqliteOptions::default()
            };
            let store = SqliteStore::open(&path, options).map_err(|e| e.to_string())?;
            (Arc::new(store), Storage::Sqlite { path })
        }
        _ => {
            let url = std::env::var(URL_VAR)
                .map_err(|_| format!("set {URL_VAR} to run the postgres churn"))?;
            let schemas = ScratchSchemas::new(url.clone(), SCHEMA_PREFIX);
            let store = schemas
                .create(Arc::new(clock.clone()), ids)
                .await
                .map_err(|e| e.to_string())?;
            let schema = store.schema().to_owned();
            let holder = client(&url).await?;
            holder
                .batch_execute("BEGIN; SELECT txid_current();")
                .await
                .map_err(|e| format!("holding a transaction: {e}"))?;
            let storage = Storage::Postgres(Box::new(PgStorage {
                client: client(&url).await?,
                holder,
                schema,
            }));
            scratch = Some(schemas);
            (Arc::new(store), storage)
        }
    };
    let started = Instant::now();
    let mut done = 0;
    let mut early = None;
    while done < args.sessions {
        let round = args.round.min(args.sessions - done);
        let first = done;
        let shared = store.as_ref();
        let failures: Vec<String> = futures::stream::iter(first..first + round)
            .map(|n| async move { live(shared, &format!("churn-{n:09}")).await })
            .buffer_unordered(args.workers)
            .filter_map(|result| async move { result.err() })
            .collect()
            .await;
        if let Some(failure) = failures.first() {
            return Err(failure.clone());
        }
        clock.advance(120_000);
        let pruned = prune_all(store.as_ref()).await?;
        if pruned != round {
            return Err(format!(
                "sessions {first}..{}: {pruned} of {round} finished sessions were pruned",
                first + round
            ));
        }
        done += round;
        if early.is_none() && done >= args.early {
            early = Some(storage.bytes().await?);
        }
    }
    let end = storage.bytes().await?;
    let early = early.unwrap_or(end);
    let held = storage.still_held().await;
    let seconds = started.elapsed().as_secs_f64();
    let ratio = end as f64 / early.max(1) as f64;
    println!(
        "{}: {} sessions created, worked and pruned in {seconds:.1} s ({:.0}/s); storage {} bytes after {} sessions, {} bytes at the end: {ratio:.2}x{}",
        args.backend,
        args.sessions,
        args.sessions as f64 / seconds.max(f64::EPSILON),
        early,
        args.early,
        end,
        if matches!(storage, Storage::Postgres(_)) {
            if held {
                " (a transaction held open throughout)"
            } else {
                " (the held transaction ended early!)"
            }
        } else {
            ""
        }
    );
    drop(store);
    drop(storage);
    if let Some(schemas) = scratch {
        schemas.drop_all().await.map_err(|e| e.to_string())?;
    }
    Ok(ratio <= 2.0 && held)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("retention_churn: {message}");
            std::process::exit(2);
        }
    };
    match run(args).await {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("retention_churn: the storage grew above twice its early size");
            std::process::exit(1);
        }
        Err(message) => {
            eprintln!("retention_churn: {message}");
            std::process::exit(1);
        }
    }
}
