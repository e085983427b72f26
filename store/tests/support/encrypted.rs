//! The encryption layer as a conformance factory: every store another
//! factory makes, wrapped in an `EncryptedStore` under a two-key keyring
//! (included by `codec_support` and `stacked_support`).
#![allow(dead_code)]

use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{
    Clock, EncryptedStore, IdGenerator, Keyring, RecyclingIds, Result, SecretKey, Store,
};
use async_trait::async_trait;

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

/// Every store `inner` makes, behind the encryption layer; the backend and
/// the layer draw ids from one [`RecyclingIds`] over the suite's generator.
pub struct Encrypted<F> {
    inner: F,
    name: String,
    keys: Keyring,
}

impl<F: StoreFactory> Encrypted<F> {
    pub fn new(inner: F) -> Self {
        let name = format!("{}+encryption", inner.name());
        Self {
            inner,
            name,
            keys: keyring(),
        }
    }
}

#[async_trait]
impl<F: StoreFactory> StoreFactory for Encrypted<F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let ids = RecyclingIds::new(ids);
        let store = self.inner.create(clock, Arc::new(ids.clone())).await?;
        Ok(encrypted(store, &self.keys, ids))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let ids = RecyclingIds::new(ids);
        let Some([first, second]) = self.inner.create_pair(clock, Arc::new(ids.clone())).await?
        else {
            return Ok(None);
        };
        Ok(Some([
            encrypted(first, &self.keys, ids.clone()),
            encrypted(second, &self.keys, ids),
        ]))
    }
}
