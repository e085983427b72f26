//! The PostgreSQL backend of the a2 session store, for workers on many
//! machines.
//!
//! [`PostgresStore::connect`] opens a pool on one schema of a database
//! (creating its tables by versioned migrations), and the store implements
//! [`a2_store_api::Store`] with every call one transaction, every value a
//! bound parameter. Workers in any number of processes share sessions:
//! writers of a session serialize on its row, claimers lock only the cursor
//! rows they take (`FOR UPDATE SKIP LOCKED`), and `subscribe` follows a
//! session across processes through `LISTEN`/`NOTIFY`. `claim_work` finds
//! work across sessions through a work index kept in the same transactions,
//! and waits woken by `NOTIFY` on a work channel. A call sends `BEGIN`
//! with its first statements and `COMMIT` with its last ones, so a claim,
//! a completion, a failure or a renewal costs two round trips.
//! [`PostgresStore::health`] reports the schema's tables (live and dead
//! tuples, sizes) and the server's oldest open transaction. The store
//! rotates its state tables ([`Rotation`]): a table that grew is truncated
//! with its live rows put back, which reclaims its dead versions even while
//! a transaction holds vacuum back. See the README for the schema, the
//! round trips per call, bloat, the statements it relies on and the
//! concurrency model.
//!
//! ```no_run
//! use a2_store_api::{AppendOptions, NewEvent, Store, Target};
//! use a2_store_postgres::{PostgresOptions, PostgresStore};
//!
//! # async fn demo() -> a2_store_api::Result<()> {
//! let store = PostgresStore::connect(
//!     "postgres://postgres@127.0.0.1:5432/test",
//!     PostgresOptions {
//!         schema: "agents".into(),
//!         ..PostgresOptions::default()
//!     },
//! )
//! .await?;
//! let event = NewEvent::new("msg", serde_json::json!({"text": "hi"}))
//!     .with_target(Target::lane("agent", "main"));
//! store.append("session-1", vec![event], AppendOptions::default()).await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without `tls` the connector is `NoTls`, which is `Copy`; the code clones
// it as it must clone the rustls connector.
#![cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]

#[macro_use]
mod transact;
mod batch;
mod cursor_table;
mod db;
mod deadline;
mod error;
mod health;
mod inner;
mod notify;
mod ops;
mod options;
mod pool;
mod rotate;
mod rows;
mod schema;
pub mod scratch;
mod store;
pub mod tls;
mod warm;
mod work_source;
mod writer;

pub use health::{Health, OpenTransaction, TableHealth};
pub use options::{
    validate_schema_name, PostgresOptions, Rotation, DEFAULT_NETWORK_TIMEOUT, MAX_SCHEMA_NAME_LEN,
};
pub use rotate::{RotatedTable, RotationReport, LOG_TABLES, STATE_TABLES};
pub use schema::SCHEMA_VERSION;
pub use scratch::ScratchSchemas;
pub use store::{PostgresStore, MAX_RETRIES};
pub use tls::{RootCerts, SslMode, TlsSettings};
