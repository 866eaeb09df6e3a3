//! Joining a store-backed job: the job's record (made by its first
//! member), claiming a rank, publishing this rank's links, and the
//! initial meeting. A process that finds the job started is a
//! replacement: it connects to the survivors through the node's control
//! path afterwards (`Node::rejoin`).

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::live::{Health, Membership, keep_alive};
use super::store::{JobRecord, MemberRecord, MemberState, Store, rank_key, rank_of};
use crate::bootstrap::token;
use crate::bootstrap::wire::PROTOCOL_VERSION;
use crate::error::{BootstrapError, NodeError};
use crate::membership::StoreConfig;

/// A rank between its claim and the end of the meeting.
pub(crate) struct Joining {
    /// Taken by `ready` (a `Joining` dropped holding it gives its lease
    /// back).
    store: Option<Store>,
    pub(super) rank: usize,
    pub(super) n: usize,
    pub(super) token: String,
    pub(super) lease: i64,
    pub(super) job_lease: i64,
    pub(super) incarnation: u64,
    pub(super) replacement: bool,
    pub(super) incarnations: Vec<u64>,
    pub(super) health: Health,
    deadline: Instant,
    began: Instant,
}

impl Joining {
    /// Connects to the store, finds or makes the job's record, claims
    /// `rank` (waiting up to the claim wait for a holder to go) and starts
    /// keeping this member's lease alive. `token` is the job token to
    /// make the job with, when this is its first member (else a random
    /// one); a member whose token or world size differ from the job's
    /// fails.
    pub(crate) fn start(
        cfg: &StoreConfig,
        rank: usize,
        n: usize,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<Joining, NodeError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        let store = Store::connect(cfg)?;
        // In whole seconds, as etcd takes it (at least 1).
        let ttl = (cfg.lease_ttl.as_millis().div_ceil(1000) as i64).max(1);
        let grant = |what: &str| {
            store
                .call(what, |mut c| async move { c.lease_grant(ttl, None).await })
                .map(|g| g.id())
        };
        let job_lease = grant("a lease for the job")?;
        let made = JobRecord {
            version: PROTOCOL_VERSION,
            world_size: n as u32,
            token: match token {
                Some(t) => t.to_owned(),
                None => token::random()?,
            },
            job_lease,
        };
        let key = store.key("job");
        let value = postcard::to_allocvec(&made).map_err(protocol)?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(etcd_client::PutOptions::new().with_lease(job_lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let r = store.call("the job's record", |mut c| async move { c.txn(txn).await })?;
        let job = if r.succeeded() {
            made
        } else {
            // Another member made the job first: ours goes.
            let _ = store.call("a lease revocation", |mut c| async move {
                c.lease_revoke(job_lease).await
            });
            let theirs = first_kv(&r.op_responses())
                .ok_or_else(|| BootstrapError::Protocol("the job's record vanished".into()))?;
            postcard::from_bytes::<JobRecord>(&theirs).map_err(protocol)?
        };
        if job.version != PROTOCOL_VERSION {
            return Err(BootstrapError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: job.version,
            }
            .into());
        }
        // Any client of the store may have written the record: its token
        // must be one a knock can carry.
        token::check("the job token in the store", &job.token)?;
        if job.world_size as usize != n {
            return Err(mismatch("world size", n, job.world_size));
        }
        if let Some(t) = token
            && t != job.token
        {
            return Err(mismatch("token", "FERROVIA_JOB_TOKEN", "another token"));
        }
        let lease = grant("a lease for this member")?;
        let health = Health::new();
        store.rt.spawn(keep_alive(
            store.client.clone(),
            [lease, job.job_lease],
            cfg.lease_ttl,
            health.clone(),
        ));
        let mut joining = Joining {
            store: Some(store),
            rank,
            n,
            token: job.token,
            lease,
            job_lease: job.job_lease,
            incarnation: 0,
            replacement: false,
            incarnations: vec![0; n],
            health,
            deadline,
            began: Instant::now(),
        };
        joining.incarnation = joining.claim()?;
        let started = joining.store().key("started");
        joining.replacement = joining
            .store()
            .call("the job's start mark", |mut c| async move {
                c.get(started, None).await
            })?
            .count()
            > 0;
        tracing::info!(
            "store: rank {rank} of {n} claimed (incarnation {}){}",
            joining.incarnation,
            if joining.replacement {
                ", replacing a member of a running job"
            } else {
                ""
            }
        );
        Ok(joining)
    }

    /// Claims this rank: its member key, created only where none exists.
    /// A held rank is retried until the claim wait ends.
    fn claim(&self) -> Result<u64, NodeError> {
        let key = self
            .store()
            .key(&format!("members/{}", rank_key(self.rank)));
        let me = MemberRecord {
            state: MemberState::Claimed,
            holder: holder(),
        };
        let value = postcard::to_allocvec(&me).map_err(protocol)?;
        let started = Instant::now();
        loop {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(etcd_client::PutOptions::new().with_lease(self.lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let r =
                self.store().call(
                    "a claim of this rank",
                    |mut c| async move { c.txn(txn).await },
                )?;
            if r.succeeded() {
                return Ok(r.header().map_or(0, |h| h.revision()) as u64);
            }
            let waited = started.elapsed();
            if waited >= self.store().cfg.claim_wait {
                let holder = first_kv(&r.op_responses())
                    .and_then(|v| postcard::from_bytes::<MemberRecord>(&v).ok())
                    .map_or_else(|| "unknown".to_owned(), |m| m.holder);
                return Err(BootstrapError::RankClaimed {
                    rank: self.rank,
                    holder,
                    waited,
                }
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(super) fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("a Joining holds its store until `ready` takes it")
    }

    pub(crate) fn who(&self) -> (usize, usize) {
        (self.rank, self.n)
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.store().cfg.endpoint
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Publishes `blobs[j]` for every rank `j` and waits for every other
    /// member to be there: all `n` published at a job's start; for a
    /// replacement, the `n - 1` others running. Returns what each member
    /// published for this rank.
    pub(crate) fn exchange(&mut self, blobs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, NodeError> {
        let me = rank_key(self.rank);
        for (j, blob) in blobs.into_iter().enumerate() {
            let key = self.store().key(&format!("links/{}/{me}", rank_key(j)));
            self.store().put(key, blob, self.lease)?;
        }
        self.set_state(MemberState::Published)?;
        let (n, rank, replacement) = (self.n, self.rank, self.replacement);
        let members = self.store().key("members/");
        let mut last = vec![0u64; n];
        let found = self.store().wait_until(&members, self.deadline, |kvs| {
            let mut inc = vec![0u64; n];
            for kv in kvs {
                let (Some(r), Some(m)) = (rank_of(kv), MemberRecord::decode(kv)) else {
                    continue;
                };
                let ready = if replacement && r != rank {
                    m.state == MemberState::Running
                } else {
                    matches!(m.state, MemberState::Published | MemberState::Running)
                };
                if r < n && ready {
                    inc[r] = kv.create_revision() as u64;
                }
            }
            let done = inc.iter().all(|&i| i != 0);
            last.clone_from(&inc);
            done.then_some(inc)
        })?;
        let Some(incarnations) = found else {
            let missing = (0..n).filter(|&r| last[r] == 0).collect();
            let what = if replacement {
                "ran (a replacement waits for every other rank's member to run)"
            } else {
                "published its links"
            };
            return Err(self.missing(missing, what));
        };
        self.incarnations = incarnations;
        let links = self.store().key(&format!("links/{me}/"));
        let got = self
            .store()
            .call("a read of this rank's links", |mut c| async move {
                c.get(links, Some(etcd_client::GetOptions::new().with_prefix()))
                    .await
            })?;
        let mut theirs = vec![None; self.n];
        for kv in got.kvs() {
            if let Some(r) = rank_of(kv).filter(|&r| r < n) {
                theirs[r] = Some(kv.value().to_vec());
            }
        }
        theirs
            .into_iter()
            .enumerate()
            .map(|(j, b)| {
                b.ok_or_else(|| {
                    BootstrapError::Protocol(format!("rank {j} published no link for rank {rank}"))
                        .into()
                })
            })
            .collect()
    }

    /// The ready round of a job's start (every member connected, marked
    /// in the store), then the job is marked started; a replacement has
    /// none (it connects to the survivors next). Hands the member on.
    pub(crate) fn ready(mut self) -> Result<Membership, NodeError> {
        if !self.replacement {
            let key = self.store().key(&format!("ready/{}", rank_key(self.rank)));
            self.store().put(key, Vec::new(), self.lease)?;
            let ready = self.store().key("ready/");
            let n = self.n;
            let mut have = Vec::new();
            let found = self.store().wait_until(&ready, self.deadline, |kvs| {
                have = kvs.iter().filter_map(rank_of).collect();
                (kvs.len() >= n).then_some(())
            })?;
            if found.is_none() {
                let missing = (0..n).filter(|r| !have.contains(r)).collect();
                return Err(self.missing(missing, "reported ready"));
            }
            let started = self.store().key("started");
            let lease = self.job_lease;
            self.store().put(started, Vec::new(), lease)?;
            self.set_state(MemberState::Running)?;
        }
        let store = self.store.take().expect("ready takes the store once");
        Membership::start(store, &self)
    }

    pub(super) fn set_state(&self, state: MemberState) -> Result<(), NodeError> {
        let key = self
            .store()
            .key(&format!("members/{}", rank_key(self.rank)));
        let value = postcard::to_allocvec(&MemberRecord {
            state,
            holder: holder(),
        })
        .map_err(protocol)?;
        self.store().put(key, value, self.lease)
    }

    /// The error of a wait for every member that ran out: which ranks.
    fn missing(&self, missing: Vec<usize>, what: &str) -> NodeError {
        tracing::warn!("store: rank(s) {missing:?} never {what}");
        BootstrapError::MissingRanks {
            missing,
            after: self.began.elapsed(),
        }
        .into()
    }
}

impl Drop for Joining {
    fn drop(&mut self) {
        if let Some(store) = &self.store {
            // A failed join gives its rank back at once.
            let lease = self.lease;
            let _ = store.call_within(
                "a lease revocation",
                Duration::from_secs(1),
                |mut c| async move { c.lease_revoke(lease).await },
            );
        }
    }
}

/// The value of the first key a transaction's `or_else` read.
fn first_kv(ops: &[TxnOpResponse]) -> Option<Vec<u8>> {
    ops.iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    })
}

/// Who this process is, for a rank's record: host and process id.
pub(super) fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{} pid {}", host.trim(), std::process::id())
}

fn mismatch(what: &'static str, ours: impl ToString, theirs: impl ToString) -> NodeError {
    BootstrapError::JobMismatch {
        what,
        ours: ours.to_string(),
        theirs: theirs.to_string(),
    }
    .into()
}

pub(super) fn protocol(e: postcard::Error) -> NodeError {
    BootstrapError::Protocol(format!("a store record: {e}")).into()
}
