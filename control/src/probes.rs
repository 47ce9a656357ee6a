//! Subscribes a connection's end may have answered. A server closes a
//! subscriber whose reply is over its output buffer limit (a channel name
//! of tens of megabytes in a `SUBSCRIBE` reply), or one that sent an
//! argument over `proto-max-bulk-len`: sending the same batch again would
//! close the new connection too, forever, taking every other channel on it
//! down each time. So the channels whose subscribe was in flight when
//! their connection ended are held apart, and sent again one batch at a
//! time once everything else on the new connection is confirmed; a batch
//! in flight alone when the connection ends again is split in halves, and
//! a channel that ended it alone twice is refused
//! ([`Command::Refused`]): it fails alone, after a bounded number of
//! closes. The client checks the servers' limits before sending; this is
//! the net under limits it could not read.

use alloc::collections::{BTreeSet, VecDeque};
use alloc::vec::Vec;

use crate::command::{Channel, Command, ConnId};
use crate::core::{ConnState, Core, Pending, Sub};
use crate::time::Time;

/// The text a channel is refused with.
const REFUSED: &str = "the server closed the connection each time this was subscribed \
    alone: its subscribe reply is over the server's output buffer limit \
    (client-output-buffer-limit pubsub) or the name over proto-max-bulk-len";

/// One connection's held channels (carried to its next connection).
#[derive(Debug, Default)]
pub(crate) struct Probes {
    /// Batches to send, one at a time, first first.
    queue: VecDeque<Probe>,
    /// Every channel of the queue, by partition: a resubscribe leaves them
    /// to it.
    held: BTreeSet<(u32, Channel)>,
}

/// A batch held apart.
#[derive(Debug)]
pub(crate) struct Probe {
    partition: u32,
    channels: Vec<Channel>,
    /// It was in flight alone when a connection ended once already.
    struck: bool,
}

impl Probes {
    /// Whether `name` (of `partition`) waits here.
    pub(crate) fn holds(&self, partition: u32, name: &Channel) -> bool {
        !self.held.is_empty() && self.held.contains(&(partition, name.clone()))
    }

    fn push(&mut self, front: bool, probe: Probe) {
        for n in &probe.channels {
            self.held.insert((probe.partition, n.clone()));
        }
        match front {
            true => self.queue.push_front(probe),
            false => self.queue.push_back(probe),
        }
    }

    fn pop(&mut self) -> Option<Probe> {
        let probe = self.queue.pop_front()?;
        for n in &probe.channels {
            self.held.remove(&(probe.partition, n.clone()));
        }
        Some(probe)
    }
}

impl Core {
    /// `conn` ended with `pending` subscribes unanswered: their channels
    /// still sent there are held apart for the next connection; a probe
    /// that was in flight alone is split, or, a channel alone the second
    /// time, refused.
    pub(crate) fn hold_unanswered(&mut self, conn: ConnId, pending: VecDeque<Pending>) {
        let alone = pending.len() == 1;
        let mut refused = Vec::new();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        for p in pending {
            let Some(part) = self.parts.get_mut(p.partition as usize) else {
                continue;
            };
            let mut still: Vec<Channel> = p
                .channels
                .into_iter()
                .filter(|n| {
                    part.channels
                        .get(n)
                        .is_some_and(|ch| ch.sub() == Sub::Sent(conn))
                })
                .collect();
            if still.is_empty() {
                continue;
            }
            let partition = p.partition;
            match p.probe {
                Some(struck) if alone && still.len() == 1 && struck => {
                    for n in &still {
                        if let Some(ch) = part.channels.get_mut(n) {
                            ch.set_sub(Sub::Refused);
                            ch.set_gap(false);
                        }
                    }
                    refused.extend(still.into_iter().map(|n| (partition, n)));
                }
                Some(_) if alone && still.len() > 1 => {
                    let b = still.split_off(still.len().div_ceil(2));
                    for half in [b, still] {
                        let struck = false;
                        c.probes.push(
                            true,
                            Probe {
                                partition,
                                channels: half,
                                struck,
                            },
                        );
                    }
                }
                Some(struck) => {
                    let struck = struck || alone;
                    c.probes.push(
                        true,
                        Probe {
                            partition,
                            channels: still,
                            struck,
                        },
                    );
                }
                None => {
                    let probe = Probe {
                        partition,
                        channels: still,
                        struck: false,
                    };
                    c.probes.push(false, probe);
                }
            }
        }
        for (partition, channel) in refused {
            self.counters.stats.subscribe_errors += 1;
            self.emit(Command::Refused {
                partition,
                channel,
                message: REFUSED.into(),
            });
        }
    }

    /// Sends `conn`'s next held batch when nothing else awaits its reply
    /// there.
    pub(crate) fn send_next_probe(&mut self, conn: ConnId, now: Time) {
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if !c.pending.is_empty() || c.state != ConnState::Up {
                return;
            }
            let Some(probe) = c.probes.pop() else {
                return;
            };
            if self.conn_of(probe.partition) != Some(conn) {
                continue; // moved: its new connection subscribes it
            }
            let Some(part) = self.parts.get(probe.partition as usize) else {
                continue;
            };
            let channels: Vec<Channel> = probe
                .channels
                .into_iter()
                .filter(|n| part.channels.get(n).is_some_and(|ch| ch.sub() == Sub::Idle))
                .collect();
            if channels.is_empty() {
                continue;
            }
            self.send_subscribe(conn, probe.partition, channels, now);
            if let Some(p) = self.conns.get_mut(&conn).and_then(|c| c.pending.back_mut()) {
                p.probe = Some(probe.struck);
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeSet;
    use alloc::format;
    use alloc::vec::Vec;
    use core::time::Duration;

    use shardcore::Partitions;
    use topology::NodeAddr;

    use crate::test_maps::drain;
    use crate::{Command, Config, ConnId, ConnLayout, Core, SubscribeReply, Time};

    /// A core on one server, batches of `batch`, its connection up.
    fn one_server(batch: usize) -> Core {
        let server = NodeAddr {
            host: "127.0.0.1".into(),
            port: 6379,
        };
        let mut cfg = Config::new(Partitions::new(1).unwrap(), alloc::vec![server]);
        cfg.mode = ConnLayout::Fixed;
        cfg.batch = batch;
        cfg.ping_interval = Duration::ZERO;
        let mut core = Core::new(cfg, Time::ZERO).unwrap();
        for c in drain(&mut core) {
            if let Command::Open { conn, .. } = c {
                core.handle_conn_up(Time::from_millis(1), conn);
            }
        }
        core
    }

    /// What a server does that closes the connection on every subscribe
    /// carrying `bad` (after answering those before it), until the core
    /// has nothing left to do: the closes, and the channels refused.
    fn serve(core: &mut Core, bad: &[u8], mut now: Time) -> (usize, Vec<Vec<u8>>) {
        let (mut closes, mut refused) = (0, Vec::new());
        let mut closed: BTreeSet<ConnId> = BTreeSet::new();
        for _ in 0..10_000 {
            let cmds = drain(core);
            if cmds.is_empty() {
                match core.poll_timeout() {
                    Some(t) if t < now + Duration::from_secs(60) => {
                        now = t.max(now);
                        core.handle_timeout(now);
                        continue;
                    }
                    _ => return (closes, refused),
                }
            }
            for cmd in cmds {
                match cmd {
                    Command::Open { conn, .. } => core.handle_conn_up(now, conn),
                    Command::Subscribe { conn, channels, .. } if !closed.contains(&conn) => {
                        if channels.iter().any(|c| &c[..] == bad) {
                            closed.insert(conn);
                            closes += 1;
                            core.handle_conn_down(now, conn);
                        } else {
                            core.handle_subscribe_reply(now, conn, SubscribeReply::Ok);
                        }
                    }
                    Command::Refused { channel, .. } => refused.push(channel.to_vec()),
                    _ => {}
                }
            }
        }
        panic!("the core never settled: {closes} closes");
    }

    #[test]
    fn a_channel_whose_subscribe_closes_the_connection_is_refused_alone_after_a_few_closes() {
        let mut core = one_server(8);
        let names: Vec<Vec<u8>> = (0..60).map(|i| format!("ch:{i}").into_bytes()).collect();
        core.handle_want(Time::from_millis(2), names.iter().map(|n| &n[..]));
        assert_eq!(serve(&mut core, b"bad", Time::from_millis(2)).0, 0);
        // The bad one among fresh names, batched with them.
        let fresh: Vec<Vec<u8>> = (0..30).map(|i| format!("new:{i}").into_bytes()).collect();
        let mut wanted = fresh.clone();
        wanted.insert(17, b"bad".to_vec());
        core.handle_want(Time::from_millis(3), wanted.iter().map(|n| &n[..]));
        let (closes, refused) = serve(&mut core, b"bad", Time::from_millis(3));
        assert_eq!(refused, [b"bad".to_vec()]);
        // Its batch of 8 in flight with others, then alone: split to 4, 2
        // and 1, then once more alone.
        assert!(closes <= 6, "{closes} closes");
        assert!(core.is_settled());
        for n in names.iter().chain(&fresh) {
            assert!(core.subscribed_on(n).is_some(), "{n:?}");
        }
        assert_eq!(core.subscribed_on(b"bad"), None);
    }

    #[test]
    fn a_large_name_goes_alone_so_its_neighbours_are_not_halved_out_one_close_at_a_time() {
        // A name over LARGE_NAME among 40 others in one want (or one
        // resubscribe): in one batch, it took a close per halving, with no
        // subscribe completing in between (8 closes here, 10 on Redis with
        // a real reconnect delay); in a command of its own, last, it is
        // refused after its three closes and the others are confirmed at
        // the first.
        let mut core = one_server(100);
        let large = alloc::vec![b'h'; crate::subscribe::LARGE_NAME + 1];
        let mut names: Vec<Vec<u8>> = (0..40).map(|i| format!("nb:{i}").into_bytes()).collect();
        names.insert(20, large.clone());
        core.handle_want(Time::from_millis(2), names.iter().map(|n| &n[..]));
        let (closes, refused) = serve(&mut core, &large, Time::from_millis(2));
        assert_eq!(refused, std::slice::from_ref(&large));
        assert_eq!(closes, 3);
        assert!(core.is_settled());
        for n in names.iter().filter(|n| **n != large) {
            assert!(core.subscribed_on(n).is_some(), "{n:?}");
        }
    }

    #[test]
    fn a_subscribe_in_flight_alone_at_one_close_is_sent_again() {
        // A connection that ends once with a lone subscribe in flight (a
        // restart) refuses nothing: that takes two.
        let mut core = one_server(8);
        core.handle_want(Time::from_millis(2), [&b"a"[..]]);
        let conn = match &drain(&mut core)[..] {
            [Command::Subscribe { conn, .. }] => *conn,
            other => panic!("{other:?}"),
        };
        core.handle_conn_down(Time::from_millis(3), conn);
        let (closes, refused) = serve(&mut core, b"none", Time::from_millis(3));
        assert_eq!((closes, refused.len()), (0, 0));
        assert!(core.subscribed_on(b"a").is_some());
    }
}
