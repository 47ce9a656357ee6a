//! Runs one parser over one stream a given number of times, for instruction
//! counts under `valgrind --tool=callgrind` (see README.md).
//!
//! `once <parser> <stream> <mode> <passes>` (modes: `whole`, `chunked_1460`)

use shardsub_peer_benches::{parsers, streams, Input, MODES};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [parser, stream, mode, passes] = &args[..] else {
        eprintln!("usage: once <parser> <stream> <whole|chunked_1460> <passes>");
        eprintln!(
            "parsers: {:?}",
            parsers::all().iter().map(|p| p.name).collect::<Vec<_>>()
        );
        eprintln!(
            "streams: {:?}",
            streams::all().iter().map(|s| s.name).collect::<Vec<_>>()
        );
        std::process::exit(2);
    };
    let p = parsers::all().into_iter().find(|p| p.name == parser);
    let s = streams::all().into_iter().find(|s| s.name == stream);
    let (Some(p), Some(s), Ok(passes)) = (p, s, passes.parse::<u64>()) else {
        eprintln!("unknown parser or stream, or bad pass count");
        std::process::exit(2);
    };
    let Some(f) = p.mode(mode) else {
        eprintln!("modes: {MODES:?}");
        std::process::exit(2);
    };
    let input = Input::new(s.bytes, s.frames);
    let mut frames = 0;
    for _ in 0..passes {
        frames += std::hint::black_box(f(std::hint::black_box(&input), s.touch)).frames;
    }
    println!("{frames} frames");
}
