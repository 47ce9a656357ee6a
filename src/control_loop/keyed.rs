//! Plain commands on a cluster, routed by key: to the owner of the key's
//! slot over that primary's publish connection, as the publish core
//! routes them ([`control::publish::PublishCore::handle_command`]): under
//! the publishes' rules and bounds
//! ([`PubSubBuilder::max_redirects`](crate::PubSubBuilder::max_redirects),
//! [`PubSubBuilder::retry_window`](crate::PubSubBuilder::retry_window)).
//! A `MOVED` moves the slot's route, as a publish's does.
//!
//! The caller posts the command to the control thread and gets a handle
//! (it reads no clock, and neither loops nor polls). The control thread
//! keeps its arguments by id, sends it where the core says (`ASKING` first
//! on the same connection for an `ASK`), and hands what comes back to the
//! core when it is a redirect or a refusal for now, else to the caller.

use std::sync::Arc;

use control::publish::{CmdId, Failure, NodeId, Reply};
use resp::Value;

use crate::control_loop::driver::Driver;
use crate::control_loop::publish;
use crate::control_loop::shared::{Cmd, Shared};
use crate::engine::Pending;
use crate::error::Error;

/// Sends `args` to the owner of `key`'s slot: a handle to its reply.
///
/// # Errors
///
/// Through the handle: the reply's or the connection's error;
/// [`Error::Cluster`] when the slot has no reachable owner within the
/// retry window, or the redirects ran out; [`Error::Shutdown`] once the
/// instance closes.
pub(crate) fn command(shared: &Shared, key: &[u8], args: Vec<Vec<u8>>) -> Pending<Value> {
    let (pending, done) = Pending::new();
    let mut cmd = Some(Cmd::new(shardcore::key_slot(key), args, done));
    shared.post(|inbox| {
        if !inbox.closed {
            inbox.commands.extend(cmd.take());
        }
    });
    // The loop took its last turn: dropped, it fails with `Shutdown`.
    drop(cmd);
    pending
}

impl Driver {
    /// A command a caller posted: numbered, kept, and routed by the core.
    pub(crate) fn command_posted(&mut self, cmd: Cmd) {
        self.next_cmd += 1;
        let id = CmdId(self.next_cmd);
        let slot = cmd.slot;
        self.cmds.insert(id, cmd);
        self.publish_input(false, None, |core, now| core.handle_command(now, id, slot));
    }

    /// The core's [`control::publish::Output::SendCommand`]: the command
    /// on `node`'s publish engine (`ASKING` first when `asking`); what
    /// comes back is posted to the inbox.
    pub(crate) fn send_command(&mut self, id: CmdId, node: NodeId, asking: bool) {
        let Some(cmd) = self.cmds.get(&id) else {
            return;
        };
        let Some(engine) = self.s.hold.engine(node) else {
            // Retired before the core's output was carried out: not sent.
            let r = Err(Error::Cluster {
                slot: cmd.slot,
                reason: "no connection to the slot's owner".into(),
            });
            return self.command_replied(id, r);
        };
        let s = self.s.clone();
        let post = move |r| s.post(|inbox| inbox.command_replies.push((id, r)));
        engine.command_then_asking(&cmd.args, asking, post);
    }

    /// What came back for command `id`: a redirect or a refusal for now
    /// goes to the core (the node a redirect names opened first, as for
    /// a publish); anything else is the caller's outcome.
    pub(crate) fn command_replied(&mut self, id: CmdId, r: Result<Value, Error>) {
        let cluster = match &r {
            Err(Error::Reply { addr, message }) => {
                let host = addr.host();
                topology::parse_cluster_error(message.as_bytes(), host.as_deref())
                    .map(|e| (e, message.clone()))
            }
            _ => None,
        };
        let Some((error, message)) = cluster else {
            if let Some(cmd) = self.cmds.remove(&id) {
                cmd.finish(r);
            }
            self.s.hold.with(|p| p.core.handle_command_done(id));
            return;
        };
        let (reply, named) = self.cluster_reply(error);
        let last: Arc<str> = match &named {
            Some((Err(e), _)) => format!("{message}; cannot connect: {e}").into(),
            _ => message,
        };
        if let Some(cmd) = self.cmds.get_mut(&id) {
            cmd.last = Some(last);
        }
        let moves = matches!(reply, Reply::Moved { .. });
        let redirect = named.as_ref().map(|(_, a)| a);
        self.publish_input(moves, redirect, |core, now| {
            core.handle_command_reply(now, id, reply)
        });
    }

    /// The core's [`control::publish::Output::CommandFailed`].
    pub(crate) fn command_failed(&mut self, id: CmdId, why: Failure) {
        let Some(cmd) = self.cmds.remove(&id) else {
            return;
        };
        let context = cmd.last.clone().unwrap_or_else(|| "".into());
        let e = publish::failure(&self.s, cmd.slot, why, &Ok(0), &context);
        cmd.finish(Err(e));
    }
}
