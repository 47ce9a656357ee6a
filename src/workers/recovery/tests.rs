use super::*;
use crate::history::HistoryMessage;

const E: u64 = 7;

fn at(offset: u64) -> Position {
    Position { epoch: E, offset }
}

fn msg(t: &mut Tracker, offset: u64, out: &mut Vec<Action>) -> bool {
    t.handle_message(b"c", at(offset), format!("m{offset}").as_bytes(), out)
}

fn page(from: u64, to: u64, continuous: bool, epoch: u64) -> Result<History, Error> {
    Ok(History {
        position: Some(Position { epoch, offset: to }),
        messages: (from..=to)
            .map(|o| HistoryMessage {
                offset: o,
                payload: format!("m{o}").into_bytes(),
            })
            .collect(),
        continuous,
        earlier: Vec::new(),
    })
}

/// Epoch 9, which continues epoch 7 from its offset `end`, holding
/// `from..=to`.
fn moved(from: u64, to: u64, end: u64) -> Result<History, Error> {
    let mut h = page(from, to, true, 9)?;
    h.earlier = vec![at(end)];
    Ok(h)
}

fn msg_at(t: &mut Tracker, epoch: u64, offset: u64, out: &mut Vec<Action>) -> bool {
    let p = Position { epoch, offset };
    t.handle_message(b"c", p, format!("m{epoch}.{offset}").as_bytes(), out)
}

fn delivered(out: &[Action]) -> Vec<String> {
    out.iter()
        .map(|a| match a {
            Action::Deliver(p) => String::from_utf8_lossy(p).into_owned(),
            Action::Unrecoverable { .. } => "unrecoverable".into(),
            Action::Read { since, .. } => format!("read>{}", since.offset),
        })
        .collect()
}

fn read_id(out: &[Action]) -> u64 {
    out.iter()
        .find_map(|a| match a {
            Action::Read { id, .. } => Some(*id),
            _ => None,
        })
        .expect("a read")
}

#[test]
fn in_order_messages_pass_and_duplicates_are_skipped() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 5, &mut out), "the first one seen anchors");
    assert!(msg(&mut t, 6, &mut out));
    assert!(!msg(&mut t, 6, &mut out), "duplicate");
    assert!(!msg(&mut t, 3, &mut out), "older");
    assert!(msg(&mut t, 7, &mut out));
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_jump_reads_the_missing_range_and_delivers_it_before_the_held_ones() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    assert!(!msg(&mut t, 4, &mut out), "a jump: held");
    assert_eq!(delivered(&out), ["read>1"]);
    let id = read_id(&out);
    out.clear();
    assert!(!msg(&mut t, 5, &mut out), "held behind the read");
    assert!(!msg(&mut t, 4, &mut out), "a duplicate is held too");
    // The read overlaps the held messages: each is delivered once.
    t.handle_read(b"c", id, page(2, 5, true, E), &mut out);
    assert_eq!(delivered(&out), ["m2", "m3", "m4", "m5"]);
    let counts = t.take_counts();
    assert_eq!((counts.recovered, counts.duplicates), (4, 3), "{counts:?}");
    assert_eq!(t.take_counts(), Counts::default(), "taken");
    out.clear();
    assert!(msg(&mut t, 6, &mut out), "live again");
    assert!(!msg(&mut t, 5, &mut out));
}

#[test]
fn a_drop_reads_from_the_last_offset_and_a_stale_read_is_ignored() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    t.handle_drop(b"c", &mut out);
    assert!(out.is_empty(), "nothing seen: nothing to recover from");
    assert!(msg(&mut t, 1, &mut out));
    t.handle_drop(b"c", &mut out);
    assert_eq!(delivered(&out), ["read>1"]);
    let id = read_id(&out);
    out.clear();
    t.handle_drop(b"c", &mut out);
    assert!(out.is_empty(), "one read at a time");
    t.handle_read(b"c", id + 100, page(2, 3, true, E), &mut out);
    assert!(out.is_empty(), "not ours");
    t.handle_read(b"c", id, page(2, 3, true, E), &mut out);
    // The second drop came while reading: one more read after this one.
    assert_eq!(delivered(&out), ["m2", "m3", "read>3"]);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(4, 3, true, E), &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert!(msg(&mut t, 4, &mut out));
}

#[test]
fn a_trimmed_range_is_unrecoverable_and_what_remains_follows() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    assert!(!msg(&mut t, 9, &mut out));
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(6, 9, false, E), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable", "m6", "m7", "m8", "m9"]);
    assert!(matches!(
        &out[0],
        Action::Unrecoverable { since: Some(s), now: Some(n), .. } if s.offset == 1 && n.offset == 9
    ));
    out.clear();
    assert!(msg(&mut t, 10, &mut out));
}

#[test]
fn a_new_epoch_is_unrecoverable_and_the_held_messages_follow() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 3, &mut out));
    let fresh = Position {
        epoch: 8,
        offset: 1,
    };
    assert!(!t.handle_message(b"c", fresh, b"n1", &mut out));
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(4, 5, false, 8), &mut out);
    // Offsets of another epoch say nothing about ours: the new epoch is
    // read from its start, and the held message follows what it gave.
    assert_eq!(delivered(&out), ["unrecoverable", "read>0"]);
    let id = read_id(&out);
    out.clear();
    let empty = Ok(History {
        position: Some(Position {
            epoch: 8,
            offset: 1,
        }),
        messages: Vec::new(),
        continuous: false,
        earlier: Vec::new(),
    });
    // Nothing read (say its first entries are trimmed already): another
    // event, then the held message.
    t.handle_read(b"c", id, empty, &mut out);
    assert_eq!(delivered(&out), ["unrecoverable", "n1"]);
    out.clear();
    let next = Position {
        epoch: 8,
        offset: 2,
    };
    assert!(t.handle_message(b"c", next, b"n2", &mut out));
}

#[test]
fn a_failed_read_is_unrecoverable_and_a_full_page_reads_on() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable"]);
    out.clear();
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(2, PAGE as u64 + 1, true, E), &mut out);
    assert_eq!(out.len(), PAGE + 1);
    assert_eq!(delivered(&out[PAGE..]), [format!("read>{}", PAGE + 1)]);
}

#[test]
fn holding_is_bounded() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    assert!(!msg(&mut t, 3, &mut out));
    let id = read_id(&out);
    out.clear();
    for o in 4..(4 + HOLD as u64 - 1) {
        assert!(!msg(&mut t, o, &mut out));
    }
    assert!(out.is_empty());
    // One more than it can hold: give up, deliver what it held, then this.
    let o = 3 + HOLD as u64;
    assert!(msg(&mut t, o, &mut out));
    assert_eq!(delivered(&out[..1]), ["unrecoverable"]);
    assert_eq!(out.len(), 1 + HOLD);
    out.clear();
    t.handle_read(b"c", id, page(2, 2, true, E), &mut out);
    assert!(out.is_empty(), "the abandoned read is ignored");
}

#[test]
fn channels_given_up_are_forgotten_once_the_map_doubles() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    for i in 0..SWEEP_MIN * 3 {
        let ch = format!("c{i}");
        assert!(t.handle_message(ch.as_bytes(), at(1), b"x", &mut out));
        // Only the last ten are still subscribed.
        t.sweep(|c| {
            let n: usize = std::str::from_utf8(&c[1..]).unwrap().parse().unwrap();
            n + 10 > i
        });
        assert!(t.len() <= SWEEP_MIN.max(20), "{i}: {}", t.len());
    }
    assert!(out.is_empty());
}

#[test]
fn a_forgotten_channel_starts_afresh() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    t.forget(b"c");
    assert!(msg(&mut t, 9, &mut out), "no jump: nothing known before");
    assert!(out.is_empty());
}

#[test]
fn a_new_epoch_is_read_from_its_start_before_the_held_messages() {
    // The server lost the channel's history (a restart without
    // persistence): its new epoch's first offsets came while the
    // subscriber was away, and the stream still has them.
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 3, &mut out));
    let new = |offset| Position { epoch: 8, offset };
    assert!(!t.handle_message(b"c", new(5), b"n5", &mut out));
    let id = read_id(&out);
    out.clear();
    // The read after (7, 3) reaches the new stream: offsets above 3 only.
    t.handle_read(b"c", id, page(4, 5, false, 8), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable", "read>0"]);
    assert!(matches!(
        &out[1],
        Action::Read { since, .. } if *since == new(0)
    ));
    let id = read_id(&out);
    out.clear();
    let whole = page(1, 5, true, 8).map(|mut h| {
        for m in &mut h.messages {
            m.payload = format!("n{}", m.offset).into_bytes();
        }
        h
    });
    t.handle_read(b"c", id, whole, &mut out);
    assert_eq!(delivered(&out), ["n1", "n2", "n3", "n4", "n5"]);
    out.clear();
    assert!(t.handle_message(b"c", new(6), b"n6", &mut out));
    assert!(
        !t.handle_message(b"c", new(6), b"n6", &mut out),
        "duplicate"
    );
}

#[test]
fn failed_reads_in_a_row_give_one_unrecoverable_until_a_read_succeeds() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    for _ in 0..3 {
        t.handle_drop(b"c", &mut out);
        let id = read_id(&out);
        out.clear();
        t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    }
    assert_eq!(t.take_counts().unrecoverable, 1, "one event for the outage");
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(2, 3, true, E), &mut out);
    assert_eq!(delivered(&out), ["m2", "m3"]);
    out.clear();
    // A new outage is reported again.
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable"]);
}

#[test]
fn a_history_moved_with_every_write_is_read_on_across_the_new_epoch() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 5, &mut out));
    // A slot move: epoch 9 continues 7 from 5 on the new node.
    assert!(!msg_at(&mut t, 9, 6, &mut out));
    assert_eq!(delivered(&out), ["read>5"]);
    assert!(matches!(out[0], Action::Read { since, .. } if since == at(5)));
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, moved(6, 6, 5), &mut out);
    assert_eq!(
        delivered(&out),
        ["m6"],
        "from the stream; the held copy skipped"
    );
    out.clear();
    assert!(msg_at(&mut t, 9, 7, &mut out), "the new epoch goes on");
    assert!(!msg(&mut t, 5, &mut out), "a late message of the old epoch");
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(t.take_counts().unrecoverable, 0);
}

#[test]
fn a_history_moved_without_the_last_writes_does_not_skip_the_new_offsets() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    for o in 1..=8 {
        assert!(msg(&mut t, o, &mut out));
    }
    // A failover to a replica that had epoch 7 up to 5 only: its next
    // offsets (6, 7, ...) are new messages, in epoch 9.
    assert!(!msg_at(&mut t, 9, 6, &mut out));
    let id = read_id(&out);
    assert!(matches!(out[0], Action::Read { since, .. } if since == at(8)));
    out.clear();
    t.handle_read(b"c", id, moved(6, 7, 5), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable", "m6", "m7"]);
    match &out[0] {
        Action::Unrecoverable { since, reason, .. } => {
            assert_eq!(*since, Some(at(8)));
            assert!(reason.contains("offsets 6..=8"), "{reason}");
        }
        a => panic!("{a:?}"),
    }
    out.clear();
    assert!(!msg_at(&mut t, 9, 7, &mut out), "read already");
    assert!(msg_at(&mut t, 9, 8, &mut out));
    assert!(!msg(&mut t, 8, &mut out), "delivered before the move");
    assert!(
        msg(&mut t, 9, &mut out),
        "the old node's, never on the new one"
    );
    assert!(!msg(&mut t, 9, &mut out), "and only once");
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_gap_reads_only_once_the_resubscribe_is_confirmed() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    t.handle_gap(b"c");
    t.handle_confirmed(b"c", &mut out);
    assert!(out.is_empty(), "nothing seen: nothing to recover from");
    assert!(msg(&mut t, 1, &mut out));
    t.handle_confirmed(b"c", &mut out);
    assert!(out.is_empty(), "no gap: a confirmation reads nothing");
    // The read waits for the new subscription: one that ran on the server
    // before it would miss a message published in between (2 here), and
    // nothing later would show the jump.
    t.handle_gap(b"c");
    assert!(out.is_empty(), "{:?}", delivered(&out));
    t.handle_confirmed(b"c", &mut out);
    assert_eq!(delivered(&out), ["read>1"]);
    let id = read_id(&out);
    out.clear();
    assert!(!msg(&mut t, 3, &mut out), "held behind the read");
    t.handle_read(b"c", id, page(2, 3, true, E), &mut out);
    assert_eq!(delivered(&out), ["m2", "m3"]);
    out.clear();
    t.handle_confirmed(b"c", &mut out);
    assert!(out.is_empty(), "one read per gap");
    assert!(msg(&mut t, 4, &mut out), "live again");
}

#[test]
fn a_confirmation_during_a_failed_read_reads_once_more() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_gap(b"c");
    t.handle_confirmed(b"c", &mut out);
    assert!(out.is_empty(), "one read at a time");
    // The read out failed (its connection went with the gap's): the one
    // the confirmation owes goes now, and only its failure would be told.
    t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    assert_eq!(delivered(&out), ["read>1"]);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(2, 3, true, E), &mut out);
    assert_eq!(delivered(&out), ["m2", "m3"]);
    assert_eq!(t.take_counts().unrecoverable, 0);
    out.clear();
    // Once per event: a retry that fails too is told, and not retried.
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_drop(b"c", &mut out);
    t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, Err(Error::Shutdown), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable"]);
}

#[test]
fn a_confirmation_during_a_trimmed_read_reads_once_more() {
    let (mut t, mut out) = (Tracker::default(), Vec::new());
    assert!(msg(&mut t, 1, &mut out));
    t.handle_drop(b"c", &mut out);
    let id = read_id(&out);
    out.clear();
    t.handle_gap(b"c");
    t.handle_confirmed(b"c", &mut out);
    t.handle_read(b"c", id, page(5, 6, false, E), &mut out);
    assert_eq!(delivered(&out), ["unrecoverable", "m5", "m6", "read>6"]);
    let id = read_id(&out);
    out.clear();
    t.handle_read(b"c", id, page(7, 7, true, E), &mut out);
    assert_eq!(delivered(&out), ["m7"]);
}
