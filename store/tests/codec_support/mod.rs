//! Shared by the encryption layer's tests: a conformance factory that wraps
//! every store another factory makes in an `EncryptedStore`, and factories
//! for each backend opened through the facade.

#[path = "../support/backends.rs"]
mod backends;
#[path = "../support/encrypted.rs"]
mod encrypted;
// Not every test of the layer uses every backend.
#[allow(unused_imports)]
pub use backends::*;
#[allow(unused_imports)]
pub use encrypted::*;
