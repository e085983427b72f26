//! The PostgreSQL backend of the a2 session store.
#![forbid(unsafe_code)]
