//! Shared by the PostgreSQL tests: the server URL from `A2_POSTGRES_URL`,
//! fresh schemas with random names, and dropping them afterwards.
#![allow(dead_code)]

use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_postgres::{PostgresOptions, PostgresStore, ScratchSchemas};

/// The variable naming the server the PostgreSQL tests run against.
pub const URL_VAR: &str = "A2_POSTGRES_URL";

/// The server URL, or `None` (after saying so on stderr) when the variable is
/// unset: then the caller returns early and the PostgreSQL cases do not run.
pub fn url_or_skip(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // Once per test binary, straight to stderr so the test harness
            // does not capture it: the skip must be visible.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "\n{test}: the PostgreSQL cases were NOT run: {URL_VAR} is not set. To run \
                     them, start PostgreSQL and set it, e.g.\n  \
                     {URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo test -p a2-store-postgres\n"
                );
            });
            None
        }
    }
}

/// A plain client on the server at `url` (its connection driven by a task of
/// its own), for tests that look at or lock rows behind a store's back.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("raw connect");
    tokio::spawn(connection);
    client
}

/// What every test store is opened with, apart from schema, clock and ids.
fn test_options() -> PostgresOptions {
    PostgresOptions {
        pool_size: 4,
        ..PostgresOptions::default()
    }
}

/// Options for a test store on `schema`.
pub fn options(schema: &str, clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> PostgresOptions {
    PostgresOptions {
        clock,
        ids,
        schema: schema.to_owned(),
        ..test_options()
    }
}

/// Claims with `claim` and dead-letters the first head it takes (one
/// attempt allowed), for tests that need a dead letter.
pub async fn dead_letter_one<S: Store + ?Sized>(store: &S, claim: a2_store_api::ClaimRequest) {
    let head = store
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads()
        .remove(0);
    store
        .fail_attempt(a2_store_api::FailRequest::for_head(&head, "down", 1))
        .await
        .expect("dead-letter");
}

/// Appends one job to `session`'s lane `agent`/`main` (its payload `n`),
/// claims it and completes it: the cycle of the bloat tests.
pub async fn lane_cycle(store: &PostgresStore, session: &str, n: u64) {
    use a2_store_api::{
        AppendOptions, ClaimRequest, CompleteRequest, CompleteResult, NewEvent, Target,
    };
    let event = NewEvent::new("job", serde_json::json!({ "n": n }))
        .with_target(Target::lane("agent", "main"));
    store
        .append(session, vec![event], AppendOptions::default())
        .await
        .expect("append");
    let heads = store
        .claim_available(ClaimRequest {
            session_id: session.into(),
            holder: "w".into(),
            ttl_ms: Some(60_000),
            limit: Some(1),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(heads.len(), 1, "cycle {n}: {heads:?}");
    let done = store
        .complete_attempt(CompleteRequest::for_head(&heads[0], Vec::new()))
        .await
        .expect("complete");
    assert!(
        matches!(done, CompleteResult::Completed { .. }),
        "cycle {n}: {done:?}"
    );
}

/// Undoes migration 15 (in a connection whose `search_path` is the
/// schema): the sessions' incarnations and last activity, their sequence
/// and the retention indexes go.
pub const UNDO_15: &str = "DROP INDEX presence_expiry; DROP INDEX sessions_idle; \
    ALTER TABLE sessions DROP COLUMN incarnation, DROP COLUMN last_activity; \
    DROP SEQUENCE IF EXISTS session_incarnations;";

/// Undoes migration 14 (in a connection whose `search_path` is the
/// schema): the rotation function goes.
pub const UNDO_14: &str = "DROP FUNCTION rotate_table(text, bigint, bigint);";

/// Undoes migration 12 (in a connection whose `search_path` is the
/// schema): version 5's live-head counts come back, counted from the
/// cursors, with the triggers keeping them.
pub const UNDO_12: &str = r#"
CREATE TABLE pending_counts (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    live       bigint NOT NULL,
    PRIMARY KEY (session_id, consumer)
);
INSERT INTO pending_counts (session_id, consumer, live)
    SELECT session_id, consumer, count(*) FROM cursors
    WHERE head IS NOT NULL AND failed_at IS NULL
    GROUP BY session_id, consumer;
CREATE FUNCTION count_pending() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.head IS NOT NULL AND OLD.failed_at IS NULL THEN
            UPDATE pending_counts SET live = live - 1
                WHERE session_id = OLD.session_id AND consumer = OLD.consumer;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.head IS NOT NULL AND NEW.failed_at IS NULL THEN
            INSERT INTO pending_counts AS p (session_id, consumer, live)
                VALUES (NEW.session_id, NEW.consumer, 1)
                ON CONFLICT (session_id, consumer) DO UPDATE SET live = p.live + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER cursors_count_insert AFTER INSERT ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.head IS NOT NULL AND NEW.failed_at IS NULL)
    EXECUTE FUNCTION count_pending();
CREATE CONSTRAINT TRIGGER cursors_count_update AFTER UPDATE ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
            <> (NEW.head IS NOT NULL AND NEW.failed_at IS NULL)
        OR ((OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
            AND (OLD.session_id <> NEW.session_id OR OLD.consumer <> NEW.consumer)))
    EXECUTE FUNCTION count_pending();
CREATE CONSTRAINT TRIGGER cursors_count_delete AFTER DELETE ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
    EXECUTE FUNCTION count_pending();
"#;

/// Undoes migration 10 (in a connection whose `search_path` is the
/// schema): the completion guard's function goes.
pub const UNDO_10: &str = "DROP FUNCTION expect_unchanged(boolean);";

/// Undoes migration 9 (in a connection whose `search_path` is the schema),
/// for the tests that open a store at an older version: version 8's
/// `cursors_dead` comes back.
pub const UNDO_9: &str = "DROP TABLE pauses; ALTER TABLE lane_queue DROP COLUMN not_before; \
    ALTER TABLE sessions DROP COLUMN forked_session, DROP COLUMN forked_index; \
    DROP INDEX cursors_dead; \
    CREATE INDEX cursors_dead ON cursors (session_id, head) \
      WHERE head IS NOT NULL AND failed_at IS NOT NULL;";

/// The prefix of every test schema (`a2t_<uuid>`).
pub const SCHEMA_PREFIX: &str = "a2t_";

/// Stores on fresh schemas of one server; drops every schema it made when
/// dropped itself (through [`ScratchSchemas`]).
pub struct PgFactory {
    scratch: ScratchSchemas,
}

impl PgFactory {
    /// A factory on the server named by `A2_POSTGRES_URL`, or `None`.
    pub fn from_env(test: &str) -> Option<Self> {
        url_or_skip(test).map(|url| Self::for_url(&url))
    }

    /// A factory on the server at `url`.
    #[allow(dead_code)] // only the conformance harness builds factories per case
    pub fn for_url(url: &str) -> Self {
        Self {
            scratch: ScratchSchemas::new(url.to_owned(), SCHEMA_PREFIX)
                .with_options(test_options()),
        }
    }

    /// A factory on the server at `url` whose stores rotate their state
    /// tables all the time: every few milliseconds, whenever a table has
    /// doubled since its last rotation, whether or not vacuum could
    /// reclaim it.
    #[allow(dead_code)]
    pub fn rotating(url: &str) -> Self {
        let options = PostgresOptions {
            rotation: a2_store_postgres::Rotation {
                interval: Some(std::time::Duration::from_millis(3)),
                min_growth: 0,
                vacuum_first: false,
                ..a2_store_postgres::Rotation::default()
            },
            ..test_options()
        };
        Self {
            scratch: ScratchSchemas::new(url.to_owned(), SCHEMA_PREFIX).with_options(options),
        }
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        self.scratch.url()
    }

    /// A new schema, remembered for dropping.
    pub fn schema(&self) -> String {
        self.scratch.fresh_schema().expect("a fresh schema name")
    }

    /// A new schema whose name ends with `suffix`, remembered for dropping.
    pub fn schema_with_suffix(&self, suffix: &str) -> String {
        self.scratch
            .fresh_schema_with_suffix(suffix)
            .expect("a fresh schema name with that suffix")
    }

    /// A store on `schema`.
    pub async fn store_on(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<PostgresStore> {
        self.scratch.open(schema, clock, ids).await
    }
}

#[async_trait::async_trait]
impl StoreFactory for PgFactory {
    fn name(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(self.scratch.create(clock, ids).await?))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let [first, second] = self.scratch.create_pair(clock, ids).await?;
        Ok(Some([Arc::new(first), Arc::new(second)]))
    }
}
