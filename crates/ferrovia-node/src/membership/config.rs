//! Where a job's store is and how its members hold their place:
//! `FERROVIA_STORE=etcd://HOST:PORT/JOB`, parsed strictly, and the lease
//! and wait settings.

use std::time::Duration;

use crate::bootstrap::address;
use crate::error::BootstrapError;

/// etcd's client port when the URL names none.
pub const ETCD_PORT: u16 = 2379;

/// A store-backed job: which etcd, which job in it, and how members hold
/// their place. [`StoreConfig::parse`] reads the URL form
/// (`etcd://127.0.0.1:2379/jobname`); the setters change the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// `host:port` of the etcd client endpoint.
    pub endpoint: String,
    /// The job's name: its keys live under `/ferrovia/<job>/`.
    pub job: String,
    /// A member's lease: a member that stops renewing it (dead, or cut
    /// off from the store) drops out this long after its last renewal.
    /// Default 5 s; etcd rounds it up to its own minimum (1.5 s with its
    /// default election timeout).
    pub lease_ttl: Duration,
    /// How long a process waits for a rank another process holds to come
    /// free (the holder's lease to expire) before it fails with
    /// [`BootstrapError::RankClaimed`]. Default 0: a rank held is an error
    /// at once.
    pub claim_wait: Duration,
    /// The bound on each call to the store (default 3 s): past it the
    /// call fails with [`BootstrapError::StoreUnavailable`].
    pub call_timeout: Duration,
}

impl StoreConfig {
    /// Parses `etcd://HOST[:PORT]/JOB` (from the variable or argument
    /// `name`, which errors name). The job is 1 to 128 characters of
    /// letters, digits, `-`, `_` and `.`.
    pub fn parse(name: &str, url: &str) -> Result<StoreConfig, BootstrapError> {
        let bad = |reason: String| BootstrapError::MalformedVar {
            name: name.to_owned(),
            value: url.to_owned(),
            reason,
        };
        let rest = url
            .trim()
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("expected etcd://HOST:PORT/JOB (etcd is the only store)".into()))?;
        let (host, job) = rest
            .split_once('/')
            .ok_or_else(|| bad("no job name: expected etcd://HOST:PORT/JOB".into()))?;
        let hp = address::parse(name, host, ETCD_PORT)?;
        if hp.port == 0 {
            return Err(bad("etcd's port cannot be 0".into()));
        }
        check_job(job).map_err(|r| bad(r.into()))?;
        Ok(StoreConfig {
            endpoint: hp.to_string(),
            job: job.to_owned(),
            lease_ttl: Duration::from_secs(5),
            claim_wait: Duration::ZERO,
            call_timeout: Duration::from_secs(3),
        })
    }

    /// The members' lease (see [`StoreConfig::lease_ttl`]).
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How long to wait for a held rank to come free (see
    /// [`StoreConfig::claim_wait`]).
    #[must_use]
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        self.claim_wait = wait;
        self
    }

    /// The bound on each call to the store.
    #[must_use]
    pub fn call_timeout(mut self, t: Duration) -> Self {
        self.call_timeout = t;
        self
    }

    /// Reads the settings' variables: `FERROVIA_STORE_TTL_MS`,
    /// `FERROVIA_STORE_CLAIM_WAIT_MS`, `FERROVIA_STORE_TIMEOUT_MS`.
    pub(crate) fn with_vars(
        mut self,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<StoreConfig, BootstrapError> {
        let ms = |name: &str| -> Result<Option<Duration>, BootstrapError> {
            get(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|e| BootstrapError::MalformedVar {
                            name: name.to_owned(),
                            value: v.clone(),
                            reason: e.to_string(),
                        })
                })
                .transpose()
        };
        if let Some(t) = ms("FERROVIA_STORE_TTL_MS")? {
            self.lease_ttl = t;
        }
        if let Some(t) = ms("FERROVIA_STORE_CLAIM_WAIT_MS")? {
            self.claim_wait = t;
        }
        if let Some(t) = ms("FERROVIA_STORE_TIMEOUT_MS")? {
            self.call_timeout = t;
        }
        Ok(self)
    }
}

fn check_job(job: &str) -> Result<(), &'static str> {
    if job.is_empty() || job.len() > 128 {
        return Err("the job name has 1 to 128 characters");
    }
    if !job
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err("the job name holds letters, digits, '-', '_' and '.' only");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_strictly_naming_the_variable() {
        let c = StoreConfig::parse("FERROVIA_STORE", "etcd://127.0.0.1:2379/job-1").unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.job.as_str()),
            ("127.0.0.1:2379", "job-1")
        );
        let c = StoreConfig::parse("S", "etcd://[::1]/j").unwrap();
        assert_eq!(c.endpoint, "[::1]:2379");
        for bad in [
            "http://127.0.0.1:2379/j",
            "etcd://127.0.0.1:2379",
            "etcd://127.0.0.1:2379/",
            "etcd://127.0.0.1:x/j",
            "etcd://127.0.0.1:0/j",
            "etcd://h/a/b",
            "etcd://h/a b",
        ] {
            match StoreConfig::parse("FERROVIA_STORE", bad) {
                Err(BootstrapError::MalformedVar { name, .. }) => {
                    assert_eq!(name, "FERROVIA_STORE", "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn settings_come_from_their_variables() {
        let c = StoreConfig::parse("S", "etcd://h/j").unwrap();
        assert_eq!(c.lease_ttl, Duration::from_secs(5));
        let vars = |k: &str| match k {
            "FERROVIA_STORE_TTL_MS" => Some("1500".to_owned()),
            "FERROVIA_STORE_CLAIM_WAIT_MS" => Some("7000".to_owned()),
            _ => None,
        };
        let c = c.with_vars(&vars).unwrap();
        assert_eq!(
            (c.lease_ttl, c.claim_wait),
            (Duration::from_millis(1500), Duration::from_secs(7))
        );
        let bad = |k: &str| (k == "FERROVIA_STORE_TIMEOUT_MS").then(|| "soon".to_owned());
        assert!(matches!(
            StoreConfig::parse("S", "etcd://h/j")
                .unwrap()
                .with_vars(&bad),
            Err(BootstrapError::MalformedVar { .. })
        ));
    }
}
