//! What one write turn did, on any transport.

/// What one write turn did.
#[derive(Debug, Default)]
pub(crate) struct Flushed {
    /// Socket writes that took bytes.
    pub(crate) writes: u64,
    /// Bytes the socket took (TLS records, with TLS).
    pub(crate) bytes: u64,
    /// The socket is full: wait for WRITABLE.
    pub(crate) blocked: bool,
}
