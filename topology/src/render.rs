//! Readable renderings, for logs and golden files.

use core::fmt::{self, Display, Formatter, Write};

use crate::layout::{Layout, NodeKey, UnresolvedReason};
use crate::rewire::RewirePlan;
use crate::slotmap::{Health, Node, NodeAddr, SlotMap};

impl Display for NodeAddr {
    /// `host:port`, or `[host]:port` for an IPv6 address; with port 0,
    /// `unix:/path` for a Unix socket (an absolute path as the host) and
    /// `sentinel:NAME` for a master found through Sentinel.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.port == 0 && self.host.starts_with('/') {
            write!(f, "unix:{}", self.host)
        } else if self.port == 0 {
            write!(f, "sentinel:{}", self.host)
        } else if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Display for NodeKey {
    /// `id@host:port`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, self.addr)
    }
}

impl Display for Health {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Online => "online",
            Health::Failed => "failed",
            Health::Loading => "loading",
            Health::Unknown => "health?",
        })
    }
}

fn node(f: &mut Formatter<'_>, n: &Node) -> fmt::Result {
    f.write_str(&n.id)?;
    match &n.addr {
        Some(a) => write!(f, "@{a}")?,
        None => f.write_str("@?")?,
    }
    if let Some(h) = &n.hostname {
        write!(f, " ({h})")?;
    }
    write!(f, " {}", n.health)
}

/// Writes ascending numbers as runs: `0-3,7,9-10`.
fn runs(f: &mut Formatter<'_>, items: impl IntoIterator<Item = u32>) -> fmt::Result {
    let mut run: Option<(u32, u32)> = None;
    let mut first = true;
    let mut flush = |f: &mut Formatter<'_>, (a, b): (u32, u32)| -> fmt::Result {
        if !core::mem::take(&mut first) {
            f.write_char(',')?;
        }
        if a == b {
            write!(f, "{a}")
        } else {
            write!(f, "{a}-{b}")
        }
    };
    for x in items {
        run = match run {
            Some((a, b)) if b.checked_add(1) == Some(x) => Some((a, x)),
            Some(r) => {
                flush(f, r)?;
                Some((x, x))
            }
            None => Some((x, x)),
        };
    }
    match run {
        Some(r) => flush(f, r),
        None => f.write_str("-"),
    }
}

impl Display for SlotMap {
    /// The node table, then the slot ranges with their owner's index.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "slot map: {} shards, {} unowned slots",
            self.shards().len(),
            self.unowned_count()
        )?;
        for (i, s) in self.shards().iter().enumerate() {
            write!(f, "  [{i}] ")?;
            node(f, &s.primary)?;
            writeln!(f)?;
            for r in &s.replicas {
                f.write_str("      replica ")?;
                node(f, r)?;
                writeln!(f)?;
            }
        }
        for (range, owner) in self.ranges() {
            if range.start() == range.end() {
                write!(f, "  slot  {}: ", range.start())?;
            } else {
                write!(f, "  slots {}-{}: ", range.start(), range.end())?;
            }
            match owner {
                Some(i) => writeln!(f, "[{i}]")?,
                None => writeln!(f, "no owner")?,
            }
        }
        Ok(())
    }
}

impl Display for Layout {
    /// Each node with its partitions, then the unresolved partitions.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "layout: {} partitions on {} nodes, {} unresolved",
            self.partition_count(),
            self.nodes().len(),
            self.unresolved().len()
        )?;
        for n in self.nodes() {
            write!(f, "  {} {} ({}): ", n.key, n.health, n.partitions.len())?;
            runs(f, n.partitions.iter().copied())?;
            writeln!(f)?;
        }
        for u in self.unresolved() {
            let why = match u.reason {
                UnresolvedReason::NoOwner => "no owner",
                UnresolvedReason::UnknownEndpoint => "unknown endpoint",
            };
            writeln!(f, "  unresolved p{} (slot {}): {why}", u.partition, u.slot)?;
        }
        Ok(())
    }
}

impl Display for RewirePlan {
    /// Connections to open and close, then the moves and the orphans.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "rewire: nothing to do");
        }
        writeln!(
            f,
            "rewire: open {}, close {}, resubscribe {}, unowned {}",
            self.open.len(),
            self.close.len(),
            self.resubscribe.len(),
            self.unowned.len()
        )?;
        for k in &self.open {
            writeln!(f, "  open  {k}")?;
        }
        for k in &self.close {
            writeln!(f, "  close {k}")?;
        }
        for m in &self.resubscribe {
            write!(f, "  move  p{} (slot {}): ", m.partition, m.slot)?;
            match &m.from {
                Some(k) => write!(f, "{k}")?,
                None => f.write_str("unresolved")?,
            }
            writeln!(f, " -> {}", m.to)?;
        }
        for o in &self.unowned {
            writeln!(
                f,
                "  lost  p{} (slot {}): {} -> no owner",
                o.partition, o.slot, o.from
            )?;
        }
        Ok(())
    }
}
