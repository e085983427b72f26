//! The conformance suite every a2 store backend runs.
#![forbid(unsafe_code)]

#[cfg(feature = "bench")]
pub mod bench;
mod factory;

pub use factory::{Capabilities, StoreFactory};
