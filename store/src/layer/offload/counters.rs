//! The offloading layer's `metrics` (feature `metrics`, turned on per store
//! with [`OffloadStore::with_metrics`](super::OffloadStore::with_metrics)),
//! the payload layers' counters (`layer::payload_counters`) labelled
//! `layer="offload"`:
//!
//! - `a2_store_payload_encodes_total`: payloads and states written to the
//!   object store (those at or below the threshold stay inline, uncounted);
//! - `a2_store_payload_decodes_total`: objects fetched back (a result the
//!   call itself wrote is resolved without a fetch, uncounted);
//! - `a2_store_payload_bytes_offloaded_total` and
//!   `a2_store_payload_bytes_fetched_total`: their JSON bytes;
//! - `a2_store_payload_failures_total{kind}`: `put` (an object could not be
//!   written), `fetch` (a read whose objects could not be fetched: missing,
//!   corrupted, unreachable), `delete` (objects of a deleted, pruned or
//!   reclaimed session left behind), `copy` (a fork whose objects could not
//!   be copied).

use crate::layer::payload_counters::FailureKind;
pub(super) use crate::layer::payload_counters::PayloadCounters as Counters;

/// The `layer` label of the offloading layer's counters.
pub(super) const LAYER: &str = "offload";

/// Why an object operation failed, as the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// Writing an object.
    Put,
    /// Fetching (or checking) an object.
    Fetch,
    /// Deleting objects.
    Delete,
    /// Copying objects for a fork.
    Copy,
}

impl FailureKind for Failure {
    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Self::Put => "put",
            Self::Fetch => "fetch",
            Self::Delete => "delete",
            Self::Copy => "copy",
        }
    }
}
