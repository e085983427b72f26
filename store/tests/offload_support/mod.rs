//! Shared by the offloading layer's tests and conformance runs: backend
//! factories opened through the facade, and a factory that wraps every
//! store another one makes in an `OffloadStore` over a temporary local
//! object store with a tiny threshold.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{Clock, IdGenerator, OffloadStore, Result, Store};
use async_trait::async_trait;

#[path = "../support/backends.rs"]
mod backends;
// Not every test of the layer uses every backend.
#[allow(unused_imports)]
pub use backends::*;

/// The conformance runs' threshold: most payloads of the suite are longer.
pub const TINY_THRESHOLD: usize = 64;

/// Every store `inner` makes, behind the offloading layer: each store (or
/// pair, which shares one database) gets its own object directory.
pub struct Offloaded<F> {
    inner: F,
    name: String,
    dir: tempfile::TempDir,
    stores: AtomicUsize,
}

impl<F: StoreFactory> Offloaded<F> {
    pub fn new(inner: F) -> Self {
        Self {
            name: format!("{}+offload", inner.name()),
            inner,
            dir: tempfile::tempdir().expect("a temporary directory"),
            stores: AtomicUsize::new(0),
        }
    }

    fn fresh_dir(&self) -> std::path::PathBuf {
        let n = self.stores.fetch_add(1, Ordering::SeqCst);
        self.dir.path().join(format!("objects-{n}"))
    }
}

/// `inner` behind the layer, objects under `dir`, with the tiny threshold.
pub fn offloaded(inner: Arc<dyn Store>, dir: &std::path::Path) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(
        OffloadStore::local(inner, dir)?.with_threshold(TINY_THRESHOLD),
    ))
}

#[async_trait]
impl<F: StoreFactory> StoreFactory for Offloaded<F> {
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
        let store = self.inner.create(clock, ids).await?;
        offloaded(store, &self.fresh_dir())
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let Some([first, second]) = self.inner.create_pair(clock, ids).await? else {
            return Ok(None);
        };
        let dir = self.fresh_dir();
        Ok(Some([offloaded(first, &dir)?, offloaded(second, &dir)?]))
    }
}
