//! The store operations, one file per store operation (named like the guide's operations and the
//! conformance modules), each holding the transaction bodies and the SQL
//! only that operation runs.

pub(crate) mod append;
pub(crate) mod claims;
pub(crate) mod clear;
pub(crate) mod complete;
pub(crate) mod cursors;
pub(crate) mod delete_session;
pub(crate) mod fail;
pub(crate) mod fork;
pub(crate) mod pause;
pub(crate) mod presence;
pub(crate) mod prune;
pub(crate) mod read;
pub(crate) mod renew;
pub(crate) mod reschedule;
pub(crate) mod rewrite;
pub(crate) mod snapshots;
pub(crate) mod subscribe;
pub(crate) mod work;
