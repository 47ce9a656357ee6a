use super::*;

/// Every item queued now, as text: `a1` for a message, `dropped N a,b`.
fn drain(rx: &mut Receiver) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(d) = rx.try_recv() {
        out.push(match d {
            Delivery::Message { channel, payload } => format!(
                "{}{}",
                String::from_utf8_lossy(&channel),
                String::from_utf8_lossy(&payload)
            ),
            Delivery::Dropped { channels, messages } => {
                let names: Vec<_> = channels.iter().map(String::from_utf8_lossy).collect();
                format!("dropped {messages} {}", names.join(","))
            }
            Delivery::Active { channel } => format!("active {}", String::from_utf8_lossy(&channel)),
            Delivery::PatternMessage {
                pattern,
                channel,
                payload,
            } => format!(
                "{}>{}{}",
                String::from_utf8_lossy(&pattern),
                String::from_utf8_lossy(&channel),
                String::from_utf8_lossy(&payload)
            ),
            Delivery::PatternDropped { patterns, messages } => {
                let names: Vec<_> = patterns.iter().map(String::from_utf8_lossy).collect();
                format!("pattern dropped {messages} {}", names.join(","))
            }
            other => format!("{other:?}"),
        });
    }
    out
}

#[test]
fn messages_and_events_come_out_in_order() {
    let (h, mut rx) = receiver(8);
    h.on_message(b"a", b"1");
    h.on_event(Event::Active { channel: b"b" });
    h.on_message(b"b", b"1");
    h.on_message(b"a", b"2");
    assert_eq!(rx.len(), 3);
    assert_eq!(drain(&mut rx), ["a1", "active b", "b1", "a2"]);
    assert!(rx.is_empty());
}

#[test]
fn a_full_queue_drops_and_names_the_channels_once_before_their_next_message() {
    let (h, mut rx) = receiver(2);
    h.on_message(b"a", b"1");
    h.on_message(b"b", b"1");
    // Full: these three are dropped.
    h.on_message(b"a", b"2");
    h.on_message(b"c", b"1");
    h.on_message(b"a", b"3");
    assert_eq!(rx.dropped(), 3);
    assert!(matches!(rx.try_recv(), Some(Delivery::Message { payload, .. }) if payload == b"1"));
    // Room again: the drop event goes in before the next item.
    h.on_message(b"a", b"4");
    assert_eq!(drain(&mut rx), ["b1", "dropped 3 a,c", "a4"]);
}

#[test]
fn a_patterns_drops_name_the_pattern_apart_from_the_channels() {
    let (h, mut rx) = receiver(1);
    h.on_pattern_message(b"a*", b"a1", b"x");
    // Full: one channel message and two of the pattern dropped.
    h.on_message(b"a*", b"y");
    h.on_pattern_message(b"a*", b"a2", b"x");
    h.on_pattern_message(b"a*", b"a3", b"x");
    assert_eq!(rx.dropped(), 3);
    assert_eq!(
        drain(&mut rx),
        ["a*>a1x", "dropped 1 a*", "pattern dropped 2 a*"]
    );
}

#[test]
fn drops_after_the_last_item_are_signalled_once_the_queue_is_read() {
    let (h, mut rx) = receiver(1);
    h.on_message(b"a", b"1");
    h.on_message(b"a", b"2");
    h.on_message(b"b", b"1");
    assert_eq!(drain(&mut rx), ["a1", "dropped 2 a,b"]);
    assert!(rx.try_recv().is_none());
    // An event also waits for the drop event before it.
    h.on_message(b"a", b"3");
    h.on_message(b"a", b"4");
    h.on_event(Event::Active { channel: b"a" });
    assert_eq!(drain(&mut rx), ["a3", "dropped 1 a", "active a"]);
}

#[test]
fn poll_recv_wakes_the_last_poller_and_ends_when_the_handler_is_gone() {
    let (h, mut rx) = receiver(4);
    let ((c1, w1), (c2, w2)) = (testkit::counting_waker(), testkit::counting_waker());
    assert!(rx.poll_recv(&mut Context::from_waker(&w1)).is_pending());
    assert!(rx.poll_recv(&mut Context::from_waker(&w2)).is_pending());
    h.on_message(b"a", b"1");
    assert_eq!((c1.wakes(), c2.wakes()), (0, 1));
    let r = rx.poll_recv(&mut Context::from_waker(&w2));
    assert!(
        matches!(r, Poll::Ready(Some(Delivery::Message { .. }))),
        "{r:?}"
    );
    assert!(rx.poll_recv(&mut Context::from_waker(&w2)).is_pending());
    drop(h);
    assert_eq!(c2.wakes(), 2);
    assert!(rx.is_closed());
    assert!(matches!(
        rx.poll_recv(&mut Context::from_waker(&w2)),
        Poll::Ready(None)
    ));
}

#[test]
fn items_left_when_the_handler_goes_are_still_read() {
    let (h, mut rx) = receiver(1);
    h.on_message(b"a", b"1");
    h.on_message(b"a", b"2");
    drop(h);
    assert!(!rx.is_closed());
    assert_eq!(drain(&mut rx), ["a1", "dropped 1 a"]);
    assert!(rx.is_closed());
}

#[test]
fn a_dropped_receiver_lets_the_handler_discard() {
    let (h, rx) = receiver(1);
    drop(rx);
    h.on_message(b"a", b"1");
    h.on_message(b"a", b"2");
    assert!(h.queue.inner.lock().items.is_empty());
}

#[test]
fn a_delivery_shows_its_names_and_payload_as_text_and_lends_them() {
    let m = Delivery::Message {
        channel: b"news:1".to_vec(),
        payload: b"caf\xc3\xa9".to_vec(),
    };
    assert_eq!(
        format!("{m:?}"),
        r#"Message { channel: "news:1", payload: "café" }"#
    );
    assert_eq!(m.channel(), Some(&b"news:1"[..]));
    assert_eq!(m.payload_str(), Some("café"));
    let bin = Delivery::Message {
        channel: b"c".to_vec(),
        payload: vec![0xff, b'a'],
    };
    assert_eq!(bin.payload_str(), None);
    assert_eq!(
        format!("{bin:?}"),
        r#"Message { channel: "c", payload: "\xffa" }"#
    );
    let active = Delivery::Active {
        channel: b"x".to_vec(),
    };
    assert_eq!(format!("{active:?}"), r#"Active { channel: "x" }"#);
    assert_eq!(active.payload(), None);
}
