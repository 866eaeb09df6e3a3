//! A member once joined: its lease kept alive, the members watched, and
//! what the watch sees turned into [`MemberEvent`]s for the node to hand
//! out. Both run on the store's runtime; a store that stops answering is
//! an event (`StoreLost`), and both keep trying until it is back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender, unbounded};
use etcd_client::{Client, EventType, GetOptions, KeyValue, WatchOptions};

use super::join::{Joining, holder, protocol};
use super::store::{MemberRecord, MemberState, Store, rank_key, rank_of};
use crate::error::{BootstrapError, NodeError};
use crate::membership::{LeaveReason, MemberEvent};

/// Whether the store answers, shared by the keep-alive and the watch, so
/// each loss and each return is told once; and the events' channel.
#[derive(Clone)]
pub(crate) struct Health {
    lost: Arc<Mutex<Option<Instant>>>,
    evicted: Arc<AtomicBool>,
    pub(super) tx: Sender<MemberEvent>,
    pub(super) rx: Receiver<MemberEvent>,
}

impl Health {
    pub(super) fn new() -> Health {
        let (tx, rx) = unbounded();
        Health {
            lost: Arc::new(Mutex::new(None)),
            evicted: Arc::new(AtomicBool::new(false)),
            tx,
            rx,
        }
    }

    fn lost(&self, reason: String) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if lost.is_none() {
            *lost = Some(Instant::now());
            tracing::warn!(
                "store: lost ({reason}); the data path runs on, membership changes wait"
            );
            let _ = self.tx.send(MemberEvent::StoreLost { reason });
        }
    }

    fn back(&self) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = lost.take() {
            tracing::info!("store: back after {:?}", since.elapsed());
            let _ = self.tx.send(MemberEvent::StoreBack {
                after: since.elapsed(),
            });
        }
    }

    fn evicted(&self) {
        if !self.evicted.swap(true, Ordering::Relaxed) {
            tracing::warn!("store: this member's lease is gone: the job counts it out");
            let _ = self.tx.send(MemberEvent::Evicted);
        }
    }
}

/// Keeps `leases` (this member's, the job's) alive every third of `ttl`,
/// for as long as the runtime runs. A lease the store no longer knows is
/// this member's eviction (its own) or nothing to keep (the job's).
pub(super) async fn keep_alive(client: Client, leases: [i64; 2], ttl: Duration, health: Health) {
    let period = (ttl / 3).max(Duration::from_millis(200));
    loop {
        let mut c = client.clone();
        let mut keepers = Vec::new();
        for id in leases {
            match tokio::time::timeout(period, c.lease_keep_alive(id)).await {
                Ok(Ok(k)) => keepers.push(k),
                Ok(Err(e)) => health.lost(format!("lease keep-alive: {e}")),
                Err(_) => health.lost("lease keep-alive: no answer".into()),
            }
        }
        while keepers.len() == leases.len() {
            for (i, (keeper, stream)) in keepers.iter_mut().enumerate() {
                let renewed = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match tokio::time::timeout(period, renewed).await {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => health.back(),
                    Ok(Ok(Some(_))) if i == 0 => {
                        health.evicted();
                        return;
                    }
                    Ok(Ok(Some(_))) => {}
                    Ok(Ok(None)) => {
                        health.lost("lease keep-alive: stream ended".into());
                        keepers.clear();
                        break;
                    }
                    Ok(Err(e)) => {
                        health.lost(format!("lease keep-alive: {e}"));
                        keepers.clear();
                        break;
                    }
                    Err(_) => {
                        health.lost("lease keep-alive: no answer".into());
                        keepers.clear();
                        break;
                    }
                }
            }
            tokio::time::sleep(period).await;
        }
        tokio::time::sleep(period).await;
    }
}

/// What this member knows of another: the incarnation (the creation
/// revision of its member key), its state, and whether its arrival was
/// told (members present when this one joined need no telling).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Known {
    pub(crate) incarnation: u64,
    state: MemberState,
    told: bool,
}

type Table = Arc<Mutex<BTreeMap<usize, Known>>>;

/// This rank as a member of a store-backed job (see `membership`).
pub(crate) struct Membership {
    pub(super) store: Store,
    rank: usize,
    lease: i64,
    incarnation: u64,
    replacement: bool,
    pub(super) incarnations: Vec<u64>,
    table: Table,
    health: Health,
}

impl Membership {
    pub(super) fn start(store: Store, j: &Joining) -> Result<Membership, NodeError> {
        let prefix = store.key("members/");
        let got = store.call("a read of the members", |mut c| {
            let p = prefix.clone();
            async move { c.get(p, Some(GetOptions::new().with_prefix())).await }
        })?;
        let mut table = BTreeMap::new();
        for kv in got.kvs() {
            if let (Some(r), Some(m)) = (rank_of(kv), MemberRecord::decode(kv)) {
                let k = Known {
                    incarnation: kv.create_revision() as u64,
                    state: m.state,
                    told: false,
                };
                table.insert(r, k);
            }
        }
        catch_up(&mut table, &j.incarnations, j.rank, &j.health);
        let table = Arc::new(Mutex::new(table));
        let from = got.header().map_or(0, |h| h.revision()) + 1;
        store.rt.spawn(watch(
            store.client.clone(),
            prefix,
            from,
            (j.rank, j.incarnation),
            table.clone(),
            j.health.clone(),
        ));
        Ok(Membership {
            store,
            rank: j.rank,
            lease: j.lease,
            incarnation: j.incarnation,
            replacement: j.replacement,
            incarnations: j.incarnations.clone(),
            table,
            health: j.health.clone(),
        })
    }

    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Every rank's incarnation when this member joined.
    pub(crate) fn incarnations(&self) -> &[u64] {
        &self.incarnations
    }

    /// Whether this member replaced one of a running job (and so must
    /// still connect to the survivors).
    pub(crate) fn is_replacement(&self) -> bool {
        self.replacement
    }

    /// The next membership event, waiting at most `timeout`.
    pub(crate) fn next_event(&self, timeout: Duration) -> Option<MemberEvent> {
        self.health.rx.recv_timeout(timeout).ok()
    }

    /// What this member knows of `rank`'s current member.
    pub(crate) fn member(&self, rank: usize) -> Option<Known> {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&rank)
            .copied()
    }

    /// What `rank`'s member published for this one (its blob), with its
    /// incarnation: for admitting a replacement.
    pub(crate) fn joined_blob(&self, rank: usize) -> Result<(Vec<u8>, u64), NodeError> {
        let known = self
            .member(rank)
            .filter(|k| k.state >= MemberState::Published && k.state < MemberState::Leaving)
            .ok_or(BootstrapError::NotJoined { rank })?;
        let key = self
            .store
            .key(&format!("links/{}/{}", rank_key(self.rank), rank_key(rank)));
        let got = self
            .store
            .call("a read of a new member's link", |mut c| async move {
                c.get(key, None).await
            })?;
        let kv = got
            .kvs()
            .first()
            .ok_or(BootstrapError::NotJoined { rank })?;
        Ok((kv.value().to_vec(), known.incarnation))
    }

    /// Marks this member running (a replacement, once connected to every
    /// survivor).
    pub(crate) fn set_running(&mut self) -> Result<(), NodeError> {
        self.set_state(MemberState::Running)?;
        self.replacement = false;
        Ok(())
    }

    fn set_state(&self, state: MemberState) -> Result<(), NodeError> {
        let key = self.store.key(&format!("members/{}", rank_key(self.rank)));
        let value = postcard::to_allocvec(&MemberRecord {
            state,
            holder: holder(),
        })
        .map_err(protocol)?;
        self.store.put(key, value, self.lease)
    }

    /// Publishes `value` under `name`, for as long as this member lives.
    pub(crate) fn publish(&self, name: &str, value: Vec<u8>) -> Result<(), NodeError> {
        let key = self.store.key(&format!("md/{name}"));
        self.store.put(key, value, self.lease)
    }

    /// What some member published under `name`, waiting up to `timeout`
    /// for it to appear.
    pub(crate) fn fetch(&self, name: &str, timeout: Duration) -> Result<Vec<u8>, NodeError> {
        let key = self.store.key(&format!("md/{name}"));
        let deadline = ferrovia_types::deadline_after(timeout);
        let found = self.store.wait_until(&key, deadline, |kvs| {
            kvs.iter()
                .find(|kv| kv.key() == key.as_bytes())
                .map(|kv| kv.value().to_vec())
        })?;
        found.ok_or_else(|| {
            BootstrapError::NotPublished {
                name: name.to_owned(),
                after: timeout,
            }
            .into()
        })
    }
}

impl Drop for Membership {
    /// Leaves of its own accord: marked leaving (so the others' events
    /// say so), then the lease revoked, each bounded by a second.
    fn drop(&mut self) {
        let bound = Duration::from_secs(1);
        let key = self.store.key(&format!("members/{}", rank_key(self.rank)));
        let leaving = postcard::to_allocvec(&MemberRecord {
            state: MemberState::Leaving,
            holder: holder(),
        });
        let lease = self.lease;
        if let Ok(value) = leaving {
            let _ = self
                .store
                .call_within("a leave", bound, |mut c| async move {
                    c.put(
                        key,
                        value,
                        Some(etcd_client::PutOptions::new().with_lease(lease)),
                    )
                    .await
                });
        }
        let _ = self
            .store
            .call_within("a lease revocation", bound, |mut c| async move {
                c.lease_revoke(lease).await
            });
    }
}

/// Watches the members' keys from revision `from` and tells what changes:
/// a member gone ([`MemberEvent::Left`]), a new member of a rank once its
/// links are published ([`MemberEvent::Joined`]), this member's own key
/// gone or taken ([`MemberEvent::Evicted`]). A broken watch is restarted
/// where it stopped once the store answers again.
async fn watch(
    client: Client,
    prefix: String,
    mut from: i64,
    (me, mine): (usize, u64),
    table: Table,
    health: Health,
) {
    let pause = Duration::from_millis(250);
    loop {
        let mut c = client.clone();
        let opts = WatchOptions::new().with_prefix().with_start_revision(from);
        let mut stream = match c.watch(prefix.clone(), Some(opts)).await {
            Ok(s) => s,
            Err(e) => {
                health.lost(format!("watch: {e}"));
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) if resp.canceled() => {
                    // Compacted past `from`: read the members afresh.
                    let mut c = client.clone();
                    let opts = GetOptions::new().with_prefix();
                    if let Ok(got) = c.get(prefix.clone(), Some(opts)).await {
                        resync(got.kvs(), (me, mine), &table, &health);
                        from = got.header().map_or(from, |h| h.revision() + 1);
                    }
                    break;
                }
                Ok(Some(resp)) => {
                    health.back();
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        from = from.max(kv.mod_revision() + 1);
                        let put = ev.event_type() == EventType::Put;
                        apply(kv, put, (me, mine), &table, &health);
                    }
                }
                Ok(None) => {
                    health.lost("watch: the stream ended".into());
                    break;
                }
                Err(e) => {
                    health.lost(format!("watch: {e}"));
                    break;
                }
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Tells what changed between the exchange (`connected[r]`: the member
/// of rank `r` this node connected to, 0 for none) and the first read of
/// the members: a member replaced or gone meanwhile left, and its
/// successor joined (so the node admits it); the members it connected to
/// need no telling.
fn catch_up(table: &mut BTreeMap<usize, Known>, connected: &[u64], me: usize, health: &Health) {
    for (r, &was) in connected.iter().enumerate() {
        let still = table.get(&r).is_some_and(|k| k.incarnation == was);
        if r != me && was != 0 && !still {
            let gone = Known {
                incarnation: was,
                state: MemberState::Running,
                told: true,
            };
            left(r, gone, health);
        }
    }
    for (&r, k) in table.iter_mut() {
        k.told = r == me || connected.get(r) == Some(&k.incarnation);
        if !k.told && matches!(k.state, MemberState::Published | MemberState::Running) {
            k.told = true;
            tracing::info!(
                "store: rank {r} joined (incarnation {}) while this one connected",
                k.incarnation
            );
            let _ = health.tx.send(MemberEvent::Joined {
                rank: r,
                incarnation: k.incarnation,
            });
        }
    }
}

/// One change of a member key.
fn apply(kv: &KeyValue, put: bool, (me, mine): (usize, u64), table: &Table, health: &Health) {
    let Some(rank) = rank_of(kv) else { return };
    let incarnation = kv.create_revision() as u64;
    if rank == me {
        if !put || incarnation != mine {
            health.evicted();
        }
        return;
    }
    let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
    if !put {
        if let Some(gone) = t.remove(&rank) {
            left(rank, gone, health);
        }
        return;
    }
    let Some(m) = MemberRecord::decode(kv) else {
        return;
    };
    let k = match t.get(&rank) {
        Some(old) if old.incarnation == incarnation => Known {
            state: m.state,
            ..*old
        },
        old => {
            if let Some(gone) = old {
                left(rank, *gone, health); // its delete was missed
            }
            Known {
                incarnation,
                state: m.state,
                told: false,
            }
        }
    };
    let tell = !k.told && k.state >= MemberState::Published && k.state < MemberState::Leaving;
    t.insert(
        rank,
        Known {
            told: k.told || tell,
            ..k
        },
    );
    if tell {
        tracing::info!("store: rank {rank} joined (incarnation {incarnation})");
        let _ = health.tx.send(MemberEvent::Joined { rank, incarnation });
    }
}

fn left(rank: usize, gone: Known, health: &Health) {
    let reason = if gone.state == MemberState::Leaving {
        LeaveReason::Departed
    } else {
        LeaveReason::LeaseExpired
    };
    tracing::info!(
        "store: rank {rank} left ({reason:?}, incarnation {})",
        gone.incarnation
    );
    let _ = health.tx.send(MemberEvent::Left {
        rank,
        incarnation: gone.incarnation,
        reason,
    });
}

/// Brings the table in line with the members read afresh.
fn resync(kvs: &[KeyValue], (me, mine): (usize, u64), table: &Table, health: &Health) {
    let present: Vec<usize> = kvs.iter().filter_map(rank_of).collect();
    if !present.contains(&me) {
        health.evicted();
    }
    let gone: Vec<usize> = table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .copied()
        .filter(|r| !present.contains(r))
        .collect();
    for r in gone {
        if let Some(k) = table.lock().unwrap_or_else(|e| e.into_inner()).remove(&r) {
            left(r, k, health);
        }
    }
    for kv in kvs {
        apply(kv, true, (me, mine), table, health);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(incarnation: u64, state: MemberState) -> Known {
        Known {
            incarnation,
            state,
            told: false,
        }
    }

    #[test]
    fn a_rank_replaced_while_this_one_connected_is_told_as_left_and_joined() {
        let health = Health::new();
        // Connected to rank 1 as member 11 and rank 2 as member 12; by the
        // first read rank 2 is member 20, and rank 3 (member 13) is gone.
        let mut table = BTreeMap::from([
            (0, known(10, MemberState::Running)),
            (1, known(11, MemberState::Running)),
            (2, known(20, MemberState::Published)),
        ]);
        catch_up(&mut table, &[10, 11, 12, 13], 0, &health);
        let events: Vec<MemberEvent> = health.rx.try_iter().collect();
        let left: Vec<(usize, u64)> = events
            .iter()
            .filter_map(|e| match e {
                MemberEvent::Left {
                    rank, incarnation, ..
                } => Some((*rank, *incarnation)),
                _ => None,
            })
            .collect();
        assert_eq!(left, [(2, 12), (3, 13)]);
        let joined: Vec<(usize, u64)> = events
            .iter()
            .filter_map(|e| match e {
                MemberEvent::Joined { rank, incarnation } => Some((*rank, *incarnation)),
                _ => None,
            })
            .collect();
        assert_eq!(joined, [(2, 20)]);
        assert!(table.values().all(|k| k.told));
    }
}
