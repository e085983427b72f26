//! The encryption layer as a conformance factory: every store another
//! factory makes, wrapped in an `EncryptedStore` under a two-key keyring
//! (included by `codec_support` and `stacked_support`).
#![allow(dead_code)]

use std::sync::Arc;

use a2_conformance::{Layered, StoreFactory, StoreLayer};
use a2_store::{EncryptedStore, IdGenerator, Keyring, RecyclingIds, Result, SecretKey, Store};

/// Two keys, `k2` current: the suite writes under `k2`.
pub fn keyring() -> Keyring {
    Keyring::new()
        .with_key("k1", SecretKey::from_bytes([1; 32]))
        .and_then(|ring| ring.with_key("k2", SecretKey::from_bytes([2; 32])))
        .and_then(|ring| ring.set_current("k2").map(|()| ring))
        .expect("a keyring of two keys")
}

/// `inner` wrapped in the layer under `keys`, the layer naming unnamed
/// events from `ids` (the generator `inner` was made with).
pub fn encrypted(inner: Arc<dyn Store>, keys: &Keyring, ids: RecyclingIds) -> Arc<dyn Store> {
    Arc::new(EncryptedStore::new(inner, Arc::new(keys.clone())).with_ids(ids))
}

/// The encryption layer under [`keyring`]: the backend and the layer draw
/// ids from one [`RecyclingIds`] over the suite's generator.
pub struct Encryption {
    keys: Keyring,
}

impl StoreLayer for Encryption {
    type Call = RecyclingIds;

    fn suffix(&self) -> String {
        "+encryption".into()
    }

    fn begin(&self, ids: Arc<dyn IdGenerator>) -> (RecyclingIds, Arc<dyn IdGenerator>) {
        let ids = RecyclingIds::new(ids);
        (ids.clone(), Arc::new(ids))
    }

    fn wrap(&self, ids: &RecyclingIds, store: Arc<dyn Store>) -> Result<Arc<dyn Store>> {
        Ok(encrypted(store, &self.keys, ids.clone()))
    }
}

/// Every store `inner` makes, behind the encryption layer.
pub fn with_encryption<F: StoreFactory>(inner: F) -> Layered<F, Encryption> {
    Layered::new(inner, Encryption { keys: keyring() })
}
