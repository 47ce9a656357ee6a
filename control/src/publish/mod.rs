//! The publish core: where a publish goes, decided without I/O or a clock.
//!
//! [`PublishCore`] joins the publish side's parts ([`Routes`], [`Gates`],
//! [`Hold`], [`RetryPolicy`], [`Services`]) and makes the decisions
//! between them: a `MOVED` moves the slot's route and an `ASK` does not;
//! a publish with no owner known is held (the hold on), waits for a
//! retry (the hold off), or fails (closing); a slot whose route moves is
//! gated (one gate per move when the new owner is known, one per slot
//! when it is not), and its gate opens after the old route's barrier and
//! markers; held publishes go to an owner that is up (after an
//! unreachable owner or a refusal, the oldest alone first, as a probe),
//! or fail past the hold's limit; nodes that own nothing any more are
//! retired; every node keeps a service channel.
//!
//! Inputs are `handle_*` calls with the time as an argument. What the
//! input's own message becomes is its [`Verdict`], carried out by the
//! caller; everything else is an [`Output`], carried out in order by the
//! control thread ([`PublishCore::poll_output`]), which also calls
//! [`PublishCore::handle_timeout`] at [`PublishCore::poll_timeout`] (and
//! may call it more often: it looks at everything each time). While the
//! hold keeps anything, it looks every [`PublishConfig::look`].
//!
//! The fast path stays outside: a publish whose slot has an owner in the
//! table ([`PublishCore::table`], derived from [`Output::Table`]) while
//! nothing is held ([`PublishCore::holds_any`]) goes straight to it.
//!
//! ```
//! use control::publish::{NodeId, Output, PublishConfig, PublishCore, Reply, Target, Verdict};
//! use control::{Sample as Msg, Time};
//! let msg = |seq| Msg::new(seq, 7, 10);
//! let mut core: PublishCore<&str, Msg> = PublishCore::new(PublishConfig::new(vec![7]));
//! core.handle_node(NodeId(1), "a");
//! // No owner known, the hold on: held, and the control thread should look.
//! assert!(matches!(core.handle_publish(Time::ZERO, msg(1)), Verdict::Held { wake: true, .. }));
//! // A MOVED (of a publish sent meanwhile) moves the route.
//! let v = core.handle_reply(Time::ZERO, msg(2), Reply::Moved { slot: 7, to: Target::Node(NodeId(1)) });
//! assert!(matches!(v, Verdict::Send { node: NodeId(1), asking: false, .. }));
//! assert_eq!(core.owner(7), Some(NodeId(1)));
//! // The next look releases the held one to it, alone (a probe).
//! core.handle_timeout(Time::from_millis(5));
//! let outputs: Vec<_> = core.poll_outputs().collect();
//! assert!(outputs.iter().any(|o| matches!(o, Output::Submit { node: NodeId(1), msg, .. } if msg.probe)));
//! ```

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::time::Duration;

use crate::gates::Gates;
use crate::hold::{Held, Hold};
use crate::retry::{RetryFailure, RetryPolicy};
use crate::routes::Routes;
use crate::services::Services;
use crate::time::Time;
use crate::ConnId;

mod held;
mod keyed;
mod route;
#[cfg(test)]
mod tests;

pub use keyed::CmdId;
pub use route::MapPlan;

/// The publish core's settings.
#[derive(Clone, Debug)]
pub struct PublishConfig {
    /// Redirects (`MOVED`, `ASK`, a resend after a close) per publish.
    pub max_redirects: u32,
    /// How long a publish refused for now is tried again.
    pub retry_window: Duration,
    /// How long a publish stays held outside a gate (zero: the hold is
    /// off; gates and parking still hold).
    pub hold_limit: Duration,
    /// The most publishes held.
    pub hold_messages: usize,
    /// The most bytes (names and payloads) held.
    pub hold_bytes: usize,
    /// The longest a route gate stays closed.
    pub gate_timeout: Duration,
    /// How often a closed gate's marker goes out.
    pub marker_every: Duration,
    /// How often the core looks at the hold while it keeps anything.
    pub look: Duration,
    /// The slots publishes go to (the partitions' slots): only their
    /// route moves are gated.
    pub watched: Vec<u16>,
}

impl PublishConfig {
    /// The engine's defaults for publishes to the `watched` slots: 5
    /// redirects, a 2 s retry window, a 5 s hold of at most 100,000
    /// publishes and 64 MiB, gates of at most 1 s with a marker every
    /// 20 ms, a look at the hold every 5 ms.
    pub fn new(watched: Vec<u16>) -> PublishConfig {
        PublishConfig {
            max_redirects: 5,
            retry_window: Duration::from_secs(2),
            hold_limit: Duration::from_secs(5),
            hold_messages: 100_000,
            hold_bytes: 64 << 20,
            gate_timeout: Duration::from_secs(1),
            marker_every: Duration::from_millis(20),
            look: Duration::from_millis(5),
            watched,
        }
    }
}

/// One publish connection the driver opened (a new one at the same
/// address is a new `NodeId`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NodeId(pub u32);

/// Where a redirect points, as the driver found it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// A node it has a publish connection to (opened for the redirect if
    /// need be, and given to [`PublishCore::handle_node`] first).
    Node(NodeId),
    /// The redirect names no usable address: refused for now (the
    /// refreshed map says where the slot lives).
    NoAddress,
    /// The node's publish connection could not be opened.
    CannotConnect,
}

/// What came back for a publish sent to a node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reply {
    /// The node took it (given for probes only: a plain publish's reply
    /// ends it without the core).
    Taken,
    /// Sent, and its connection broke before the reply: it may have run.
    Lost,
    /// Its node's connection is down: nothing was sent.
    NotConnected,
    /// Its connection was closed before it was written.
    NotWritten,
    /// `MOVED`: the slot lives at `to` now.
    Moved {
        /// The slot.
        slot: u16,
        /// Its node.
        to: Target,
    },
    /// `ASK`: send it to `to` once, after `ASKING`.
    Ask {
        /// The slot.
        slot: u16,
        /// Its node for this publish.
        to: Target,
    },
    /// `TRYAGAIN`: refused for now.
    TryAgain,
    /// `CLUSTERDOWN`: refused for now.
    ClusterDown,
    /// Any other error: the caller's own.
    Other,
}

/// Why a publish fails.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Failure {
    /// The hold is at its limit.
    HoldFull {
        /// Its publish bound.
        messages: usize,
        /// Its byte bound.
        bytes: usize,
    },
    /// Held past the hold's limit with no reachable owner.
    Expired {
        /// For how long.
        held: Duration,
    },
    /// Redirected once more than allowed.
    Redirects {
        /// Redirects followed.
        count: u32,
    },
    /// Still refused when its retry window ran out.
    Window {
        /// Times it was refused for now.
        tries: u32,
    },
    /// A command's slot had no owner known for its retry window.
    NoOwner {
        /// For how long.
        waited: Duration,
    },
    /// A redirect's node could not be connected to.
    CannotConnect,
    /// The instance is closing.
    Shutdown,
    /// The reply's own error: the caller reports it.
    Reported,
}

impl From<RetryFailure> for Failure {
    fn from(e: RetryFailure) -> Failure {
        match e {
            RetryFailure::Redirects { count } => Failure::Redirects { count },
            RetryFailure::Window { tries } => Failure::Window { tries },
        }
    }
}

/// What becomes of the message an input was given: its caller carries it
/// out.
#[derive(Debug)]
pub enum Verdict<M> {
    /// Send it to the slot's owner in the table.
    Owner(M),
    /// Send it to `node` (`asking`: after `ASKING`, on the same
    /// connection).
    Send {
        /// The node.
        node: NodeId,
        /// The publish.
        msg: M,
        /// `ASKING` first.
        asking: bool,
    },
    /// It was taken: complete it.
    Done(M),
    /// Held. `evicted`: newer publishes a full hold let go (fail each
    /// with [`Failure::HoldFull`]).
    Held {
        /// Publishes that made room.
        evicted: Vec<M>,
        /// The control thread should look soon (a new entry).
        wake: bool,
    },
    /// Kept for a retry.
    Waiting {
        /// When it goes again.
        at: Time,
        /// Its slot's later publishes are held behind it (the hold on).
        parked: bool,
        /// The control thread should look soon (its next timeout moved).
        wake: bool,
    },
    /// Fail it.
    Fail {
        /// The publish.
        msg: M,
        /// Why.
        why: Failure,
    },
}

/// Which part of the read table changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TableChange {
    /// One slot's owner (the nodes only grew, at the end).
    Slot(u16),
    /// All of it.
    All,
}

/// What the control thread carries out, in order.
#[derive(Debug)]
pub enum Output<M> {
    /// Send `msg` to `node` (a release, a due probe, a retry).
    Submit {
        /// The node.
        node: NodeId,
        /// The publish.
        msg: M,
        /// `ASKING` first.
        asking: bool,
    },
    /// Fail `msg`.
    Fail {
        /// The publish.
        msg: M,
        /// Why.
        why: Failure,
    },
    /// Derive the read table again from [`PublishCore::table`].
    Table(TableChange),
    /// Gate `token` closed: `slots` (ascending) leave `from` for `to`
    /// (`None`: no owner known yet) and are held until it opens (for logs;
    /// its [`Output::Barrier`] follows).
    GateClosed {
        /// The gate.
        token: u64,
        /// The old route.
        from: NodeId,
        /// The new one.
        to: Option<NodeId>,
        /// The slots it holds.
        slots: Vec<u16>,
    },
    /// Send gate `token`'s barrier (a `PING`) on `node`, after everything
    /// sent there; its answer goes to [`PublishCore::handle_barrier`].
    Barrier {
        /// The gate.
        token: u64,
        /// Its old route.
        node: NodeId,
    },
    /// Publish gate `token`'s marker on `node` to the service channel of
    /// `service_slot` (the new owner's); its return or refusal goes to
    /// [`PublishCore::handle_marker`].
    Marker {
        /// The gate.
        token: u64,
        /// Its old route.
        node: NodeId,
        /// The new owner's service channel's slot.
        service_slot: u16,
    },
    /// Gate `token` opened (for counters and logs).
    GateOpened {
        /// The gate.
        token: u64,
        /// Its time ran out.
        timed_out: bool,
    },
    /// No route and no gate use `node` any more: close its connection.
    Retire {
        /// The node.
        node: NodeId,
    },
    /// Send the service `SSUBSCRIBE` of `slot` on `conn`.
    SendService {
        /// The subscribe connection.
        conn: ConnId,
        /// The channel's slot.
        slot: u16,
    },
    /// A `MOVED` moved `slot` to `node`: tell the subscribe core.
    Redirected {
        /// The slot.
        slot: u16,
        /// Its node now.
        node: NodeId,
    },
    /// Read the slot map again soon (coalesced).
    RefreshSoon,
    /// Send command `id` (its arguments are the driver's) to `node`
    /// (`asking`: after `ASKING`, on the same connection); what comes back
    /// goes to [`PublishCore::handle_command_reply`], or ends it
    /// ([`PublishCore::handle_command_done`]).
    SendCommand {
        /// The command.
        id: CmdId,
        /// The node.
        node: NodeId,
        /// `ASKING` first.
        asking: bool,
    },
    /// Command `id` fails (the core forgot it).
    CommandFailed {
        /// The command.
        id: CmdId,
        /// Why.
        why: Failure,
    },
}

/// What the core keeps, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Publishes held.
    pub held_messages: usize,
    /// Their bytes.
    pub held_bytes: usize,
    /// Gates closed.
    pub gates: usize,
    /// Publishes waiting for a retry.
    pub waiting: usize,
}

/// A closed gate's routes: the old node, the new one (once known), and
/// one of its slots.
#[derive(Clone, Copy, Debug)]
struct GateRoute {
    old: NodeId,
    new: Option<NodeId>,
    slot: u16,
}

/// A publish connection.
#[derive(Clone, Debug)]
struct NodeInfo<A> {
    addr: A,
    up: bool,
}

/// The publish half of the sans-IO publish core, over node addresses `A`
/// and publishes `M`.
#[derive(Debug)]
pub struct PublishCore<A, M> {
    cfg: PublishConfig,
    closing: bool,
    /// When the hold was last looked at.
    looked: Time,
    nodes: BTreeMap<NodeId, NodeInfo<A>>,
    /// Nodes no route uses, kept while a gate does.
    retiring: BTreeSet<NodeId>,
    routes: Routes<NodeId>,
    gates: Gates<GateRoute>,
    hold: Hold<M>,
    policy: RetryPolicy,
    services: Services<A>,
    /// Commands routed by slot, by the driver's id.
    commands: BTreeMap<CmdId, keyed::CmdState>,
    out: VecDeque<Output<M>>,
}

impl<A: Clone + PartialEq, M: Held> PublishCore<A, M> {
    /// No node, no route, nothing held.
    pub fn new(cfg: PublishConfig) -> Self {
        PublishCore {
            closing: false,
            looked: Time::ZERO,
            nodes: BTreeMap::new(),
            retiring: BTreeSet::new(),
            routes: Routes::new(),
            gates: Gates::new(cfg.gate_timeout, cfg.marker_every),
            hold: Hold::new(cfg.hold_messages, cfg.hold_bytes, cfg.hold_limit),
            policy: RetryPolicy::new(cfg.max_redirects, cfg.retry_window),
            services: Services::new(),
            commands: BTreeMap::new(),
            out: VecDeque::new(),
            cfg,
        }
    }

    /// Its settings.
    pub fn config(&self) -> &PublishConfig {
        &self.cfg
    }

    /// Whether any slot holds publishes (the fast path's hint: while it
    /// does, every publish comes to [`PublishCore::handle_publish`]).
    pub fn holds_any(&self) -> bool {
        self.hold.entries() > 0
    }

    /// Whether a publish of `slot` is parked (refused for now and waiting
    /// for its retry, or out as a probe): the slot's other publishes,
    /// redirected ones included, wait behind it.
    pub fn parked(&self, slot: u16) -> bool {
        self.hold.is_parked(slot)
    }

    /// The node that takes `slot`'s publishes.
    pub fn owner(&self, slot: u16) -> Option<NodeId> {
        self.routes.owner(slot).copied()
    }

    /// The table the read table is derived from: each slot's index into
    /// the nodes, or [`crate::NO_ROUTE`], and the nodes.
    pub fn table(&self) -> (&[u16], &[NodeId]) {
        (self.routes.owners(), self.routes.nodes())
    }

    /// What it keeps now.
    pub fn stats(&self) -> PublishStats {
        let (held_messages, held_bytes) = self.hold.size();
        PublishStats {
            held_messages,
            held_bytes,
            gates: self.gates.len(),
            waiting: self.hold.waiting(),
        }
    }

    /// The next thing for the control thread to carry out.
    pub fn poll_output(&mut self) -> Option<Output<M>> {
        self.out.pop_front()
    }

    /// Whether anything waits for the control thread (an input on
    /// another thread may queue outputs: that thread wakes it).
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Everything queued for the control thread, in order.
    pub fn poll_outputs(&mut self) -> impl Iterator<Item = Output<M>> + '_ {
        core::iter::from_fn(|| self.out.pop_front())
    }

    /// When [`PublishCore::handle_timeout`] is due: a gate's timeout or
    /// marker, a retry (of a publish or a command), a held publish's
    /// expiry, the end of a command's wait for an owner, or the next look
    /// while anything is held.
    pub fn poll_timeout(&self) -> Option<Time> {
        let look = self.holds_any().then(|| self.looked + self.cfg.look);
        let due = [
            self.hold.next_deadline(),
            self.gates.poll_timeout(),
            self.commands_timeout(),
            look,
        ];
        due.into_iter().flatten().min()
    }

    /// The instance closes: everything held or waiting, and every
    /// command, fails with [`Failure::Shutdown`], gates go, every node is
    /// retired and the table emptied; later publishes and commands fail
    /// the same way.
    pub fn handle_closing(&mut self) {
        self.closing = true;
        for msg in self.hold.drain() {
            self.out.push_back(Output::Fail {
                msg,
                why: Failure::Shutdown,
            });
        }
        self.close_commands();
        self.gates = Gates::new(self.cfg.gate_timeout, self.cfg.marker_every);
        for node in core::mem::take(&mut self.nodes).into_keys() {
            self.out.push_back(Output::Retire { node });
        }
        self.retiring.clear();
        self.routes = Routes::new();
        self.out.push_back(Output::Table(TableChange::All));
    }

    /// Whether the hold is on (it holds for unreachable owners).
    fn hold_on(&self) -> bool {
        !self.cfg.hold_limit.is_zero()
    }

    /// `msg` fails: its slot is unparked if it was a probe.
    fn failed(&mut self, mut msg: M, why: Failure) -> (M, Failure) {
        if msg.probe() {
            msg.set_probe(false);
            self.hold.unpark(msg.slot());
            // The owner refused it for good: the queue behind it goes
            // behind a probe again.
            self.hold.probe_next(msg.slot());
        }
        (msg, why)
    }

    fn hold_full(&self) -> Failure {
        let (messages, bytes) = self.hold.limits();
        Failure::HoldFull { messages, bytes }
    }
}
