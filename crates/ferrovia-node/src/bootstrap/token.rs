//! The job token every rendezvous connection must show: where it comes
//! from, and a random one for jobs this library starts itself. There is no
//! public default: a job with neither a token nor a launcher's job identity
//! refuses to start rather than admit anyone who knows a constant.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bootstrap::wire::MAX_TOKEN;
use crate::error::BootstrapError;

/// Where a job's token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenSource {
    /// `FERROVIA_JOB_TOKEN` or [`NodeBuilder::token`](crate::NodeBuilder::token):
    /// chosen by whoever started the job, a secret if they kept it one (a
    /// local launch makes a random one).
    Explicit,
    /// Derived from the launcher's identity of the job (the variable
    /// named): the ranks of one job agree on it and other jobs differ, but
    /// anyone who can read the job's identity can join.
    Launcher(&'static str),
    /// Made by the bootstrap engine and shared through it: rank 0's random
    /// token through PMIx, or the first member's through the store. As
    /// secret as the engine: the resource manager authenticates PMIx; the
    /// store's own access control guards etcd.
    Engine,
}

/// Launcher variables naming the job, tried in order when
/// `FERROVIA_JOB_TOKEN` is not set.
pub(crate) const JOB_IDS: [&str; 4] = [
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
];

/// The token of a job: `FERROVIA_JOB_TOKEN`, else derived from the first
/// launcher job identity set.
pub(crate) fn from_env(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, TokenSource), BootstrapError> {
    if let Some(t) = get("FERROVIA_JOB_TOKEN") {
        check("FERROVIA_JOB_TOKEN", &t)?;
        return Ok((t, TokenSource::Explicit));
    }
    for name in JOB_IDS {
        if let Some(v) = get(name) {
            let token = format!("{name}={v}");
            check(name, &token)?;
            return Ok((token, TokenSource::Launcher(name)));
        }
    }
    Err(missing())
}

/// The error of a job without a token.
pub(crate) fn missing() -> BootstrapError {
    BootstrapError::MissingVar {
        name: "FERROVIA_JOB_TOKEN",
        hint: "no launcher job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, PMIX_NAMESPACE) to derive one from: set it to the same secret on every rank, e.g. $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
    }
}

/// Refuses an empty token and one too long for the rendezvous' first
/// message.
pub(crate) fn check(name: &str, token: &str) -> Result<(), BootstrapError> {
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(BootstrapError::MalformedVar {
            name: name.to_owned(),
            value: crate::bootstrap::wire::truncate(token, 64).to_owned(),
            reason: format!("a job token has 1 to {MAX_TOKEN} bytes"),
        });
    }
    Ok(())
}

/// 128 random bits in hex, from the kernel's generator. Read from
/// /dev/urandom rather than through a crate: ferrovia runs on Linux only
/// (RDMA, UCX), where it always exists.
pub(crate) fn random() -> Result<String, BootstrapError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| BootstrapError::Io {
            what: "read /dev/urandom for a job token".into(),
            source: e,
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Once per process: a derived token keeps other jobs out, not people, and
/// says so when rank 0 can be reached from other hosts.
pub(crate) fn warn_if_public(source: TokenSource, listening: std::net::SocketAddr) {
    if let TokenSource::Launcher(name) = source
        && !listening.ip().is_loopback()
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            "rendezvous: listening on {listening} with a job token derived from {name}, which is not a secret: anyone who can reach this port and read {name} can join; set FERROVIA_JOB_TOKEN to a secret to keep them out"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn an_explicit_token_wins_then_the_launchers_job_id() {
        let e = [("FERROVIA_JOB_TOKEN", "s3cret"), ("SLURM_JOB_ID", "7")];
        assert_eq!(
            from_env(&env(&e)).unwrap(),
            ("s3cret".into(), TokenSource::Explicit)
        );
        let e = [("SLURM_JOB_ID", "7")];
        assert_eq!(
            from_env(&env(&e)).unwrap(),
            (
                "SLURM_JOB_ID=7".into(),
                TokenSource::Launcher("SLURM_JOB_ID")
            )
        );
    }

    #[test]
    fn no_token_and_no_job_id_is_an_error_not_a_default() {
        match from_env(&env(&[])) {
            Err(BootstrapError::MissingVar { name, .. }) => assert_eq!(name, "FERROVIA_JOB_TOKEN"),
            other => panic!("{other:?}"),
        }
        let long = "x".repeat(MAX_TOKEN + 1);
        let e = [("FERROVIA_JOB_TOKEN", long.as_str())];
        assert!(matches!(
            from_env(&env(&e)),
            Err(BootstrapError::MalformedVar { .. })
        ));
    }

    #[test]
    fn random_tokens_are_128_bits_and_differ() {
        let (a, b) = (random().unwrap(), random().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
