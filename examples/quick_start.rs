//! The README's quick start: README.md shows what follows this line.

use shardsub::{Event, PubSub, Text};
use std::sync::mpsc;
use std::time::Duration;

fn main() -> Result<(), shardsub::Error> {
    let url = std::env::args().nth(1);
    let (tx, rx) = mpsc::channel();
    let ps = PubSub::builder()
        .url(url.as_deref().unwrap_or("redis://127.0.0.1:6379"))
        .on_message(move |channel, payload| {
            // On a worker thread, in order per channel.
            let _ = tx.send(format!("{}: {}", Text(channel), Text(payload)));
        })
        .on_event(|event| {
            if let Event::Gap { channels, .. } = event {
                // These channels may have lost messages: reload their state.
                println!("{} channels may have lost messages", channels.len());
            }
        })
        .build()?;
    ps.subscribe(["room:1", "room:2"])?;
    ps.wait_active(&["room:1", "room:2"], Duration::from_secs(10))?;
    ps.publish("room:1", "hello")?;
    if let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
        println!("{line}"); // room:1: hello
    }
    ps.shutdown();
    Ok(())
}
