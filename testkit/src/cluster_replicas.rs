//! Replica changes for the tests of subscribing on replicas: kill a
//! replica, re-point one to another master (`CLUSTER REPLICATE`).

use crate::cluster::{Role, CLUSTER_TIMEOUT};
use crate::process::wait_for;
use crate::values::{int, items, text};
use crate::{Cluster, Error};

impl Cluster {
    /// Kills replica `i` with SIGKILL and waits until every other node
    /// sees it failed and the cluster is ok.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `i` is not a live replica; wait errors.
    pub fn kill_replica(&mut self, i: usize) -> Result<(), Error> {
        if self.master_of(i).is_none() {
            return Err(Error::Cluster(format!("node {i} is not a live replica")));
        }
        self.nodes[i].kill();
        self.roles[i] = Role::Down;
        self.wait_ok()
    }

    /// Re-points replica `i` to master `master` (`CLUSTER REPLICATE`) and
    /// waits until its link to the new master is up and the cluster
    /// agrees.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] when `i` is not a live replica or `master` not a
    /// live master; command and wait errors.
    pub fn replicate(&mut self, i: usize, master: usize) -> Result<(), Error> {
        if self.master_of(i).is_none() {
            return Err(Error::Cluster(format!("node {i} is not a live replica")));
        }
        if !matches!(self.roles.get(master), Some(Role::Master(_))) {
            return Err(Error::Cluster(format!(
                "node {master} is not a live master"
            )));
        }
        let id = self.ids[master].clone();
        self.nodes[i].cmd(&[b"CLUSTER", b"REPLICATE", id.as_bytes()])?;
        let port = i64::from(self.nodes[master].port());
        let node = &self.nodes[i];
        wait_for(
            "the replica to follow its new master",
            CLUSTER_TIMEOUT,
            || {
                // ROLE: slave, host, port, state, offset.
                let role = node.cmd(&[b"ROLE"])?;
                let r = items(&role).unwrap_or_default();
                let follows = r.get(2).and_then(int) == Some(port)
                    && r.get(3).and_then(text).as_deref() == Some("connected");
                Ok(follows.then_some(()))
            },
        )?;
        self.wait_ok()
    }
}
