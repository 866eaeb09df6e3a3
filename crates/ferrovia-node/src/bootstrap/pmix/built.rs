//! The PMIx meeting (see `bootstrap::pmix`).

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::time::Duration;

use ferrovia_pmix::{Client, PmixError};

use crate::bootstrap::token;
use crate::bootstrap::wire::PROTOCOL_VERSION;
use crate::error::{BootstrapError, NodeError};

/// Keys every rank puts (under its own name: PMIx keeps one set per rank).
const VERSION_KEY: &str = "ferrovia.version";
const TOKEN_KEY: &str = "ferrovia.token";

fn blob_key(peer: usize) -> String {
    format!("ferrovia.blob.{peer}")
}

/// This process as a PMIx client, meeting the job's other ranks.
pub(crate) struct PmixMeeting {
    client: Client,
    rank: usize,
    n: usize,
    all_local: bool,
    timeout: Duration,
}

impl PmixMeeting {
    /// Connects to the launcher's PMIx server and learns the rank and the
    /// job's size; every fence waits at most `timeout`.
    pub(crate) fn start(timeout: Duration) -> Result<PmixMeeting, NodeError> {
        let client = Client::init_within(timeout).map_err(from_pmix)?;
        let n = client.job_size().map_err(from_pmix)? as usize;
        let local = client.local_size().map_err(from_pmix)? as usize;
        let rank = client.rank() as usize;
        if rank >= n {
            return Err(BootstrapError::RankOutOfRange {
                rank,
                world_size: n,
            }
            .into());
        }
        tracing::debug!(
            "pmix: rank {rank} of {n} in namespace {} ({local} on this host)",
            client.namespace()
        );
        Ok(PmixMeeting {
            client,
            rank,
            n,
            all_local: local == n,
            timeout,
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    pub(crate) fn world_size(&self) -> usize {
        self.n
    }

    pub(crate) fn control_ip(&self) -> Result<IpAddr, NodeError> {
        Ok(control_ip(self.all_local)?)
    }

    /// Puts `blobs[j]` for each rank `j` (and, at rank 0, the job's token:
    /// `token`, or a random one), fences collecting data, and reads what
    /// every rank put for this one: (blobs, the job's token).
    pub(crate) fn exchange(
        &mut self,
        token: Option<&str>,
        blobs: Vec<Vec<u8>>,
    ) -> Result<(Vec<Vec<u8>>, String), NodeError> {
        let c = &self.client;
        c.put(VERSION_KEY, &PROTOCOL_VERSION.to_le_bytes())
            .map_err(from_pmix)?;
        if self.rank == 0 {
            let made = match token {
                Some(t) => t.to_owned(),
                None => token::random()?,
            };
            c.put(TOKEN_KEY, made.as_bytes()).map_err(from_pmix)?;
        }
        for (j, blob) in blobs.iter().enumerate() {
            c.put(&blob_key(j), blob).map_err(from_pmix)?;
        }
        c.commit().map_err(from_pmix)?;
        c.fence(true, self.timeout).map_err(from_pmix)?;
        let mut theirs = Vec::with_capacity(self.n);
        for j in 0..self.n {
            let v = c.get(j as u32, VERSION_KEY).map_err(from_pmix)?;
            let v = u16::from_le_bytes(v.try_into().unwrap_or([0, 0]));
            if v != PROTOCOL_VERSION {
                return Err(BootstrapError::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: v,
                }
                .into());
            }
            theirs.push(c.get(j as u32, &blob_key(self.rank)).map_err(from_pmix)?);
        }
        let token = String::from_utf8(c.get(0, TOKEN_KEY).map_err(from_pmix)?)
            .map_err(|_| BootstrapError::Protocol("rank 0's job token is not UTF-8".into()))?;
        token::check("the job token rank 0 put in PMIx", &token)?;
        Ok((theirs, token))
    }

    /// The ready round: a fence without data, which no rank leaves before
    /// every rank connected.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        self.client.fence(false, self.timeout).map_err(from_pmix)
    }
}

fn from_pmix(e: PmixError) -> NodeError {
    match e {
        PmixError::Load { library, reason } => {
            BootstrapError::PmixUnavailable { library, reason }.into()
        }
        PmixError::TimedOut { call, after } => BootstrapError::TimedOut {
            what: match call {
                "PMIx_Init" => "the local PMIx server to answer (PMIx_Init)".to_owned(),
                _ => format!("every rank to enter the PMIx fence ({call})"),
            },
            after,
        }
        .into(),
        PmixError::Call { call, status, text } => BootstrapError::Pmix {
            call,
            status,
            reason: text,
        }
        .into(),
        other => BootstrapError::Protocol(format!("PMIx: {other}")).into(),
    }
}

/// Where this rank's control port listens under PMIx, which names no
/// meeting place to route toward: `FERROVIA_CONTROL_ADDR` when set; on
/// loopback when every rank of the job runs on this host (as the
/// rendezvous keeps a one-host job there); else this host's own address
/// (its name, resolved).
fn control_ip(all_local: bool) -> Result<IpAddr, BootstrapError> {
    if let Ok(v) = std::env::var("FERROVIA_CONTROL_ADDR") {
        return v.trim().parse().map_err(|e: std::net::AddrParseError| {
            BootstrapError::MalformedVar {
                name: "FERROVIA_CONTROL_ADDR".into(),
                value: v.clone(),
                reason: e.to_string(),
            }
        });
    }
    if all_local {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    (name.trim(), 0)
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .map(|a| a.ip())
        .find(|ip| !ip.is_loopback())
        .ok_or(BootstrapError::MissingVar {
            name: "FERROVIA_CONTROL_ADDR",
            hint: "the job spans hosts and this host's name resolves to no address but loopback: set it to this host's address its peers reach",
        })
}
