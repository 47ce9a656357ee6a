//! shardsub-shardcore (being written).
#![no_std]
#![forbid(unsafe_code)]
