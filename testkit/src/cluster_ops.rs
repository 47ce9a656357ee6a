//! Cluster changes for resharding and failover tests: move slots (the
//! legacy `SETSLOT` sequence or Valkey's atomic `MIGRATESLOTS`), add and
//! remove masters, fail over, kill a primary.

use std::collections::HashSet;

use crate::cluster::{my_id, Role, SlotRange, CLUSTER_TIMEOUT};
use crate::process::wait_for;
use crate::values::{items, text};
use crate::{Cluster, Error, Server, ServerKind, Value};

/// Keys moved per `MIGRATE` call.
const MIGRATE_BATCH: usize = 100;

impl Cluster {
    /// Moves `range` from master `from` to master `to` the way a resharding
    /// tool does: `SETSLOT IMPORTING` / `MIGRATING`, `MIGRATE` of every key,
    /// then `SETSLOT NODE` on the target, the source and every other master.
    /// Waits for [`Cluster::wait_ok`]. As in any Redis Cluster, a master that
    /// gives away its last slot becomes a replica of the node that took it.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `from` or `to` is not a live master or `from`
    /// does not own the whole range; command and wait errors.
    pub fn migrate_slots(&mut self, range: SlotRange, from: usize, to: usize) -> Result<(), Error> {
        self.check_move(&range, from, to)?;
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let (src_id, dst_id) = (self.ids[from].clone(), self.ids[to].clone());
        let dst_port = dst.port().to_string();
        let others: Vec<&Server> = self
            .masters()
            .into_iter()
            .filter(|&m| m != from && m != to)
            .map(|m| &self.nodes[m])
            .collect();
        for slot in range {
            let slot = slot.to_string();
            dst.cmd_str(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])?;
            src.cmd_str(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])?;
            loop {
                let batch = MIGRATE_BATCH.to_string();
                let keys = src.cmd_str(&["CLUSTER", "GETKEYSINSLOT", &slot, &batch])?;
                let keys: Vec<Vec<u8>> = items(&keys)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(text)
                    .map(String::into_bytes)
                    .collect();
                if keys.is_empty() {
                    break;
                }
                let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", dst_port.as_bytes()];
                args.extend([&b""[..], b"0", b"5000", b"KEYS"]);
                args.extend(keys.iter().map(Vec::as_slice));
                src.cmd(&args)?;
            }
            for node in [dst, src].into_iter().chain(others.iter().copied()) {
                match node.cmd_str(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]) {
                    // The source gave away its last slot and, learning it
                    // from the target, already turned into its replica.
                    Err(Error::Reply(msg)) if msg.contains("only with masters") => {}
                    other => {
                        other?;
                    }
                }
            }
        }
        self.wait_ok()
    }

    /// Moves `range` from master `from` to master `to` with Valkey 9's
    /// atomic slot migration: `CLUSTER MIGRATESLOTS SLOTSRANGE a b NODE id`
    /// on the source, which copies the slots' data to the target in the
    /// background and hands ownership over in one step. Waits until the
    /// source's `CLUSTER GETSLOTMIGRATIONS` reports the new job `success`,
    /// then for [`Cluster::wait_ok`]. A master that gives away its last slot
    /// becomes a replica of the target, as with [`Cluster::migrate_slots`].
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] on Redis (which has no such command), when `from`
    /// or `to` is not a live master, `from` does not own the whole range, or
    /// the job ends `failed` or `cancelled` (with its message); command and
    /// wait errors.
    pub fn migrate_slots_atomic(
        &mut self,
        range: SlotRange,
        from: usize,
        to: usize,
    ) -> Result<(), Error> {
        if self.kind != ServerKind::Valkey {
            return Err(Error::Cluster(
                "atomic slot migration (CLUSTER MIGRATESLOTS) needs Valkey 9".into(),
            ));
        }
        self.check_move(&range, from, to)?;
        let src = &self.nodes[from];
        let known: HashSet<String> = slot_migrations(src)?
            .into_iter()
            .map(|job| job.name)
            .collect();
        let (a, b) = (range.start().to_string(), range.end().to_string());
        let dst_id = self.ids[to].clone();
        src.cmd_str(&[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            &a,
            &b,
            "NODE",
            &dst_id,
        ])?;
        // A failed job is final: the probe yields its message at once.
        let ended = wait_for("the atomic slot migration", CLUSTER_TIMEOUT, || {
            let jobs = slot_migrations(src)?;
            let job = jobs.iter().find(|j| {
                !known.contains(&j.name) && j.operation == "EXPORT" && j.target == dst_id
            });
            Ok(job.and_then(|job| match job.state.as_str() {
                "success" => Some(Ok(())),
                "failed" | "cancelled" => Some(Err(format!("{} ({})", job.state, job.message))),
                _ => None,
            }))
        })?;
        ended.map_err(|why| {
            Error::Cluster(format!("atomic migration of {range:?} to node {to}: {why}"))
        })?;
        self.wait_ok()
    }

    /// Starts a new empty master, introduces it with `CLUSTER MEET`, waits
    /// for [`Cluster::wait_ok`], and returns its index.
    ///
    /// # Errors
    ///
    /// Start, command and wait errors.
    pub fn add_master(&mut self) -> Result<usize, Error> {
        let server = Server::builder(self.kind).cluster(true).start()?;
        let id = my_id(&server)?;
        let port = server.port().to_string();
        let seed = self
            .live()
            .first()
            .copied()
            .ok_or_else(|| Error::Cluster("no live node to meet".into()))?;
        self.nodes[seed].cmd_str(&["CLUSTER", "MEET", "127.0.0.1", &port])?;
        self.nodes.push(server);
        self.ids.push(id);
        self.roles.push(Role::Master(Vec::new()));
        self.wait_ok()?;
        Ok(self.nodes.len() - 1)
    }

    /// Stops node `i`, which must own no slots and have no replicas, and
    /// makes every other node forget it (`CLUSTER FORGET`), as
    /// `redis-cli --cluster del-node` does. Meant for a master whose slots
    /// were moved away — which the server may already have turned into a
    /// replica of the node that took its last slot.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `i` is not live, owns slots or has replicas;
    /// command and wait errors.
    pub fn remove_master(&mut self, i: usize) -> Result<(), Error> {
        if !self.is_live(i) {
            return Err(Error::Cluster(format!("node {i} is not live")));
        }
        if !self.slots_of(i).is_empty() || !self.replicas_of(i).is_empty() {
            return Err(Error::Cluster(format!(
                "node {i} still owns slots or has replicas; move them first"
            )));
        }
        self.nodes[i].stop();
        self.roles[i] = Role::Down;
        let id = self.ids[i].clone();
        for n in self.live() {
            self.nodes[n].cmd_str(&["CLUSTER", "FORGET", &id])?;
        }
        self.wait_ok()
    }

    /// Runs `CLUSTER FAILOVER` on replica `replica` and waits until it is the
    /// master and the cluster has settled.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `replica` is not a live replica; command and
    /// wait errors.
    pub fn failover(&mut self, replica: usize) -> Result<(), Error> {
        if self.master_of(replica).is_none() {
            return Err(Error::Cluster(format!(
                "node {replica} is not a live replica"
            )));
        }
        self.nodes[replica].cmd(&[b"CLUSTER", b"FAILOVER"])?;
        let node = &self.nodes[replica];
        wait_for("the replica to become master", CLUSTER_TIMEOUT, || {
            let role = node.cmd(&[b"ROLE"])?;
            let first = items(&role).and_then(|r| r.first()).and_then(text);
            Ok((first.as_deref() == Some("master")).then_some(()))
        })?;
        self.wait_ok()
    }

    /// Kills master `i` with SIGKILL and waits until one of its replicas has
    /// been promoted and the cluster is ok again. Returns the new master.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `i` is not a live master with a replica; wait
    /// errors.
    pub fn kill_primary(&mut self, i: usize) -> Result<usize, Error> {
        self.kill_primary_after(i, false, || {})
    }

    /// Kills master `i` after writes that none of its replicas got, as an
    /// asynchronous replica loses them in a crash: freezes its replicas
    /// (SIGSTOP), cuts their replication links (`CLIENT KILL TYPE
    /// replica` on `i`), runs `write` (what it writes to `i` now is
    /// acknowledged there only), kills `i` with SIGKILL, thaws the
    /// replicas and waits until one of them has been promoted. Returns the
    /// new master.
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill_primary`].
    pub fn kill_primary_losing_writes(
        &mut self,
        i: usize,
        write: impl FnOnce(),
    ) -> Result<usize, Error> {
        self.kill_primary_after(i, true, write)
    }

    fn kill_primary_after(
        &mut self,
        i: usize,
        lose: bool,
        write: impl FnOnce(),
    ) -> Result<usize, Error> {
        self.expect_master(i)?;
        let replicas = self.replicas_of(i);
        if replicas.is_empty() {
            return Err(Error::Cluster(format!(
                "master {i} has no replica to promote"
            )));
        }
        let first_slot = self.slots_of(i).first().map(|r| *r.start());
        if lose {
            for &r in &replicas {
                self.nodes[r].freeze();
            }
            let cut = self.nodes[i].cmd(&[b"CLIENT", b"KILL", b"TYPE", b"replica"]);
            if let Err(e) = cut {
                for &r in &replicas {
                    self.nodes[r].thaw();
                }
                return Err(e);
            }
        }
        write();
        self.nodes[i].kill();
        self.roles[i] = Role::Down;
        if lose {
            for &r in &replicas {
                self.nodes[r].thaw();
            }
        }
        self.wait_ok()?;
        replicas
            .into_iter()
            .find(|&r| {
                matches!(&self.roles[r], Role::Master(s)
                    if first_slot.is_none_or(|f| s.iter().any(|&(a, b)| a <= f && f <= b)))
            })
            .ok_or_else(|| Error::Cluster(format!("no replica of {i} was promoted")))
    }

    /// Restarts node `i` (after a kill) on its port with its `nodes.conf`, so
    /// it rejoins (a killed master comes back as a replica), and waits.
    ///
    /// # Errors
    ///
    /// Start and wait errors.
    pub fn restart_node(&mut self, i: usize) -> Result<(), Error> {
        let node = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| Error::Cluster(format!("no node {i}")))?;
        node.restart()?;
        self.roles[i] = Role::Master(Vec::new());
        self.wait_ok()
    }

    /// The checks every slot move makes.
    fn check_move(&self, range: &SlotRange, from: usize, to: usize) -> Result<(), Error> {
        self.expect_master(from)?;
        self.expect_master(to)?;
        if from == to {
            return Err(Error::Cluster("slot move: from == to".into()));
        }
        let owned = self.slots_of(from);
        if !owned
            .iter()
            .any(|r| r.start() <= range.start() && range.end() <= r.end())
        {
            return Err(Error::Cluster(format!(
                "node {from} does not own all of {range:?} (owns {owned:?})"
            )));
        }
        Ok(())
    }

    fn expect_master(&self, i: usize) -> Result<(), Error> {
        match self.roles.get(i) {
            Some(Role::Master(_)) => Ok(()),
            _ => Err(Error::Cluster(format!("node {i} is not a live master"))),
        }
    }
}

/// One entry of `CLUSTER GETSLOTMIGRATIONS`.
struct SlotMigration {
    name: String,
    operation: String,
    target: String,
    state: String,
    message: String,
}

/// The node's atomic slot migration jobs (each entry a flat list or map of
/// field names and values).
fn slot_migrations(node: &Server) -> Result<Vec<SlotMigration>, Error> {
    let reply = node.cmd(&[b"CLUSTER", b"GETSLOTMIGRATIONS"])?;
    let entries = items(&reply)
        .ok_or_else(|| Error::unexpected("a CLUSTER GETSLOTMIGRATIONS array", &reply))?;
    Ok(entries
        .iter()
        .map(|entry| {
            let pairs: Vec<(String, String)> = match entry {
                Value::Map(pairs) => pairs
                    .iter()
                    .map(|(k, v)| (text(k).unwrap_or_default(), text(v).unwrap_or_default()))
                    .collect(),
                other => items(other)
                    .unwrap_or_default()
                    .chunks(2)
                    .map(|kv| {
                        let field = |i: usize| kv.get(i).and_then(text).unwrap_or_default();
                        (field(0), field(1))
                    })
                    .collect(),
            };
            let get = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            SlotMigration {
                name: get("name"),
                operation: get("operation"),
                target: get("target_node"),
                state: get("state"),
                message: get("message"),
            }
        })
        .collect())
}
