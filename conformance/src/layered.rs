//! A factory whose stores are another factory's, each wrapped in a layer (a
//! `Store` over a `Store`: encryption, offloading, observation), so a layer
//! runs the whole suite on every backend without writing a factory of its
//! own.

use std::sync::Arc;

use a2_store_api::{Clock, IdGenerator, Result, Store};
use async_trait::async_trait;

use crate::factory::{Capabilities, StoreFactory};

/// How [`Layered`] wraps each store another factory makes.
pub trait StoreLayer: Send + Sync {
    /// What the stores of one `create` or `create_pair` call share: the two
    /// stores of a pair share one database, so they share this too (an id
    /// generator, a directory of objects).
    type Call: Send + Sync;

    /// Appended to the inner factory's name in reports (`+encryption`).
    fn suffix(&self) -> String;

    /// Starts one call: what its stores share, and the id generator the
    /// inner factory is given (`ids`, or one the layer also draws from).
    fn begin(&self, ids: Arc<dyn IdGenerator>) -> (Self::Call, Arc<dyn IdGenerator>);

    /// `store`, made in the call `call` began, behind the layer.
    fn wrap(&self, call: &Self::Call, store: Arc<dyn Store>) -> Result<Arc<dyn Store>>;
}

/// Every store (and pair) `inner` makes, behind `layer`; the inner
/// factory's capabilities, since a layer adds behaviour to every store and
/// takes none away.
///
/// ```
/// use std::sync::Arc;
///
/// use a2_conformance::{Layered, StoreFactory, StoreLayer};
/// use a2_store_api::{IdGenerator, Result, Store};
///
/// /// A layer that changes nothing (a real one returns its own store).
/// struct Nothing;
///
/// impl StoreLayer for Nothing {
///     type Call = ();
///     fn suffix(&self) -> String {
///         "+nothing".into()
///     }
///     fn begin(&self, ids: Arc<dyn IdGenerator>) -> ((), Arc<dyn IdGenerator>) {
///         ((), ids)
///     }
///     fn wrap(&self, _: &(), store: Arc<dyn Store>) -> Result<Arc<dyn Store>> {
///         Ok(store)
///     }
/// }
///
/// fn behind_nothing<F: StoreFactory>(backend: F) -> Layered<F, Nothing> {
///     Layered::new(backend, Nothing)
/// }
/// ```
pub struct Layered<F, L> {
    inner: F,
    layer: L,
    name: String,
}

impl<F: StoreFactory, L: StoreLayer> Layered<F, L> {
    /// The stores of `inner` behind `layer`, named `<inner><suffix>`.
    pub fn new(inner: F, layer: L) -> Self {
        let name = format!("{}{}", inner.name(), layer.suffix());
        Self { inner, layer, name }
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }
}

#[async_trait]
impl<F: StoreFactory, L: StoreLayer> StoreFactory for Layered<F, L> {
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
        let (call, ids) = self.layer.begin(ids);
        let store = self.inner.create(clock, ids).await?;
        self.layer.wrap(&call, store)
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let (call, ids) = self.layer.begin(ids);
        let Some([first, second]) = self.inner.create_pair(clock, ids).await? else {
            return Ok(None);
        };
        Ok(Some([
            self.layer.wrap(&call, first)?,
            self.layer.wrap(&call, second)?,
        ]))
    }
}

/// A borrowed factory makes what it makes (a list of `&'static dyn
/// StoreFactory` can then be layered).
#[async_trait]
impl<T: StoreFactory + ?Sized> StoreFactory for &T {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        (**self).create(clock, ids).await
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        (**self).create_pair(clock, ids).await
    }
}
