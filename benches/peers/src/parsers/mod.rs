//! One module per parser, each with `whole` and `chunked` (see [`crate::Parser`]).

pub mod ours;
pub mod redis_crate;
pub mod redis_protocol;
pub mod resp_rs;

use crate::Parser;

/// Every parser under test; `resp` first.
pub fn all() -> Vec<Parser> {
    vec![
        Parser {
            name: "resp",
            whole: ours::whole,
            chunked: ours::chunked,
        },
        Parser {
            name: "resp-rs",
            whole: resp_rs::whole,
            chunked: resp_rs::chunked,
        },
        Parser {
            name: "redis-protocol_range",
            whole: redis_protocol::whole_range,
            chunked: redis_protocol::chunked_range,
        },
        Parser {
            name: "redis-protocol_bytes",
            whole: redis_protocol::whole_bytes,
            chunked: redis_protocol::chunked_bytes,
        },
        Parser {
            name: "redis",
            whole: redis_crate::whole,
            chunked: redis_crate::chunked,
        },
    ]
}
