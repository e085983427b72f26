//! How a backend hands the suite fresh stores.

use std::sync::Arc;

use a2_store_api::{Clock, IdGenerator, Result, Store};
use async_trait::async_trait;

/// Optional behaviours a backend may support; cases needing one it lacks are
/// reported as skipped with the reason, never as passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Appends made through another store instance on the same database reach
    /// this instance's subscribers.
    pub cross_instance_subscribe: bool,
    /// A second store opened on the same database sees the first one's data
    /// (reopen and multi-instance cases).
    pub shared_database: bool,
}

impl Capabilities {
    /// No optional capability.
    pub const NONE: Self = Self {
        cross_instance_subscribe: false,
        shared_database: false,
    };

    /// Every optional capability.
    pub const ALL: Self = Self {
        cross_instance_subscribe: true,
        shared_database: true,
    };
}

/// Builds stores for the suite. Every store it creates runs on the clock and
/// id generator the suite passes, so the suite drives time and never sleeps
/// for a lease to expire.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// The backend's name, as shown in reports.
    fn name(&self) -> &str;

    /// What the backend supports beyond the required contract.
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    /// A fresh store on `clock` and `ids`. Cases use session ids of their
    /// own, so a factory may hand out stores over one shared database.
    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>>;

    /// Two stores over one fresh database (needs
    /// [`Capabilities::shared_database`]); `None` when unsupported.
    async fn create_pair(
        &self,
        _clock: Arc<dyn Clock>,
        _ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        Ok(None)
    }
}
