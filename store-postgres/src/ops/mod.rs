//! The store operations, one transaction body each, grouped by concern.

pub(crate) mod append;
pub(crate) mod claim;
pub(crate) mod claim_sql;
pub(crate) mod clear;
pub(crate) mod outcome;
pub(crate) mod presence;
pub(crate) mod read;
pub(crate) mod state;
