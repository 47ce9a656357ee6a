//! shardsub-topology (being written).
#![no_std]
#![forbid(unsafe_code)]
