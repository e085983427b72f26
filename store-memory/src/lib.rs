//! The in-memory reference backend of the a2 session store.
//!
//! [`MemoryStore`] implements [`a2_store_api::Store`] exactly as the
//! [guide](a2_store_api::guide) and the team's CONTRACT say; every other backend must be
//! indistinguishable from it. State lives in memory only, one lock per
//! session. Claims, completions, failures, renewals and `has_pending` cost
//! O(log n) in the session's events and cursors (plus the heads returned):
//! see the crate README for the indexes that make that so.
//!
//! ```
//! use a2_store_api::{Store, NewEvent, AppendOptions, Target};
//! use a2_store_memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let event = NewEvent::new("msg", serde_json::json!({"text": "hi"}))
//!     .with_target(Target::lane("agent", "main"));
//! let result = store.append("s", vec![event], AppendOptions::default()).await?;
//! assert!(result.has_pending);
//! # Ok::<(), a2_store_api::StoreError>(())
//! # }).unwrap();
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod append;
mod claims;
mod clear;
mod complete;
mod cursor;
mod cursor_table;
mod cursors;
mod delete_session;
mod event_log;
mod fail;
mod fork;
mod head_index;
mod ids;
#[cfg(test)]
mod invariant_tests;
mod pause;
mod presence;
mod prune;
mod read;
mod redrive_all;
mod renew;
mod reschedule;
mod rewrite;
mod session;
mod session_map;
mod snapshot_cache;
mod snapshots;
mod store;
mod subscribers;
mod work;

pub use store::{MemoryOptions, MemoryStore};
