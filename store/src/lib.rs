//! Durable agent session stores behind one facade.
