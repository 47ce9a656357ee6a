//! The resubscribe planner: after a reconnect, which SSUBSCRIBE commands each
//! Redis node gets, and which worker sends them.
//!
//! One SSUBSCRIBE may only carry channels of one slot, so the planner sends
//! one command per partition (split only past the batch size) and gives each
//! worker whole partitions. Splitting the channels themselves across W workers
//! would make every worker send a thin command for every partition: W times
//! as many commands.
//!
//! ```text
//! channels grouped by partition ──┐
//! partition → node map ───────────┼─> plan_resubscribe ─> per node: per worker:
//! W workers, batch size ──────────┘                        [SSUBSCRIBE p: channels…]
//! ```
//!
//! The planner borrows the caller's channel slices: a command is a partition
//! and a sub-slice of that partition's channels, so planning copies no
//! channel names. The caller encodes each command's channels with
//! [`Partitions::redis_channel_into`](crate::Partitions::redis_channel_into).

use alloc::vec::Vec;
use core::fmt;

/// The default number of channels per SSUBSCRIBE.
pub const DEFAULT_BATCH: usize = 512;

/// Planner settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Workers per node that send commands concurrently (at least 1).
    pub workers: u32,
    /// Most channels in one command (at least 1).
    pub batch: usize,
}

impl PlanOptions {
    /// `workers` workers and the default batch size of 512.
    #[must_use]
    pub fn new(workers: u32) -> Self {
        Self {
            workers,
            batch: DEFAULT_BATCH,
        }
    }

    /// Sets the batch size.
    #[must_use]
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self::new(1)
    }
}

/// Why a plan could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// [`PlanOptions::workers`] is 0.
    NoWorkers,
    /// [`PlanOptions::batch`] is 0.
    ZeroBatch,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoWorkers => f.write_str("resubscribe plan needs at least one worker"),
            Self::ZeroBatch => f.write_str("resubscribe batch size must be at least 1"),
        }
    }
}

impl core::error::Error for PlanError {}

/// One SSUBSCRIBE: channels of a single partition (hence a single slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeCommand<'a, C> {
    /// The partition all channels belong to.
    pub partition: u32,
    /// The user channels (not yet prefixed with the partition tag).
    pub channels: &'a [C],
}

/// The commands one worker sends to one node, whole partitions only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlan<'a, C> {
    /// Commands in partition order.
    pub commands: Vec<SubscribeCommand<'a, C>>,
    /// Channels over all commands.
    pub channels: usize,
}

/// Everything to send to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan<'a, N, C> {
    /// The node, as the partition → node map named it.
    pub node: N,
    /// One entry per worker that has work (at most `workers`, none empty).
    pub workers: Vec<WorkerPlan<'a, C>>,
}

impl<'a, N, C> NodePlan<'a, N, C> {
    /// Number of SSUBSCRIBE commands over all workers.
    #[must_use]
    pub fn command_count(&self) -> usize {
        self.workers.iter().map(|w| w.commands.len()).sum()
    }

    /// All commands, worker by worker.
    pub fn commands(&self) -> impl Iterator<Item = &SubscribeCommand<'a, C>> {
        self.workers.iter().flat_map(|w| w.commands.iter())
    }
}

/// The result of [`plan_resubscribe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResubscribePlan<'a, N, C> {
    /// Per node, ordered by node.
    pub nodes: Vec<NodePlan<'a, N, C>>,
    /// Partitions whose node is unknown (the map returned `None`), with their
    /// channels; the caller retries them once the topology settles.
    pub unrouted: Vec<(u32, &'a [C])>,
}

impl<N, C> ResubscribePlan<'_, N, C> {
    /// Number of SSUBSCRIBE commands over all nodes.
    #[must_use]
    pub fn command_count(&self) -> usize {
        self.nodes.iter().map(NodePlan::command_count).sum()
    }
}

/// Plans the SSUBSCRIBEs that restore `groups` (each a partition and its
/// channels) on the nodes given by `node_of` (partition → node, `None` when
/// unknown).
///
/// Per node, partitions go to workers whole: largest partition first, each to
/// the worker with the fewest channels so far (ties: lowest worker), which
/// keeps workers within one partition's size of each other. Each partition
/// becomes `ceil(channels / batch)` commands. Empty groups produce nothing. A
/// partition listed twice is planned twice, each group on its own.
///
/// ```
/// use shardcore::plan::{plan_resubscribe, PlanOptions};
/// // Partition 3 (600 channels) and partition 9 (2) on node "a",
/// // partition 5 on an unknown node.
/// let big: Vec<String> = (0..600).map(|i| format!("c{i}")).collect();
/// let small = vec!["x".to_string(), "y".to_string()];
/// let groups = [(3, big.as_slice()), (9, small.as_slice()), (5, small.as_slice())];
/// let plan = plan_resubscribe(groups, |p| (p != 5).then_some("a"), PlanOptions::new(4))?;
/// let node = &plan.nodes[0];
/// assert_eq!(node.node, "a");
/// assert_eq!(node.workers.len(), 2); // whole partitions: two workers busy
/// assert_eq!(node.command_count(), 3); // 512 + 88 channels, then 2
/// assert_eq!(plan.unrouted.len(), 1);
/// # Ok::<(), shardcore::plan::PlanError>(())
/// ```
///
/// # Errors
/// [`PlanError::NoWorkers`] or [`PlanError::ZeroBatch`] for zero settings.
pub fn plan_resubscribe<'a, N, C, G, F>(
    groups: G,
    mut node_of: F,
    options: PlanOptions,
) -> Result<ResubscribePlan<'a, N, C>, PlanError>
where
    N: Ord + Clone,
    G: IntoIterator<Item = (u32, &'a [C])>,
    F: FnMut(u32) -> Option<N>,
{
    if options.workers == 0 {
        return Err(PlanError::NoWorkers);
    }
    if options.batch == 0 {
        return Err(PlanError::ZeroBatch);
    }
    let mut routed: Vec<(N, u32, &'a [C])> = Vec::new();
    let mut unrouted = Vec::new();
    for (partition, channels) in groups {
        if channels.is_empty() {
            continue;
        }
        match node_of(partition) {
            Some(node) => routed.push((node, partition, channels)),
            None => unrouted.push((partition, channels)),
        }
    }
    // Per node, biggest partitions first; partition number breaks ties so the
    // plan does not depend on input order.
    routed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(b.2.len().cmp(&a.2.len()))
            .then(a.1.cmp(&b.1))
    });

    let mut nodes: Vec<NodePlan<'a, N, C>> = Vec::new();
    let mut start = 0;
    while start < routed.len() {
        let node = routed[start].0.clone();
        let end = routed[start..]
            .iter()
            .position(|r| r.0 != node)
            .map_or(routed.len(), |n| start + n);
        nodes.push(plan_node(node, &routed[start..end], options));
        start = end;
    }
    Ok(ResubscribePlan { nodes, unrouted })
}

/// Assigns one node's partitions (sorted biggest first) to workers.
fn plan_node<'a, N: Clone, C>(
    node: N,
    parts: &[(N, u32, &'a [C])],
    options: PlanOptions,
) -> NodePlan<'a, N, C> {
    let workers = (options.workers as usize).min(parts.len()).max(1);
    let mut plans: Vec<WorkerPlan<'a, C>> = (0..workers)
        .map(|_| WorkerPlan {
            commands: Vec::new(),
            channels: 0,
        })
        .collect();
    for (_, partition, channels) in parts {
        let Some(w) = plans.iter_mut().min_by_key(|w| w.channels) else {
            break;
        };
        w.channels += channels.len();
        w.commands
            .extend(channels.chunks(options.batch).map(|c| SubscribeCommand {
                partition: *partition,
                channels: c,
            }));
    }
    for w in &mut plans {
        w.commands.sort_by_key(|c| c.partition);
    }
    plans.retain(|w| !w.commands.is_empty());
    NodePlan {
        node,
        workers: plans,
    }
}
