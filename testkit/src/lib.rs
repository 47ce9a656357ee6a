//! Real servers for shardsub's tests (being written).
