//! The offloading layer's `metrics` (feature `metrics`, turned on per store
//! with [`OffloadStore::with_metrics`](super::OffloadStore::with_metrics)),
//! each labelled `layer="offload"`:
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
//!
//! Without the `metrics` feature every call here is a no-op.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{counter, describe_counter, Counter, Unit};

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

impl Failure {
    #[cfg(feature = "metrics")]
    const COUNT: usize = 4;

    #[cfg(feature = "metrics")]
    fn label(self) -> &'static str {
        match self {
            Self::Put => "put",
            Self::Fetch => "fetch",
            Self::Delete => "delete",
            Self::Copy => "copy",
        }
    }
}

/// The counters of one offloading layer; off unless enabled.
#[derive(Debug, Default)]
pub(super) struct Counters {
    enabled: bool,
    #[cfg(feature = "metrics")]
    encodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    decodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    bytes_offloaded: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    bytes_fetched: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    failures: [OnceLock<Counter>; Failure::COUNT],
}

impl Counters {
    /// Counters that record when `enabled` (and the `metrics` feature is on).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(super) fn new(enabled: bool) -> Self {
        #[cfg(feature = "metrics")]
        if enabled {
            describe();
        }
        Self {
            enabled: enabled && cfg!(feature = "metrics"),
            #[cfg(feature = "metrics")]
            encodes: Default::default(),
            #[cfg(feature = "metrics")]
            decodes: Default::default(),
            #[cfg(feature = "metrics")]
            bytes_offloaded: Default::default(),
            #[cfg(feature = "metrics")]
            bytes_fetched: Default::default(),
            #[cfg(feature = "metrics")]
            failures: Default::default(),
        }
    }

    /// Whether these counters record.
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// `objects` objects of `bytes` bytes in all written.
    pub(super) fn offloaded(&self, objects: u64, bytes: u64) {
        #[cfg(feature = "metrics")]
        if self.enabled && objects > 0 {
            self.encodes
                .get_or_init(|| counter!("a2_store_payload_encodes_total", "layer" => "offload"))
                .increment(objects);
            self.bytes_offloaded
                .get_or_init(
                    || counter!("a2_store_payload_bytes_offloaded_total", "layer" => "offload"),
                )
                .increment(bytes);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (objects, bytes);
    }

    /// `objects` objects of `bytes` bytes in all fetched.
    pub(super) fn fetched(&self, objects: u64, bytes: u64) {
        #[cfg(feature = "metrics")]
        if self.enabled && objects > 0 {
            self.decodes
                .get_or_init(|| counter!("a2_store_payload_decodes_total", "layer" => "offload"))
                .increment(objects);
            self.bytes_fetched
                .get_or_init(
                    || counter!("a2_store_payload_bytes_fetched_total", "layer" => "offload"),
                )
                .increment(bytes);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (objects, bytes);
    }

    /// One call failed in the object store, for `why`.
    pub(super) fn failed(&self, why: Failure) {
        #[cfg(feature = "metrics")]
        if self.enabled {
            if let Some(slot) = self.failures.get(why as usize) {
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_payload_failures_total",
                        "layer" => "offload",
                        "kind" => why.label()
                    )
                })
                .increment(1);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = why;
    }
}

/// Describes the offload metrics to the installed recorder (HELP lines).
#[cfg(feature = "metrics")]
fn describe() {
    describe_counter!(
        "a2_store_payload_encodes_total",
        "Payloads encoded by a payload layer (encrypted, or offloaded to the object store)"
    );
    describe_counter!(
        "a2_store_payload_decodes_total",
        "Payloads decoded by a payload layer (decrypted, or fetched from the object store)"
    );
    describe_counter!(
        "a2_store_payload_bytes_offloaded_total",
        Unit::Bytes,
        "JSON bytes of the payloads written to the object store"
    );
    describe_counter!(
        "a2_store_payload_bytes_fetched_total",
        Unit::Bytes,
        "JSON bytes of the payloads fetched from the object store"
    );
    describe_counter!(
        "a2_store_payload_failures_total",
        "Payloads a payload layer failed to encode or decode, by layer and kind"
    );
}
