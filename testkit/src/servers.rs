//! N independent standalone servers, as client-side sharding uses them.

use std::net::SocketAddr;
use std::ops::Index;

use crate::{Error, Server, ServerKind};

/// N independent standalone servers of one kind; all stop on drop.
#[derive(Debug)]
pub struct Servers {
    servers: Vec<Server>,
}

impl Servers {
    /// Starts `n` servers of `kind`, each on its own free port.
    ///
    /// # Errors
    ///
    /// The first start error (servers already started are stopped).
    pub fn start(kind: ServerKind, n: usize) -> Result<Servers, Error> {
        let servers = (0..n)
            .map(|_| Server::start(kind))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Servers { servers })
    }

    /// Their addresses, in index order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(Server::addr).collect()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, in index order.
    pub fn iter(&self) -> std::slice::Iter<'_, Server> {
        self.servers.iter()
    }

    /// Mutable access to one server (to kill or restart it).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Server> {
        self.servers.get_mut(i)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // SIGTERM to every server at once; each Server's drop then reaps it.
        let pids: Vec<u32> = self
            .servers
            .iter_mut()
            .filter_map(Server::running_pid)
            .collect();
        crate::process::terminate_all(&pids);
    }
}

impl Index<usize> for Servers {
    type Output = Server;

    fn index(&self, i: usize) -> &Server {
        &self.servers[i]
    }
}

impl<'a> IntoIterator for &'a Servers {
    type Item = &'a Server;
    type IntoIter = std::slice::Iter<'a, Server>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
