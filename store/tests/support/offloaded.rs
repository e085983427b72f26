//! The offloading layer as a conformance factory: every store another
//! factory makes, wrapped in an `OffloadStore` over a temporary local
//! object store with a small threshold (included by `offload_support` and
//! `stacked_support`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{Clock, IdGenerator, OffloadStore, Result, Store};
use async_trait::async_trait;

/// The offload conformance run's threshold: most payloads of the suite are
/// longer.
pub const TINY_THRESHOLD: usize = 64;

/// Every store `inner` makes, behind the offloading layer with `threshold`:
/// each store (or pair, which shares one database) gets its own object
/// directory.
pub struct Offloaded<F> {
    inner: F,
    name: String,
    threshold: usize,
    dir: tempfile::TempDir,
    stores: AtomicUsize,
}

impl<F: StoreFactory> Offloaded<F> {
    /// `inner` behind the layer with [`TINY_THRESHOLD`].
    pub fn new(inner: F) -> Self {
        Self::with_threshold(inner, TINY_THRESHOLD)
    }

    /// `inner` behind the layer, payloads longer than `threshold` bytes
    /// offloaded.
    pub fn with_threshold(inner: F, threshold: usize) -> Self {
        Self {
            name: format!("{}+offload", inner.name()),
            inner,
            threshold,
            dir: tempfile::tempdir().expect("a temporary directory"),
            stores: AtomicUsize::new(0),
        }
    }

    fn fresh_dir(&self) -> PathBuf {
        let n = self.stores.fetch_add(1, Ordering::SeqCst);
        self.dir.path().join(format!("objects-{n}"))
    }
}

/// `inner` behind the layer, objects under `dir`, payloads longer than
/// `threshold` bytes offloaded.
pub fn offloaded(inner: Arc<dyn Store>, dir: &Path, threshold: usize) -> Result<OffloadStore> {
    Ok(OffloadStore::local(inner, dir)?.with_threshold(threshold))
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
        Ok(Arc::new(offloaded(
            store,
            &self.fresh_dir(),
            self.threshold,
        )?))
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
        Ok(Some([
            Arc::new(offloaded(first, &dir, self.threshold)?),
            Arc::new(offloaded(second, &dir, self.threshold)?),
        ]))
    }
}
