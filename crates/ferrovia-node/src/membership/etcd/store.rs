//! The job's etcd: a client on a tokio runtime of the node's own (one
//! worker thread, which also runs the lease keep-alive and the watch), the
//! job's key space, and every call bounded by the configured timeout.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, KeyValue, PutOptions, WatchOptions};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

use crate::error::{BootstrapError, NodeError};
use crate::membership::StoreConfig;

/// The job's record, written once by its first member under the job's
/// lease (which every member keeps alive, so it lasts while any does).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JobRecord {
    pub(super) version: u16,
    pub(super) world_size: u32,
    pub(super) token: String,
    pub(super) job_lease: i64,
}

/// Where a member is in its life (its `members/RANK` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(super) enum MemberState {
    /// It holds the rank.
    Claimed,
    /// Its links for every peer are in the store.
    Published,
    /// It is connected to every member.
    Running,
    /// It is going, of its own accord.
    Leaving,
}

/// A member's record: its state and who it is, for error messages.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct MemberRecord {
    pub(super) state: MemberState,
    pub(super) holder: String,
}

impl MemberRecord {
    pub(super) fn decode(kv: &KeyValue) -> Option<MemberRecord> {
        postcard::from_bytes(kv.value()).ok()
    }
}

/// The store: its runtime, its client, the job's prefix.
pub(crate) struct Store {
    pub(super) rt: Runtime,
    pub(super) client: Client,
    pub(super) cfg: StoreConfig,
    prefix: String,
}

impl Store {
    /// Connects to the configured etcd; fails with
    /// [`BootstrapError::StoreUnavailable`] within the call timeout when
    /// it does not answer.
    pub(super) fn connect(cfg: &StoreConfig) -> Result<Store, NodeError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ferrovia-store")
            .enable_all()
            .build()
            .map_err(|e| BootstrapError::Io {
                what: "start the store's runtime".into(),
                source: e,
            })?;
        let options = ConnectOptions::new()
            .with_connect_timeout(cfg.call_timeout)
            .with_timeout(cfg.call_timeout)
            .with_keep_alive(Duration::from_secs(1), cfg.call_timeout);
        let endpoint = format!("http://{}", cfg.endpoint);
        let unavailable = |what: &str, after, reason: String| BootstrapError::StoreUnavailable {
            endpoint: cfg.endpoint.clone(),
            what: what.to_owned(),
            after,
            reason,
        };
        let started = Instant::now();
        let client = rt
            .block_on(async {
                tokio::time::timeout(cfg.call_timeout, Client::connect([endpoint], Some(options)))
                    .await
            })
            .map_err(|_| unavailable("connect", started.elapsed(), "no answer".into()))?
            .map_err(|e| unavailable("connect", started.elapsed(), e.to_string()))?;
        let store = Store {
            rt,
            client,
            cfg: cfg.clone(),
            prefix: format!("/ferrovia/{}/", cfg.job),
        };
        // A lazy channel connects on first use: ask something now, so an
        // unreachable store is an error here, naming it.
        store.call("a status request", |mut c| async move {
            c.get(
                "/ferrovia/",
                Some(GetOptions::new().with_keys_only().with_limit(1)),
            )
            .await
        })?;
        Ok(store)
    }

    /// The key `rest` of this job.
    pub(super) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// Runs one call on a clone of the client within the call timeout.
    pub(super) fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, NodeError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_within(what, self.cfg.call_timeout, f)
    }

    /// [`Store::call`] with a bound of its own.
    pub(super) fn call_within<T, F, Fut>(
        &self,
        what: &str,
        bound: Duration,
        f: F,
    ) -> Result<T, NodeError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let started = Instant::now();
        let fut = f(self.client.clone());
        match self
            .rt
            .block_on(async { tokio::time::timeout(bound, fut).await })
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(what, started.elapsed(), e.to_string())),
            Err(_) => Err(self.unavailable(what, started.elapsed(), "no answer".into())),
        }
    }

    pub(super) fn unavailable(&self, what: &str, after: Duration, reason: String) -> NodeError {
        BootstrapError::StoreUnavailable {
            endpoint: self.cfg.endpoint.clone(),
            what: what.to_owned(),
            after,
            reason,
        }
        .into()
    }

    /// Puts `value` at `key` under `lease`.
    pub(super) fn put(&self, key: String, value: Vec<u8>, lease: i64) -> Result<(), NodeError> {
        let what = format!("a put of {key}");
        self.call(&what, |mut c| async move {
            c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                .await
        })
        .map(|_| ())
    }

    /// Waits until `done` holds of the keys under `prefix` (key → value),
    /// re-reading them as they change; at most until `deadline`, else
    /// `None`. A lost store is an error, not a wait.
    pub(super) fn wait_until<T>(
        &self,
        prefix: &str,
        deadline: Instant,
        mut done: impl FnMut(&[KeyValue]) -> Option<T>,
    ) -> Result<Option<T>, NodeError> {
        let what = format!("a read of {prefix}");
        let got = self.call(&what, |mut c| {
            let p = prefix.to_owned();
            async move { c.get(p, Some(GetOptions::new().with_prefix())).await }
        })?;
        let mut kvs: Vec<KeyValue> = got.kvs().to_vec();
        if let Some(t) = done(&kvs) {
            return Ok(Some(t));
        }
        let from = got.header().map_or(0, |h| h.revision()) + 1;
        let what = format!("a watch of {prefix}");
        let mut stream = self.call(&what, |mut c| {
            let p = prefix.to_owned();
            async move {
                c.watch(
                    p,
                    Some(WatchOptions::new().with_prefix().with_start_revision(from)),
                )
                .await
            }
        })?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let started = Instant::now();
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(left, stream.message()).await });
            let resp = match next {
                Err(_) => return Ok(None),
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) => {
                    return Err(self.unavailable(&what, started.elapsed(), "watch ended".into()));
                }
                Ok(Err(e)) => {
                    return Err(self.unavailable(&what, started.elapsed(), e.to_string()));
                }
            };
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                kvs.retain(|k| k.key() != kv.key());
                if ev.event_type() == etcd_client::EventType::Put {
                    kvs.push(kv.clone());
                }
            }
            if let Some(t) = done(&kvs) {
                return Ok(Some(t));
            }
        }
    }
}

/// The rank a key `.../NAME/000012` names (its last path part, written
/// by [`rank_key`]): any client of the store may put keys, and `+1` or
/// `1` must not count as rank 1.
pub(super) fn rank_of(kv: &KeyValue) -> Option<usize> {
    rank_in(std::str::from_utf8(kv.key()).ok()?)
}

fn rank_in(key: &str) -> Option<usize> {
    let part = key.rsplit('/').next()?;
    let rank = part.parse().ok()?;
    (rank_key(rank) == part).then_some(rank)
}

/// A rank as a key part (fixed width, so keys sort by rank).
pub(super) fn rank_key(rank: usize) -> String {
    format!("{rank:06}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_key_this_code_writes_names_a_rank() {
        assert_eq!(rank_in("ferrovia/job/members/000012"), Some(12));
        assert_eq!(rank_in(&format!("x/{}", rank_key(3))), Some(3));
        for stray in ["x/+1", "x/1", "x/0000001", "x/00001a", "x/", "x/-00001"] {
            assert_eq!(rank_in(stray), None, "{stray}");
        }
    }
}
