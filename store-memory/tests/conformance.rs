//! The conformance suite against the in-memory backend: one test per case,
//! listed as `memory::<case>`.

use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_memory::{MemoryOptions, MemoryStore};

/// Fresh memory stores; two clones of one store are two instances over one
/// database (they share state and subscribers).
struct MemoryFactory;

#[async_trait::async_trait]
impl StoreFactory for MemoryFactory {
    fn name(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(MemoryStore::with_options(MemoryOptions {
            clock,
            ids,
        })))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let store = MemoryStore::with_options(MemoryOptions { clock, ids });
        Ok(Some([Arc::new(store.clone()), Arc::new(store)]))
    }
}

a2_conformance::suite!(memory, MemoryFactory);
