//! A lease that expires while a slow handler runs is fenced when the handler
//! finally reports, on every backend (event, lane and log cursors).

mod support;

use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_differential::check_lease_fencing;
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_memory::{MemoryOptions, MemoryStore};

struct Memory;

#[async_trait::async_trait]
impl StoreFactory for Memory {
    fn name(&self) -> &str {
        "memory"
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_fences_expired_leases() {
    check_lease_fencing(&Memory).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_fences_expired_leases() {
    check_lease_fencing(&support::SqliteMemory).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_fences_expired_leases() {
    check_lease_fencing(&support::SqliteFile::new())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fences_expired_leases() {
    let Some(factory) = support::Postgres::from_env("postgres_fences_expired_leases") else {
        return;
    };
    check_lease_fencing(&factory).await.unwrap();
}
