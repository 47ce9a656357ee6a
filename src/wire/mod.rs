//! What shardsub adds to a payload on the wire, below every placement:
//! the opt-in lag [`envelope`]. WIRE_FORMAT.md is the contract.

pub mod envelope;
