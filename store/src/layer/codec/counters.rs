//! The encryption layer's `metrics` (feature `metrics`, turned on per store
//! with [`EncryptedStore::with_metrics`](super::EncryptedStore::with_metrics)):
//!
//! - `a2_store_payload_encodes_total{layer="encryption"}`: payloads,
//!   states and presence values encrypted;
//! - `a2_store_payload_decodes_total{layer="encryption"}`: decrypted;
//! - `a2_store_payload_failures_total{layer="encryption",kind}`: `encrypt`
//!   (a payload that could not be encrypted, or no current key),
//!   `missing_key` (a payload whose key the provider does not hold, also
//!   when it is left sealed), `decrypt` (malformed, tampered or moved
//!   ciphertext), `plaintext` (a plain row refused).
//!
//! Handles are registered with the recorder on first use and kept, as the
//! observability layer does. Without the `metrics` feature every call here
//! is a no-op.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{counter, describe_counter, Counter};

/// Why a payload of the encryption layer failed, as the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Encrypting failed (no current key, a payload the cipher refuses).
    Encrypt,
    /// The key a payload names is not held.
    MissingKey,
    /// The ciphertext did not open (malformed, changed, moved).
    Decrypt,
    /// A plain row was refused (`with_plaintext_reads(false)`).
    Plaintext,
}

impl Failure {
    #[cfg(feature = "metrics")]
    const COUNT: usize = 4;

    #[cfg(feature = "metrics")]
    fn label(self) -> &'static str {
        match self {
            Self::Encrypt => "encrypt",
            Self::MissingKey => "missing_key",
            Self::Decrypt => "decrypt",
            Self::Plaintext => "plaintext",
        }
    }
}

/// The counters of one encryption layer; off unless enabled.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    enabled: bool,
    #[cfg(feature = "metrics")]
    encodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    decodes: OnceLock<Counter>,
    #[cfg(feature = "metrics")]
    failures: [OnceLock<Counter>; Failure::COUNT],
}

impl Counters {
    /// Counters that record when `enabled` (and the `metrics` feature is on).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn new(enabled: bool) -> Self {
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
            failures: Default::default(),
        }
    }

    /// Whether these counters record.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// One payload encrypted.
    pub(crate) fn encoded(&self) {
        #[cfg(feature = "metrics")]
        if self.enabled {
            self.encodes
                .get_or_init(|| counter!("a2_store_payload_encodes_total", "layer" => "encryption"))
                .increment(1);
        }
    }

    /// One payload decrypted.
    pub(crate) fn decoded(&self) {
        #[cfg(feature = "metrics")]
        if self.enabled {
            self.decodes
                .get_or_init(|| counter!("a2_store_payload_decodes_total", "layer" => "encryption"))
                .increment(1);
        }
    }

    /// One payload failed, for `why`.
    pub(crate) fn failed(&self, why: Failure) {
        #[cfg(feature = "metrics")]
        if self.enabled {
            if let Some(slot) = self.failures.get(why as usize) {
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_payload_failures_total",
                        "layer" => "encryption",
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

/// Describes the payload metrics to the installed recorder (HELP lines).
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    describe_counter!(
        "a2_store_payload_encodes_total",
        "Payloads encoded by a payload layer (encrypted, or offloaded to the object store)"
    );
    describe_counter!(
        "a2_store_payload_decodes_total",
        "Payloads decoded by a payload layer (decrypted, or fetched from the object store)"
    );
    describe_counter!(
        "a2_store_payload_failures_total",
        "Payloads a payload layer failed to encode or decode, by layer and kind"
    );
}
