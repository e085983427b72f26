//! The payload layers' `metrics` (feature `metrics`), one set per layer,
//! each counter labelled with the layer (`layer="encryption"` or
//! `layer="offload"`):
//!
//! - `a2_store_payload_encodes_total`: payloads encoded (encrypted, or
//!   written to the object store);
//! - `a2_store_payload_decodes_total`: payloads decoded (decrypted, or
//!   fetched back);
//! - `a2_store_payload_bytes_offloaded_total` and
//!   `a2_store_payload_bytes_fetched_total`: the bytes a layer moved to and
//!   from its object store (the offload layer only);
//! - `a2_store_payload_failures_total{kind}`: failures, by the layer's
//!   kinds ([`FailureKind`]).
//!
//! Handles are registered with the recorder on first use and kept, as the
//! observability layer does. Without the `metrics` feature, or when a
//! layer's metrics are off, every call here is a no-op.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{counter, describe_counter, Counter, Unit};

/// The most failure kinds a layer has (each kind keeps one counter).
#[cfg(feature = "metrics")]
const MOST_KINDS: usize = 4;

/// A layer's reasons for failing, each a value of the `kind` label (read
/// only when the `metrics` feature is on).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) trait FailureKind: Copy {
    /// The kind's place among the layer's kinds, below 4.
    fn index(self) -> usize;
    /// The `kind` label's value.
    fn label(self) -> &'static str;
}

/// The counters of one payload layer; off unless enabled.
#[derive(Debug)]
pub(crate) struct PayloadCounters {
    enabled: bool,
    #[cfg(feature = "metrics")]
    layer: &'static str,
    #[cfg(feature = "metrics")]
    encodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    decodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    bytes_offloaded: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    bytes_fetched: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    failures: [OnceLock<Counter>; MOST_KINDS],
}

impl PayloadCounters {
    /// The counters of the layer labelled `layer`, which record when
    /// `enabled` (and the `metrics` feature is on).
    pub(crate) fn new(layer: &'static str, enabled: bool) -> Self {
        #[cfg(feature = "metrics")]
        if enabled {
            describe();
        }
        #[cfg(not(feature = "metrics"))]
        let _ = layer;
        Self {
            enabled: enabled && cfg!(feature = "metrics"),
            #[cfg(feature = "metrics")]
            layer,
            #[cfg(feature = "metrics")]
            encodes: OnceLock::new(),
            #[cfg(feature = "metrics")]
            decodes: OnceLock::new(),
            #[cfg(feature = "metrics")]
            bytes_offloaded: OnceLock::new(),
            #[cfg(feature = "metrics")]
            bytes_fetched: OnceLock::new(),
            #[cfg(feature = "metrics")]
            failures: Default::default(),
        }
    }

    /// Whether these counters record.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// `payloads` payloads encoded, of `bytes` bytes in all when they went
    /// to an object store.
    pub(crate) fn encoded(&self, payloads: u64, bytes: Option<u64>) {
        #[cfg(feature = "metrics")]
        if self.enabled && payloads > 0 {
            add(
                &self.encodes,
                "a2_store_payload_encodes_total",
                self.layer,
                payloads,
            );
            if let Some(bytes) = bytes {
                let name = "a2_store_payload_bytes_offloaded_total";
                add(&self.bytes_offloaded, name, self.layer, bytes);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (payloads, bytes);
    }

    /// `payloads` payloads decoded, of `bytes` bytes in all when they came
    /// from an object store.
    pub(crate) fn decoded(&self, payloads: u64, bytes: Option<u64>) {
        #[cfg(feature = "metrics")]
        if self.enabled && payloads > 0 {
            add(
                &self.decodes,
                "a2_store_payload_decodes_total",
                self.layer,
                payloads,
            );
            if let Some(bytes) = bytes {
                let name = "a2_store_payload_bytes_fetched_total";
                add(&self.bytes_fetched, name, self.layer, bytes);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (payloads, bytes);
    }

    /// One failure, for `why`.
    pub(crate) fn failed(&self, why: impl FailureKind) {
        #[cfg(feature = "metrics")]
        if self.enabled {
            if let Some(slot) = self.failures.get(why.index()) {
                let layer = self.layer;
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_payload_failures_total",
                        "layer" => layer,
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

/// Adds `n` to the counter `name{layer}` kept in `slot` (registered with
/// the recorder on first use).
#[cfg(feature = "metrics")]
fn add(slot: &OnceLock<Counter>, name: &'static str, layer: &'static str, n: u64) {
    slot.get_or_init(|| counter!(name, "layer" => layer))
        .increment(n);
}

/// Describes the payload metrics to the installed recorder (HELP lines).
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
