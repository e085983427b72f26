//! Handler-level tests of every route of the console, on memory stores
//! (and a SQLite file), through `tower::ServiceExt::oneshot`.

mod common;

mod actions;
mod auth;
mod live;
mod pages;
#[cfg(feature = "payload-layers")]
mod payloads;
