//! The SQLite backend of the a2 session store.
//!
//! [`SqliteStore`] implements [`a2_store_api::Store`] on one SQLite database
//! (a WAL-journaled file, or private memory) with rusqlite's bundled SQLite.
//! Every call is all or nothing and never blocks the async runtime. Writes
//! to a file go through one writer per file per process, which commits the
//! calls queued together in one transaction (each in its own savepoint);
//! reads run on a pool of their own. Several stores, in one process or
//! many, may share a file. The crate README documents the schema, its
//! indexes and the concurrency model.
//!
//! ```no_run
//! # fn main() -> Result<(), a2_store_api::StoreError> {
//! use a2_store_sqlite::{SqliteOptions, SqliteStore};
//! let store = SqliteStore::open("sessions.db", SqliteOptions::default())?;
//! # drop(store);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod append;
mod batch;
mod claim_work;
mod claims;
mod clear;
mod complete;
mod connection;
mod cursor_rows;
mod cursors;
mod delete_session;
mod errors;
mod events;
mod fail;
mod fork;
mod list_work;
mod moved;
mod notify;
mod options;
mod pause;
mod pins;
mod pool;
mod presence;
mod prune;
mod read;
mod redrive_all;
mod renew;
mod reschedule;
mod rewrite;
mod schema;
mod session;
mod snapshots;
mod store;
mod subscribe;
mod values;
mod wake;
mod work;
mod writer;

pub use moved::DatabaseMoved;
pub use options::{Durability, SqliteOptions};
pub use schema::SCHEMA_VERSION;
pub use store::SqliteStore;
