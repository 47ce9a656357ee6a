//! What the hot paths allocate in steady state, counted by the suite's
//! global allocator ([`crate::GLOBAL`]) on every thread. TLS publishing's
//! figure is in `tls::alloc`.

mod publish;
mod receive;
