//! Shared by the offloading layer's tests and conformance runs: backend
//! factories opened through the facade, and a factory that wraps every
//! store another one makes in an `OffloadStore` over a temporary local
//! object store with a tiny threshold.

#[path = "../support/backends.rs"]
mod backends;
#[path = "../support/offloaded.rs"]
mod offloaded;
// Not every test of the layer uses every backend.
#[allow(unused_imports)]
pub use backends::*;
#[allow(unused_imports)]
pub use offloaded::*;
