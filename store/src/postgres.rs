//! What the PostgreSQL backend offers beyond [`open`](crate::open), for
//! tools built on the facade (feature `postgres`): how a URL's options
//! become [`PostgresOptions`], whether a schema exists, and
//! [`ScratchSchemas`] — fresh, uniquely named schemas that are dropped
//! again, for checks, tests and benchmarks on a shared server.
//!
//! ```no_run
//! use a2_store::postgres::{self, ScratchSchemas};
//! use a2_store::{OpenOptions, StoreUrl};
//!
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! let url = StoreUrl::parse("postgres://postgres@127.0.0.1:5432/test?pool_size=4")?;
//! if let StoreUrl::Postgres { url: server, options } = &url {
//!     let schema = postgres::options(options, OpenOptions::default()).schema;
//!     println!("{schema} exists: {}", postgres::schema_exists(server, &schema).await?);
//!     let scratch = ScratchSchemas::new(server.clone(), "a2demo_")
//!         .with_options(postgres::options(options, OpenOptions::default()));
//!     let defaults = OpenOptions::default();
//!     let store = scratch.create(defaults.clock, defaults.ids).await?;
//!     drop(store);
//!     scratch.drop_all().await?;
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

pub use a2_store_postgres::scratch::{
    fresh_schema_name, schema_exists, schemas_with_prefix, SCRATCH_CONNECT_TIMEOUT,
};
pub use a2_store_postgres::{Health, OpenTransaction, TableHealth};
pub use a2_store_postgres::{PostgresOptions, PostgresStore, ScratchSchemas};
pub use a2_store_postgres::{RotatedTable, Rotation, RotationReport, STATE_TABLES};

use crate::options::OpenOptions;
use crate::url::PostgresUrlOptions;

/// The backend options a PostgreSQL URL asks for: its `schema`,
/// `pool_size`, `min_idle`, `statement_timeout_ms`, `pool_timeout_ms`,
/// `idle_timeout_ms`, `max_lifetime_ms`, `network_timeout_ms` and the `rotate_*` keys where given, the backend's
/// defaults elsewhere, with the clock and ids of `options`. This is what
/// [`open`](crate::open) connects with. (`application_name`,
/// `connect_timeout`, `target_session_attrs`, the other driver keys and the
/// TLS keys stay in the connection URL, where the backend reads them.)
pub fn options(url_options: &PostgresUrlOptions, options: OpenOptions) -> PostgresOptions {
    let mut postgres = PostgresOptions {
        clock: options.clock,
        ids: options.ids,
        ..PostgresOptions::default()
    };
    if let Some(schema) = &url_options.schema {
        postgres.schema = schema.clone();
    }
    if let Some(size) = url_options.pool_size {
        postgres.pool_size = size;
    }
    if let Some(count) = url_options.min_idle {
        postgres.min_idle = count;
    }
    if let Some(ms) = url_options.statement_timeout_ms {
        postgres.statement_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = url_options.pool_timeout_ms {
        postgres.pool_timeout = Some(Duration::from_millis(ms));
    }
    if let Some(ms) = url_options.idle_timeout_ms {
        postgres.idle_timeout = Some(Duration::from_millis(ms));
    }
    if let Some(ms) = url_options.max_lifetime_ms {
        postgres.max_lifetime = Some(Duration::from_millis(ms));
    }
    if let Some(ms) = url_options.rotate_interval_ms {
        postgres.rotation.interval = (ms > 0).then(|| Duration::from_millis(ms));
    }
    if let Some(bytes) = url_options.rotate_min_growth {
        postgres.rotation.min_growth = bytes;
    }
    if let Some(rows) = url_options.rotate_max_live {
        postgres.rotation.max_live = rows;
    }
    if let Some(ms) = url_options.rotate_lock_timeout_ms {
        postgres.rotation.lock_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = url_options.network_timeout_ms {
        postgres.network_timeout = Duration::from_millis(ms);
    }
    postgres
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreUrl;

    fn url_options(url: &str) -> PostgresUrlOptions {
        match StoreUrl::parse(url).unwrap() {
            StoreUrl::Postgres { options, .. } => options,
            other => panic!("not a PostgreSQL URL: {other}"),
        }
    }

    #[test]
    fn url_options_override_the_backend_defaults() {
        let defaults = PostgresOptions::default();
        let plain = options(&url_options("postgres://h/db"), OpenOptions::default());
        assert_eq!(plain.schema, defaults.schema);
        assert_eq!(plain.pool_size, defaults.pool_size);
        assert_eq!(plain.statement_timeout, defaults.statement_timeout);
        assert_eq!(plain.pool_timeout, None);
        assert_eq!(plain.idle_timeout, None);
        assert_eq!(plain.max_lifetime, None);
        let given = options(
            &url_options(
                "postgres://h/db?schema=app&pool_size=3&statement_timeout_ms=250\
                 &pool_timeout_ms=40&idle_timeout_ms=50&max_lifetime_ms=60",
            ),
            OpenOptions::default(),
        );
        assert_eq!(given.schema, "app");
        assert_eq!(given.pool_size, 3);
        assert_eq!(given.statement_timeout, Duration::from_millis(250));
        assert_eq!(given.pool_timeout, Some(Duration::from_millis(40)));
        assert_eq!(given.idle_timeout, Some(Duration::from_millis(50)));
        assert_eq!(given.max_lifetime, Some(Duration::from_millis(60)));
        assert_eq!(plain.rotation, defaults.rotation);
        assert_eq!(plain.network_timeout, defaults.network_timeout);
    }

    #[test]
    fn network_timeout_ms_sets_the_network_timeout() {
        let given = options(
            &url_options(
                "postgres://h1,h2/db?network_timeout_ms=1500&target_session_attrs=read-write",
            ),
            OpenOptions::default(),
        );
        assert_eq!(given.network_timeout, Duration::from_millis(1500));
        assert_ne!(
            PostgresOptions::default().network_timeout,
            given.network_timeout,
            "the key changes the default"
        );
        assert!(StoreUrl::parse("postgres://h/db?network_timeout_ms=0").is_err());
    }

    #[test]
    fn rotate_keys_set_the_rotation() {
        let given = options(
            &url_options(
                "postgres://h/db?rotate_interval_ms=250&rotate_min_growth=1024\
                 &rotate_max_live=7&rotate_lock_timeout_ms=9",
            ),
            OpenOptions::default(),
        );
        assert_eq!(given.rotation.interval, Some(Duration::from_millis(250)));
        assert_eq!(given.rotation.min_growth, 1024);
        assert_eq!(given.rotation.max_live, 7);
        assert_eq!(given.rotation.lock_timeout, Duration::from_millis(9));
        let never = options(
            &url_options("postgres://h/db?rotate_interval_ms=0"),
            OpenOptions::default(),
        );
        assert_eq!(never.rotation.interval, None);
        let url = "postgres://h/db?rotate_interval_ms=0&rotate_min_growth=5";
        let shown = StoreUrl::parse(url).unwrap().to_string();
        assert_eq!(
            StoreUrl::parse(&shown).unwrap(),
            StoreUrl::parse(url).unwrap()
        );
        assert!(StoreUrl::parse("postgres://h/db?rotate_lock_timeout_ms=0").is_err());
    }
}
