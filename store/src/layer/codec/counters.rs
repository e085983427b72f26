//! The encryption layer's `metrics` (feature `metrics`, turned on per store
//! with [`EncryptedStore::with_metrics`](super::EncryptedStore::with_metrics)),
//! the payload layers' counters (`layer::payload_counters`) labelled
//! `layer="encryption"`:
//!
//! - `a2_store_payload_encodes_total`: payloads, states and presence
//!   values encrypted;
//! - `a2_store_payload_decodes_total`: decrypted;
//! - `a2_store_payload_failures_total{kind}`: `encrypt` (a payload that
//!   could not be encrypted, or no current key), `missing_key` (a payload
//!   whose key the provider does not hold, also when it is left sealed),
//!   `decrypt` (malformed, tampered or moved ciphertext), `plaintext` (a
//!   plain row refused).

use crate::layer::payload_counters::FailureKind;
pub(crate) use crate::layer::payload_counters::PayloadCounters as Counters;

/// The `layer` label of the encryption layer's counters.
pub(crate) const LAYER: &str = "encryption";

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

impl FailureKind for Failure {
    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Self::Encrypt => "encrypt",
            Self::MissingKey => "missing_key",
            Self::Decrypt => "decrypt",
            Self::Plaintext => "plaintext",
        }
    }
}
