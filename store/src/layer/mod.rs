//! Layers: store wrappers that add behaviour to every backend (in the
//! manner of opendal's layers). Each wraps an `Arc<dyn Store>` and is a
//! `Store` itself, so they stack.
//!
//! - `ObservedStore` (features `tracing`, `metrics`): spans and metrics
//!   for every call, results passed through unchanged.
//! - `codec::EncryptedStore` (feature `encryption`): payloads, snapshot
//!   states and presence values encrypted at rest.
//! - `offload::OffloadStore` (feature `offload`): large payloads and
//!   states kept in an object store, the row holding a reference.
//!
//! Stack encryption over offload (`EncryptedStore::new(OffloadStore::…)`)
//! so the object store only ever holds ciphertext.

#[cfg(feature = "encryption")]
pub mod codec;
#[cfg(any(feature = "tracing", feature = "metrics"))]
pub mod observed;
#[cfg(feature = "offload")]
pub mod offload;
#[cfg(any(feature = "encryption", feature = "offload"))]
mod payload_counters;
#[cfg(any(feature = "encryption", feature = "offload"))]
mod rows;

#[cfg(any(feature = "tracing", feature = "metrics"))]
pub use observed::{ObservedStore, Operation};
