//! TLS (the `tls` feature) against Redis listening for TLS, with
//! certificates generated at test time (`support::tls`). Redis only: the
//! Valkey binary installed here is built without TLS.

mod alloc;
mod cluster;
mod server;
