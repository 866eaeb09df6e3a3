//! The transfer engine: rails opened through a `Node` and driven as one
//! channel, segments registered on all of them, prepared lists, batches
//! in a scope or owned, notifications, and bringing a lost rail back.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::transport::Transport;
use ferrovia_channel::{
    ChannelConfig, Lease, MultiChannel, PollingScope, Rails, ScopeError, Unpolled,
};
use ferrovia_mr::{Access, MrRegistry, RegisterOptions, Shared};
use ferrovia_node::{Node, RailSpec};

use crate::batch::{MAX_RAILS, Op};
use crate::error::{Rejected, TransferError};
use crate::list::DescriptorList;
use crate::notify::{Notification, Notifier};
use crate::numa;
use crate::owned::OwnedBatch;
use crate::policy::{RailPolicy, Scheduler};
use crate::prepare::{PreparedList, Shape, Slicing, prepare};
use crate::scoped::TransferScope;
use crate::segment::{RemoteSegment, Segment};
use crate::state::EngineState;

/// Ids of engines in this process, so a list prepared for one is refused
/// by another.
static ENGINES: AtomicU64 = AtomicU64::new(1);

/// Settings of a [`TransferEngine`].
#[derive(Debug, Clone)]
pub struct TransferBuilder {
    rails: Vec<RailSpec>,
    policy: RailPolicy,
    slicing: Slicing,
    timeout: Duration,
    channel: ChannelConfig,
}

impl Default for TransferBuilder {
    fn default() -> Self {
        TransferBuilder {
            rails: vec![RailSpec::Same],
            policy: RailPolicy::default(),
            slicing: Slicing::default(),
            timeout: Duration::from_secs(30),
            channel: ChannelConfig::default(),
        }
    }
}

impl TransferBuilder {
    /// The rails, in order (default: one, on the node's own backend):
    /// verbs devices by name, or new UCX workers. Every rank names the
    /// same number.
    pub fn rails(mut self, rails: Vec<RailSpec>) -> Self {
        self.rails = rails;
        self
    }

    /// `n` rails on the node's own backend (UCX: `n` workers).
    pub fn same_rails(mut self, n: usize) -> Self {
        self.rails = vec![RailSpec::Same; n.max(1)];
        self
    }

    /// The rails `FERROVIA_RAILS` names, if it is set: a count of rails
    /// on the node's own backend (`2`), or verbs device names separated
    /// by commas (`rxe0,rxe1`). Unset or empty, the rails stay as set.
    /// A launcher passes it to every rank, so they agree.
    pub fn rails_from_env(self) -> Self {
        match std::env::var("FERROVIA_RAILS") {
            Ok(v) => self.rails_named(&v),
            Err(_) => self,
        }
    }

    /// The rails `words` name, as in `FERROVIA_RAILS`: a count (`2`) or
    /// device names separated by commas (`rxe0,rxe1`); empty leaves them.
    pub fn rails_named(self, words: &str) -> Self {
        let v = words;
        let v = v.trim();
        if v.is_empty() {
            return self;
        }
        if let Ok(n) = v.parse::<usize>() {
            return self.same_rails(n);
        }
        let names: Vec<RailSpec> = v
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| RailSpec::Device(d.to_string()))
            .collect();
        self.rails(names)
    }

    /// How runs are spread over the rails (default: least outstanding).
    pub fn policy(mut self, policy: RailPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How entries are cut into slices and grouped into runs.
    pub fn slicing(mut self, slicing: Slicing) -> Self {
        self.slicing = slicing;
        self
    }

    /// The deadline of opening the rails and exchanging the rings.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The settings of the rails' channel (depths, drain deadline).
    pub fn channel(mut self, cfg: ChannelConfig) -> Self {
        self.channel = cfg;
        self
    }

    /// Opens the rails through `node` (collective: every rank calls it,
    /// with the same number of rails) and exchanges the notification
    /// rings.
    pub fn open(self, node: &mut Node) -> Result<TransferEngine, TransferError> {
        let (me, n) = (node.rank(), node.world_size());
        let mut transports: Vec<Arc<dyn Transport>> = Vec::with_capacity(self.rails.len());
        let mut registries = Vec::with_capacity(self.rails.len());
        let mut local = Vec::with_capacity(self.rails.len());
        let mut names = Vec::with_capacity(self.rails.len());
        let here = numa::current_node();
        for (i, spec) in self.rails.iter().enumerate() {
            let rail = node.open_rail(i as u32, spec.clone(), self.timeout)?;
            tracing::info!("transfer: rail {i}: {}", rail.describe());
            names.push(rail.describe().to_string());
            let device_node = match spec {
                RailSpec::Device(name) => numa::device_node(name),
                _ => None,
            };
            local.push(device_node.is_none() || device_node == here);
            let (t, r) = rail.into_parts();
            transports.push(t);
            registries.push(r);
        }
        let mut engine = self.assemble(me, n, transports, registries, local)?;
        engine.names = names;
        let mine = engine.state.notifier.borrow().remote()?;
        let rings = exchange(node, &mine, engine.state.timeout)?;
        engine.state.notifier.get_mut().connect(rings);
        Ok(engine)
    }

    /// An engine over rails already connected (`transports[r]` reaching
    /// `peers` peers, this rank `me` among them, with registry
    /// `registries[r]`), without a node: no rings are exchanged, so its
    /// batches carry no notification. For benchmarks and tests through a
    /// transport double.
    #[doc(hidden)]
    pub fn over_rails(
        self,
        me: usize,
        peers: usize,
        transports: Vec<Arc<dyn Transport>>,
        registries: Vec<MrRegistry>,
    ) -> Result<TransferEngine, TransferError> {
        let local = vec![true; transports.len()];
        let mut engine = self.assemble(me, peers, transports, registries, local)?;
        engine.names = (0..engine.state.rails)
            .map(|r| format!("rail {r}"))
            .collect();
        Ok(engine)
    }

    fn assemble(
        self,
        me: usize,
        n: usize,
        transports: Vec<Arc<dyn Transport>>,
        registries: Vec<MrRegistry>,
        local: Vec<bool>,
    ) -> Result<TransferEngine, TransferError> {
        let rails = registries.len();
        if rails == 0 || rails > MAX_RAILS || transports.len() != rails {
            return Err(TransferError::Mismatch(format!(
                "{rails} rails ({} transports): 1 to {MAX_RAILS}",
                transports.len()
            )));
        }
        let composite: Arc<dyn Transport> = Arc::new(Rails::new(transports)?);
        let multi = MultiChannel::over(composite, registries[0].clone(), self.channel.clone());
        let notifier = Notifier::new(me, n, &registries)?;
        Ok(TransferEngine {
            multi,
            names: Vec::new(),
            state: EngineState {
                id: ENGINES.fetch_add(1, Relaxed),
                rank: me,
                rails,
                peers: n,
                registries,
                alive: RefCell::new(vec![true; rails * n]),
                sched: RefCell::new(Scheduler::new(self.policy, rails, local)),
                notifier: RefCell::new(notifier),
                batches: Cell::new(1),
                slicing: self.slicing,
                timeout: self.timeout,
            },
        })
    }
}

/// Batches of one-sided transfers to many peers over several rails (see
/// the crate docs).
pub struct TransferEngine {
    // Dropped first: its core waits for (then flushes) what is out before
    // the notifier's memory, which peers write, goes.
    multi: MultiChannel,
    pub(crate) state: EngineState,
    /// Each rail in words (`Rail::describe`).
    names: Vec<String>,
}

impl std::fmt::Debug for TransferEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferEngine")
            .field("rank", &self.state.rank)
            .field("rails", &self.state.rails)
            .field("peers", &self.state.peers)
            .finish_non_exhaustive()
    }
}

/// Gives every rank `mine`, over the node (collective); every rank's.
fn exchange(
    node: &mut Node,
    mine: &RemoteSegment,
    timeout: Duration,
) -> Result<Vec<RemoteSegment>, TransferError> {
    let mut per_rail = Vec::with_capacity(mine.rails());
    for r in 0..mine.rails() {
        let region = mine
            .rail(r)
            .ok_or_else(|| TransferError::Mismatch("a rail without a descriptor".into()))?;
        per_rail.push(node.all_gather_remote(region, timeout)?);
    }
    (0..node.world_size())
        .map(|p| RemoteSegment::new(per_rail.iter().map(|g| g[p]).collect()))
        .collect()
}

impl TransferEngine {
    /// Settings.
    pub fn builder() -> TransferBuilder {
        TransferBuilder::default()
    }

    /// One rail on the node's own backend, default settings.
    pub fn open(node: &mut Node) -> Result<TransferEngine, TransferError> {
        TransferBuilder::default().open(node)
    }

    /// What each rail did with each peer until now: one
    /// [`ChannelStats`](ferrovia_channel::ChannelStats) per rail (index =
    /// rail), each with its peers by rank.
    pub fn stats(&self) -> Vec<ferrovia_channel::ChannelStats> {
        self.multi.stats().by_rail(self.state.rails)
    }

    /// Publishes [`TransferEngine::stats`] through the `metrics` facade,
    /// each rail's series labelled `rank` and `rail` (see
    /// `ChannelStats::publish` for the names).
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        for (rail, s) in self.stats().iter().enumerate() {
            s.publish(&[
                ("rank", self.state.rank.to_string()),
                ("rail", rail.to_string()),
            ]);
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.state.rank
    }

    /// Ranks in the job.
    pub fn peers(&self) -> usize {
        self.state.peers
    }

    /// Rails.
    pub fn rails(&self) -> usize {
        self.state.rails
    }

    /// Each rail in words, e.g. `verbs on rxe1` or `ucx worker 1 (UCX_TLS=tcp)`.
    pub fn rail_names(&self) -> &[String] {
        &self.names
    }

    /// Whether the connection of `rail` to `peer` works (as far as the
    /// engine knows: a lost one stays lost until [`TransferEngine::reconnect_rail`]).
    pub fn rail_alive(&self, rail: usize, peer: usize) -> bool {
        self.state.is_alive(rail, peer)
    }

    /// Each rail's throughput estimate, bytes per microsecond.
    pub fn rail_rates(&self) -> Vec<f64> {
        self.state.sched.borrow().rates()
    }

    /// Allocates a segment of `len` zeroed bytes on every rail.
    pub fn alloc<A: Access>(
        &self,
        len: usize,
        opts: RegisterOptions<A>,
    ) -> Result<Segment<A>, TransferError> {
        Segment::alloc(&self.state.registries, len, opts)
    }

    /// Checks `list` on `seg` for the peers' segments `remotes` (index =
    /// rank; segments from [`TransferEngine::all_gather`]) and cuts it:
    /// every bad entry is refused here, naming it.
    pub fn prepare<A: Access>(
        &self,
        seg: &Segment<A>,
        list: &DescriptorList,
        remotes: &[RemoteSegment],
    ) -> Result<PreparedList, TransferError> {
        let shape = Shape {
            engine: self.state.id,
            registries: &self.state.registries,
            rails: self.state.rails,
            world: self.state.peers,
            slicing: self.state.slicing,
        };
        prepare(&shape, seg, list, remotes)
    }

    /// Gives every rank `mine` (collective, over `node`): every rank's
    /// remote segment, index = rank.
    pub fn all_gather(
        &self,
        node: &mut Node,
        mine: &RemoteSegment,
        timeout: Duration,
    ) -> Result<Vec<RemoteSegment>, TransferError> {
        exchange(node, mine, timeout)
    }

    /// Publishes `mine` under `name` in a store-backed job's store (see
    /// [`Node::publish`]), as NIXL's `sendLocalMD` does: a peer finds it
    /// with [`TransferEngine::fetch_segment`], without a collective, for
    /// as long as this rank's member lives.
    pub fn publish_segment(
        &self,
        node: &Node,
        name: &str,
        mine: &RemoteSegment,
    ) -> Result<(), TransferError> {
        Ok(node.publish(name, &mine.encode())?)
    }

    /// The segment a member published under `name`, waiting up to
    /// `timeout` for it (NIXL's `fetchRemoteMD`); prepare lists against it
    /// as against one from [`TransferEngine::all_gather`].
    pub fn fetch_segment(
        &self,
        node: &Node,
        name: &str,
        timeout: Duration,
    ) -> Result<RemoteSegment, TransferError> {
        RemoteSegment::decode(&node.fetch(name, timeout)?)
    }

    /// Runs `f` with a scope over every rail: batches submitted in it
    /// borrow their segments' bytes (a lease borrowed for the scope) and
    /// their prepared lists, and the scope completes or flushes every run
    /// before it returns, as a channel's scope does.
    pub fn scope<'env, F, T>(&'env self, f: F) -> Result<T, TransferError>
    where
        F: for<'scope> FnOnce(&TransferScope<'_, 'scope, 'env>) -> Result<T, TransferError>,
    {
        let state = &self.state;
        let r = run_scope(
            &self.multi,
            Unpolled::Drain,
            |ps: &mut PollingScope<'_, 'env, MultiChannel>| {
                let s = TransferScope::new(RefCell::new(ps), state);
                f(&s)
            },
        );
        match r {
            Ok(t) => Ok(t),
            Err(ScopeError::Closure(e)) => Err(e),
            Err(ScopeError::Both { closure, drain }) => {
                // The closure's error says what went wrong first.
                tracing::warn!("transfer: after the scope's error, draining failed too: {drain}");
                Err(closure)
            }
            Err(ScopeError::Drain(d)) => Err(TransferError::Drain(d)),
            Err(ScopeError::Nested) => Err(TransferError::NestedScope),
            Err(other) => Err(TransferError::Mismatch(other.to_string())),
        }
    }

    /// Submits `prepared` as `op` on bytes `lease` owns
    /// ([`Segment::into_lease`]), with an optional notification (at most
    /// 64 bytes) each target gets once every piece of the batch to it has
    /// landed. The batch holds the list and, through its runs, the lease:
    /// dropping or forgetting it frees nothing the device may touch.
    pub fn submit(
        &self,
        prepared: PreparedList,
        lease: &Arc<Lease<'static>>,
        op: Op,
        notify: Option<&[u8]>,
    ) -> Result<OwnedBatch<'_>, Rejected> {
        OwnedBatch::start(
            &self.state,
            self.core(),
            prepared,
            lease.clone(),
            op,
            notify,
        )
    }

    /// The rails' channel core (owned batches post and poll through it).
    pub(crate) fn core(&self) -> &ferrovia_channel::engine::ChannelCore {
        use ferrovia_channel::ScopeTarget;
        self.multi.core()
    }

    /// Routes what the rails completed (owned batches nobody waits for
    /// end their runs on their own as completions are taken; this takes
    /// them without a batch to wait on).
    pub fn progress(&self) -> Result<usize, TransferError> {
        Ok(self.core().progress()?)
    }

    /// The next notification from any peer, waiting up to `timeout`.
    pub fn wait_notification(&self, timeout: Duration) -> Result<Notification, TransferError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        let mut nap = Duration::from_micros(1);
        loop {
            if let Some(n) = self.try_notification()? {
                return Ok(n);
            }
            if Instant::now() >= deadline {
                return Err(TransferError::Timeout {
                    pending: 1,
                    total: 1,
                    after: timeout,
                });
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_micros(200));
        }
    }

    /// The next notification that arrived, if any.
    pub fn try_notification(&self) -> Result<Option<Notification>, TransferError> {
        self.state.notifier.borrow_mut().poll()
    }

    /// Brings `rail`'s connection to `peer` back after it was lost: both
    /// ranks call it (over the node's control path; the other rails and
    /// peers go on undisturbed). The connection's generation moves on, so
    /// nothing of the lost one lands afterwards (UCX: its messages are
    /// dropped; verbs: a new queue pair).
    pub fn reconnect_rail(
        &mut self,
        node: &mut Node,
        rail: usize,
        peer: usize,
        timeout: Duration,
    ) -> Result<(), TransferError> {
        let vpeer = self.state.vpeer(rail, peer)?;
        let multi = std::cell::RefCell::new(&mut self.multi);
        node.reconnect_with(
            rail as u32 + 1,
            peer,
            timeout,
            || Ok(multi.borrow_mut().renew(vpeer)?),
            |theirs| Ok(multi.borrow_mut().connect_renewed(vpeer, &theirs)?),
        )?;
        self.state.revive(vpeer);
        Ok(())
    }

    /// Breaks `rail`'s connection to `peer` on purpose (its outstanding
    /// runs are flushed and move to other rails): what losing a link does,
    /// for tests and drills.
    pub fn break_rail(&self, rail: usize, peer: usize) -> Result<(), TransferError> {
        self.core().flush_peer(self.state.vpeer(rail, peer)?)?;
        Ok(())
    }

    /// The rings' memory is `Shared`: exposed for tests of what lands.
    #[doc(hidden)]
    pub fn registries(&self) -> &[MrRegistry] {
        &self.state.registries
    }
}

/// The options of a target segment: memory peers write and read
/// (`Shared`, with remote write and read). Add `.zero_based()` for
/// descriptors that count from the segment's start.
pub fn target_options() -> RegisterOptions<Shared> {
    RegisterOptions::local()
        .allow_remote_write()
        .allow_remote_read()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rails_from_the_environment_s_words() {
        let b = || TransferBuilder::default().same_rails(2);
        assert_eq!(b().rails_named("").rails, vec![RailSpec::Same; 2]);
        assert_eq!(b().rails_named(" 3 ").rails, vec![RailSpec::Same; 3]);
        assert_eq!(b().rails_named("0").rails, vec![RailSpec::Same]);
        assert_eq!(
            b().rails_named("rxe0, rxe1,").rails,
            vec![
                RailSpec::Device("rxe0".into()),
                RailSpec::Device("rxe1".into())
            ]
        );
    }
}
