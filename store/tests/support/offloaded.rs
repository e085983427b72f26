//! The offloading layer as a conformance factory: every store another
//! factory makes, wrapped in an `OffloadStore` over a temporary local
//! object store with a small threshold (included by `offload_support` and
//! `stacked_support`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Layered, StoreFactory, StoreLayer};
use a2_store::{IdGenerator, OffloadStore, Result, Store};

/// The offload conformance run's threshold: most payloads of the suite are
/// longer.
pub const TINY_THRESHOLD: usize = 64;

/// `inner` behind the layer, objects under `dir`, payloads longer than
/// `threshold` bytes offloaded.
pub fn offloaded(inner: Arc<dyn Store>, dir: &Path, threshold: usize) -> Result<OffloadStore> {
    Ok(OffloadStore::local(inner, dir)?.with_threshold(threshold))
}

/// The offloading layer with `threshold`: each store (or pair, which
/// shares one database) gets its own object directory.
pub struct Offload {
    threshold: usize,
    dir: tempfile::TempDir,
    stores: AtomicUsize,
}

impl StoreLayer for Offload {
    type Call = PathBuf;

    fn suffix(&self) -> String {
        "+offload".into()
    }

    fn begin(&self, ids: Arc<dyn IdGenerator>) -> (PathBuf, Arc<dyn IdGenerator>) {
        let n = self.stores.fetch_add(1, Ordering::SeqCst);
        (self.dir.path().join(format!("objects-{n}")), ids)
    }

    fn wrap(&self, dir: &PathBuf, store: Arc<dyn Store>) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(offloaded(store, dir, self.threshold)?))
    }
}

/// Every store `inner` makes, behind the layer with [`TINY_THRESHOLD`].
pub fn with_offload<F: StoreFactory>(inner: F) -> Layered<F, Offload> {
    with_offload_threshold(inner, TINY_THRESHOLD)
}

/// Every store `inner` makes, behind the layer, payloads longer than
/// `threshold` bytes offloaded.
pub fn with_offload_threshold<F: StoreFactory>(inner: F, threshold: usize) -> Layered<F, Offload> {
    let layer = Offload {
        threshold,
        dir: tempfile::tempdir().expect("a temporary directory"),
        stores: AtomicUsize::new(0),
    };
    Layered::new(inner, layer)
}
