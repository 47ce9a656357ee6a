//! `cargo xtask demo | test` (being written).
fn main() {}
