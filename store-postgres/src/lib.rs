//! The PostgreSQL backend of the a2 session store, for workers on many
//! machines.
//!
//! [`PostgresStore::connect`] opens a pool on one schema of a database
//! (creating its tables by versioned migrations), and the store implements
//! [`a2_store_api::Store`] with every call one transaction, every value a
//! bound parameter. Workers in any number of processes share sessions:
//! writers of a session serialize on its row, claimers lock only the cursor
//! rows they take (`FOR UPDATE SKIP LOCKED`), and `subscribe` follows a
//! session across processes through `LISTEN`/`NOTIFY`. See the README for
//! the schema, the statements it relies on and the concurrency model.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch;
mod cursors;
mod db;
mod error;
mod ops;
mod options;
mod rows;
mod schema;
mod store;
mod subscribe;

pub use options::{validate_schema_name, PostgresOptions, MAX_SCHEMA_NAME_LEN};
pub use schema::SCHEMA_VERSION;
pub use store::{PostgresStore, MAX_RETRIES};
