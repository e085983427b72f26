//! The live timeline stream.
