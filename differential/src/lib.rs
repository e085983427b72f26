//! Differential model testing of a2 store backends against the memory reference.
#![forbid(unsafe_code)]
