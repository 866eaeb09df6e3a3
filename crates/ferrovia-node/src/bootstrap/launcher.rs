//! Reading rank, world size and rendezvous from the launcher people use:
//! explicit `FERROVIA_*` variables, torchrun, Slurm, Open MPI / PMIx, or a
//! config file listing the hosts.

use std::path::PathBuf;

use crate::bootstrap::address;
use crate::bootstrap::engine_vars;
use crate::bootstrap::token::{self, TokenSource};
use crate::error::BootstrapError;
use crate::membership::StoreConfig;

/// Port of the rendezvous when none is given (torchrun's default).
pub const DEFAULT_PORT: u16 = 29500;

/// Which launcher the configuration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// `FERROVIA_RANK`, `FERROVIA_WORLD_SIZE`, `FERROVIA_RENDEZVOUS`.
    Explicit,
    /// A host list file (`FERROVIA_HOSTFILE`).
    HostFile,
    /// torchrun: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
    Torchrun,
    /// Slurm: `SLURM_PROCID`, `SLURM_NTASKS`.
    Slurm,
    /// Open MPI / PMIx: `OMPI_COMM_WORLD_RANK` or `PMIX_RANK`,
    /// `OMPI_COMM_WORLD_SIZE`.
    OpenMpi,
}

/// How the ranks of a job meet (see the README's "Bootstrap engines").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// Rank 0's TCP rendezvous at [`LaunchInfo::rendezvous`]: the default,
    /// and what a local launch uses.
    Rendezvous,
    /// PMIx, the launcher's own key-value exchange (`mpirun`, `srun
    /// --mpi=pmix`): no rank 0 to reach, no token to guess.
    Pmix,
    /// A store (etcd): a rendezvous and a membership whose members may die
    /// and be replaced.
    Store(StoreConfig),
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Engine::Rendezvous => f.write_str("rank 0's rendezvous"),
            Engine::Pmix => f.write_str("PMIx"),
            Engine::Store(c) => write!(f, "etcd at {} (job {})", c.endpoint, c.job),
        }
    }
}

/// Who this process is in the job, and where rank 0 listens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchInfo {
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// `host:port` of rank 0's rendezvous; with a store, the store's
    /// endpoint (the control port listens on the interface toward it);
    /// empty under PMIx.
    pub rendezvous: String,
    /// The job token every connection must present; empty when the
    /// engine makes it ([`TokenSource::Engine`]).
    pub token: String,
    /// Where the token came from.
    pub token_source: TokenSource,
    /// Where this came from.
    pub launcher: Launcher,
    /// How the ranks meet.
    pub engine: Engine,
    /// `FERROVIA_RENDEZVOUS_PORT_FILE`: where rank 0 writes the port it
    /// listens on (for a launcher that gave it port 0, to pass the port the
    /// OS chose on to the other ranks).
    pub port_file: Option<PathBuf>,
}

pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(crate) fn get(env: Env<'_>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

pub(crate) fn need(
    env: Env<'_>,
    name: &'static str,
    hint: &'static str,
) -> Result<String, BootstrapError> {
    get(env, name).ok_or(BootstrapError::MissingVar { name, hint })
}

pub(crate) fn number<T: std::str::FromStr<Err = std::num::ParseIntError>>(
    name: &str,
    value: &str,
) -> Result<T, BootstrapError> {
    value
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| BootstrapError::MalformedVar {
            name: name.to_owned(),
            value: value.to_owned(),
            reason: e.to_string(),
        })
}

/// `addr` (from variable `name`) checked and written as `host:port`.
fn with_port(name: &str, addr: &str) -> Result<String, BootstrapError> {
    Ok(address::parse(name, addr, DEFAULT_PORT)?.to_string())
}

/// The rendezvous for launchers that do not provide one.
fn rendezvous_var(env: Env<'_>) -> Result<String, BootstrapError> {
    let addr = need(
        env,
        "FERROVIA_RENDEZVOUS",
        "set it to rank 0's host:port for Slurm and mpirun jobs",
    )?;
    with_port("FERROVIA_RENDEZVOUS", &addr)
}

/// Reads the launch configuration from environment variables. The
/// engine: a store when `FERROVIA_STORE` is set; PMIx when a PMIx launcher
/// started the process (`PMIX_RANK`, `PMIX_NAMESPACE`) and no rendezvous
/// is asked for (`FERROVIA_RANK`, `FERROVIA_RENDEZVOUS`, `MASTER_ADDR`);
/// else rank 0's rendezvous, its configuration tried in order: explicit
/// `FERROVIA_*`, a host file, torchrun, Slurm, Open MPI / PMIx. `env`
/// returns a variable's value (`std::env::var` in practice).
pub fn from_vars(env: Env<'_>) -> Result<LaunchInfo, BootstrapError> {
    if let Some(url) = get(env, "FERROVIA_STORE") {
        return engine_vars::store(env, &url);
    }
    if engine_vars::pmix_applies(env) {
        return engine_vars::pmix(env);
    }
    let (rank, world_size, rendezvous, launcher) = if let Some(rank) = get(env, "FERROVIA_RANK") {
        if let Some(path) = get(env, "FERROVIA_HOSTFILE") {
            let (hosts, first) = read_hostfile(&path)?;
            (
                number("FERROVIA_RANK", &rank)?,
                hosts,
                first,
                Launcher::HostFile,
            )
        } else {
            let size = need(env, "FERROVIA_WORLD_SIZE", "set it with FERROVIA_RANK")?;
            (
                number("FERROVIA_RANK", &rank)?,
                number("FERROVIA_WORLD_SIZE", &size)?,
                with_port(
                    "FERROVIA_RENDEZVOUS",
                    &need(env, "FERROVIA_RENDEZVOUS", "rank 0's host:port")?,
                )?,
                Launcher::Explicit,
            )
        }
    } else if let Some(rank) = get(env, "RANK").filter(|_| get(env, "MASTER_ADDR").is_some()) {
        let size = need(env, "WORLD_SIZE", "torchrun sets it")?;
        let addr = need(env, "MASTER_ADDR", "torchrun sets it")?;
        let port = match get(env, "MASTER_PORT") {
            Some(p) => number("MASTER_PORT", &p)?,
            None => DEFAULT_PORT,
        };
        (
            number("RANK", &rank)?,
            number("WORLD_SIZE", &size)?,
            address::parse("MASTER_ADDR", &addr, port)?.to_string(),
            Launcher::Torchrun,
        )
    } else if let Some(rank) = get(env, "SLURM_PROCID") {
        let size = need(env, "SLURM_NTASKS", "srun sets it")?;
        (
            number("SLURM_PROCID", &rank)?,
            number("SLURM_NTASKS", &size)?,
            rendezvous_var(env)?,
            Launcher::Slurm,
        )
    } else if let Some((name, rank)) = get(env, "OMPI_COMM_WORLD_RANK")
        .map(|r| ("OMPI_COMM_WORLD_RANK", r))
        .or_else(|| get(env, "PMIX_RANK").map(|r| ("PMIX_RANK", r)))
    {
        let size = need(
            env,
            "OMPI_COMM_WORLD_SIZE",
            "mpirun sets it (or set FERROVIA_WORLD_SIZE)",
        )
        .or_else(|e| get(env, "FERROVIA_WORLD_SIZE").ok_or(e))?;
        (
            number(name, &rank)?,
            number("OMPI_COMM_WORLD_SIZE", &size)?,
            rendezvous_var(env)?,
            Launcher::OpenMpi,
        )
    } else {
        return Err(BootstrapError::MissingVar {
            name: "FERROVIA_RANK",
            hint: "no launcher found: run under torchrun, srun or mpirun, or set FERROVIA_RANK, FERROVIA_WORLD_SIZE and FERROVIA_RENDEZVOUS",
        });
    };
    if world_size == 0 || rank >= world_size {
        return Err(BootstrapError::RankOutOfRange { rank, world_size });
    }
    if rank != 0 && rendezvous.ends_with(":0") {
        let name = match launcher {
            Launcher::HostFile => "FERROVIA_HOSTFILE",
            Launcher::Torchrun => "MASTER_PORT",
            _ => "FERROVIA_RENDEZVOUS",
        };
        return Err(BootstrapError::MalformedVar {
            name: name.into(),
            value: rendezvous,
            reason: format!(
                "port 0 is for rank 0 only (the OS picks its port); rank {rank} needs the port it picked"
            ),
        });
    }
    let (token, token_source) = token::from_env(&|name| get(env, name))?;
    Ok(LaunchInfo {
        rank,
        world_size,
        rendezvous,
        token,
        token_source,
        launcher,
        engine: Engine::Rendezvous,
        port_file: get(env, "FERROVIA_RENDEZVOUS_PORT_FILE").map(PathBuf::from),
    })
}

/// A host file: one host (optionally `host:port`) per line, in rank order;
/// `#` starts a comment. Returns the world size and rank 0's address.
fn read_hostfile(path: &str) -> Result<(usize, String), BootstrapError> {
    let text = std::fs::read_to_string(path).map_err(|e| BootstrapError::ConfigFile {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_hostfile(path, &text)
}

fn parse_hostfile(path: &str, text: &str) -> Result<(usize, String), BootstrapError> {
    let hosts: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    let first = hosts.first().ok_or_else(|| BootstrapError::ConfigFile {
        path: path.to_owned(),
        reason: "no hosts listed".into(),
    })?;
    Ok((hosts.len(), with_port("FERROVIA_HOSTFILE", first)?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of these variables, for `from_vars` (shared with
    /// the engine-variable tests).
    pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.clone())
    }

    #[test]
    fn torchrun() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.rendezvous.as_str(), i.launcher),
            (3, 8, "10.0.0.1:1234", Launcher::Torchrun)
        );
        assert_eq!(i.token, "TORCHELASTIC_RUN_ID=abc");
    }

    #[test]
    fn slurm_needs_a_rendezvous() {
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "77"),
        ]);
        match from_vars(&e) {
            Err(BootstrapError::MissingVar { name, .. }) => assert_eq!(name, "FERROVIA_RENDEZVOUS"),
            other => panic!("{other:?}"),
        }
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "77"),
            ("FERROVIA_RENDEZVOUS", "node01"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.rendezvous.as_str()),
            (1, 4, "node01:29500")
        );
        assert_eq!(i.token, "SLURM_JOB_ID=77");
    }

    #[test]
    fn open_mpi_and_pmix() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("FERROVIA_RENDEZVOUS", "[::1]:9000"),
            ("OMPI_MCA_ess_base_jobid", "5"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.rendezvous.as_str(), i.launcher),
            (2, 3, "[::1]:9000", Launcher::OpenMpi)
        );
        assert_eq!(
            i.token_source,
            TokenSource::Launcher("OMPI_MCA_ess_base_jobid")
        );
        let e = env(&[
            ("PMIX_RANK", "0"),
            ("FERROVIA_WORLD_SIZE", "2"),
            ("FERROVIA_RENDEZVOUS", "h:1"),
            ("PMIX_NAMESPACE", "job.7"),
        ]);
        assert_eq!(from_vars(&e).unwrap().world_size, 2);
    }

    #[test]
    fn errors_name_the_variable() {
        let e = env(&[
            ("FERROVIA_RANK", "x1"),
            ("FERROVIA_WORLD_SIZE", "2"),
            ("FERROVIA_RENDEZVOUS", "h"),
        ]);
        match from_vars(&e) {
            Err(BootstrapError::MalformedVar { name, value, .. }) => {
                assert_eq!((name.as_str(), value.as_str()), ("FERROVIA_RANK", "x1"))
            }
            other => panic!("{other:?}"),
        }
        let e = env(&[
            ("FERROVIA_RANK", "2"),
            ("FERROVIA_WORLD_SIZE", "2"),
            ("FERROVIA_RENDEZVOUS", "h"),
        ]);
        assert!(matches!(
            from_vars(&e),
            Err(BootstrapError::RankOutOfRange {
                rank: 2,
                world_size: 2
            })
        ));
        let e = env(&[("RANK", "0"), ("MASTER_ADDR", "h")]);
        assert!(matches!(
            from_vars(&e),
            Err(BootstrapError::MissingVar {
                name: "WORLD_SIZE",
                ..
            })
        ));
        let err = from_vars(&env(&[])).unwrap_err().to_string();
        assert!(
            err.contains("FERROVIA_RANK") && err.contains("torchrun"),
            "{err}"
        );
    }

    #[test]
    fn host_files() {
        let (n, first) =
            parse_hostfile("f", "# job\nnode1:7000\nnode2  # second\n\nnode3\n").unwrap();
        assert_eq!((n, first.as_str()), (3, "node1:7000"));
        assert!(matches!(
            parse_hostfile("f", "# nothing\n"),
            Err(BootstrapError::ConfigFile { .. })
        ));
    }

    fn by_hand(rendezvous: &str) -> impl Fn(&str) -> Option<String> + use<> {
        env(&[
            ("FERROVIA_RANK", "1"),
            ("FERROVIA_WORLD_SIZE", "2"),
            ("FERROVIA_RENDEZVOUS", rendezvous),
            ("FERROVIA_JOB_TOKEN", "t"),
        ])
    }

    fn refused(e: &dyn Fn(&str) -> Option<String>) -> (String, String) {
        match from_vars(e) {
            Err(BootstrapError::MalformedVar { name, reason, .. }) => (name, reason),
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn a_malformed_rendezvous_is_refused_at_once_naming_the_variable() {
        for bad in ["127.0.0.1:notaport", ":", ":29500", "h:70000", "::1", "a b"] {
            let (name, reason) = refused(&by_hand(bad));
            assert_eq!(name, "FERROVIA_RENDEZVOUS", "{bad}: {reason}");
        }
        let (name, reason) = refused(&by_hand("127.0.0.1:0"));
        assert!(
            name == "FERROVIA_RENDEZVOUS" && reason.contains("rank 0 only"),
            "{reason}"
        );
        for (port, why) in [("x", "invalid digit"), ("70000", "too large")] {
            let e = env(&[
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", port),
                ("TORCHELASTIC_RUN_ID", "r"),
            ]);
            let (name, reason) = refused(&e);
            assert_eq!(name, "MASTER_PORT");
            assert!(reason.contains(why), "{reason}");
        }
    }

    #[test]
    fn a_job_without_a_token_or_a_job_id_does_not_start() {
        let e = env(&[
            ("FERROVIA_RANK", "0"),
            ("FERROVIA_WORLD_SIZE", "2"),
            ("FERROVIA_RENDEZVOUS", "127.0.0.1:0"),
        ]);
        match from_vars(&e) {
            Err(BootstrapError::MissingVar { name, .. }) => assert_eq!(name, "FERROVIA_JOB_TOKEN"),
            other => panic!("{other:?}"),
        }
        let i = from_vars(&by_hand("h:5")).unwrap();
        assert_eq!(
            (i.token.as_str(), i.token_source),
            ("t", TokenSource::Explicit)
        );
        assert_eq!(i.port_file, None);
    }
}
