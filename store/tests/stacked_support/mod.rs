//! Shared by the stacked runs: both payload layers over one backend,
//! `EncryptedStore` over `OffloadStore` (the order the offload layer's docs
//! prescribe, so the object store only ever holds ciphertext), and the
//! backend factories opened through the facade.

use std::sync::Arc;

use a2_conformance::{Layered, StoreFactory};
use a2_store::{Clock, IdGenerator, OffloadStore, RecyclingIds, Result, Store};

#[path = "../support/backends.rs"]
mod backends;
#[path = "../support/encrypted.rs"]
mod encrypted;
#[path = "../support/offloaded.rs"]
mod offloaded;
// Not every test of the layers uses every backend.
#[allow(unused_imports)]
pub use backends::*;
#[allow(unused_imports)]
pub use encrypted::*;
#[allow(unused_imports)]
pub use offloaded::*;

/// The stacked runs' threshold, in bytes of the stored (encrypted) JSON.
/// The suite's payloads are small, but their envelopes are 141 to 166
/// bytes long (most 149 to 166: the session id is in each one), so at
/// 144 bytes 221 of the suite's 352 cases offload ciphertext (85% of the
/// objects a zero threshold would write) and the others keep their
/// envelopes inline; at 256 only 5 cases would offload anything.
pub const STACKED_THRESHOLD: usize = 144;

/// Every store `backend` makes, behind offload (threshold
/// [`STACKED_THRESHOLD`]) and, over that, encryption.
pub fn stacked<F: StoreFactory>(backend: F) -> Layered<Layered<F, Offload>, Encryption> {
    with_encryption(with_offload_threshold(backend, STACKED_THRESHOLD))
}

/// One store of `backend` with both layers, and handles on each level:
/// the backend's own rows, the offload layer's object store.
pub struct Layers {
    /// The backend, below both layers: the rows as stored.
    pub backend: Arc<dyn Store>,
    /// The offload layer, below encryption: its objects, and rows with the
    /// references resolved (envelopes).
    pub offload: Arc<OffloadStore>,
    /// Encryption over offload: what an app sees.
    pub store: Arc<dyn Store>,
}

impl Layers {
    /// A fresh store of `backend` on `clock` and `ids`, both layers over
    /// it, objects under `dir`.
    pub async fn open(
        backend: &dyn StoreFactory,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
        dir: &std::path::Path,
    ) -> Result<Self> {
        let ids = RecyclingIds::new(ids);
        let inner = backend.create(clock, Arc::new(ids.clone())).await?;
        let offload = Arc::new(offloaded(Arc::clone(&inner), dir, STACKED_THRESHOLD)?);
        let store = encrypted(offload.clone(), &keyring(), ids);
        Ok(Self {
            backend: inner,
            offload,
            store,
        })
    }
}
