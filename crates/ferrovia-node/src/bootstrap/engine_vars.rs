//! The launch configuration of the engines other than rank 0's rendezvous:
//! PMIx (the launcher's variables say who started the process; PMIx
//! itself tells the rest at bootstrap) and a store (`FERROVIA_STORE`, with
//! the rank and world size from whichever launcher is there).

use crate::bootstrap::launcher::{Engine, Env, LaunchInfo, Launcher, get, need, number};
use crate::bootstrap::token::{self, TokenSource};
use crate::error::BootstrapError;
use crate::membership::StoreConfig;

/// Whether PMIx is the engine: a PMIx launcher started the process and
/// nothing asks for rank 0's rendezvous instead.
pub(crate) fn pmix_applies(env: Env<'_>) -> bool {
    get(env, "PMIX_RANK").is_some()
        && get(env, "PMIX_NAMESPACE").is_some()
        && ["FERROVIA_RANK", "FERROVIA_RENDEZVOUS", "MASTER_ADDR"]
            .iter()
            .all(|v| get(env, v).is_none())
}

/// Under PMIx: the rank from `PMIX_RANK`; the world size from the
/// launcher when it says (`OMPI_COMM_WORLD_SIZE`, `SLURM_NTASKS`), else 0
/// until PMIx says at bootstrap. The token is made at bootstrap.
pub(crate) fn pmix(env: Env<'_>) -> Result<LaunchInfo, BootstrapError> {
    let rank = number(
        "PMIX_RANK",
        &need(env, "PMIX_RANK", "a PMIx launcher sets it")?,
    )?;
    let (size_var, launcher) = if get(env, "SLURM_PROCID").is_some() {
        ("SLURM_NTASKS", Launcher::Slurm)
    } else {
        ("OMPI_COMM_WORLD_SIZE", Launcher::OpenMpi)
    };
    let world_size = match get(env, size_var) {
        Some(v) => number(size_var, &v)?,
        None => 0,
    };
    if world_size != 0 && rank >= world_size {
        return Err(BootstrapError::RankOutOfRange { rank, world_size });
    }
    let (token, token_source) = explicit_token(env)?;
    Ok(LaunchInfo {
        rank,
        world_size,
        rendezvous: String::new(),
        token,
        token_source,
        launcher,
        engine: Engine::Pmix,
        port_file: None,
    })
}

/// With `FERROVIA_STORE=url`: the store's settings, and the rank and world
/// size from `FERROVIA_RANK`/`FERROVIA_WORLD_SIZE`, torchrun, Slurm or
/// Open MPI (no rendezvous address: the store is the meeting place).
pub(crate) fn store(env: Env<'_>, url: &str) -> Result<LaunchInfo, BootstrapError> {
    let cfg = StoreConfig::parse("FERROVIA_STORE", url)?.with_vars(&|k| get(env, k))?;
    let (rank, world_size, launcher) = rank_and_size(env)?;
    if world_size == 0 || rank >= world_size {
        return Err(BootstrapError::RankOutOfRange { rank, world_size });
    }
    let (token, token_source) = explicit_token(env)?;
    Ok(LaunchInfo {
        rank,
        world_size,
        rendezvous: cfg.endpoint.clone(),
        token,
        token_source,
        launcher,
        engine: Engine::Store(cfg),
        port_file: None,
    })
}

/// `FERROVIA_JOB_TOKEN` if set; else the engine makes one.
fn explicit_token(env: Env<'_>) -> Result<(String, TokenSource), BootstrapError> {
    match get(env, "FERROVIA_JOB_TOKEN") {
        Some(t) => {
            token::check("FERROVIA_JOB_TOKEN", &t)?;
            Ok((t, TokenSource::Explicit))
        }
        None => Ok((String::new(), TokenSource::Engine)),
    }
}

fn rank_and_size(env: Env<'_>) -> Result<(usize, usize, Launcher), BootstrapError> {
    let pairs: [(&'static str, &'static str, Launcher); 4] = [
        ("FERROVIA_RANK", "FERROVIA_WORLD_SIZE", Launcher::Explicit),
        ("RANK", "WORLD_SIZE", Launcher::Torchrun),
        ("SLURM_PROCID", "SLURM_NTASKS", Launcher::Slurm),
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            Launcher::OpenMpi,
        ),
    ];
    for (rank_var, size_var, launcher) in pairs {
        if let Some(rank) = get(env, rank_var) {
            let size = need(env, size_var, "set it with the rank")?;
            return Ok((number(rank_var, &rank)?, number(size_var, &size)?, launcher));
        }
    }
    Err(BootstrapError::MissingVar {
        name: "FERROVIA_RANK",
        hint: "FERROVIA_STORE names the job's store; set FERROVIA_RANK and FERROVIA_WORLD_SIZE (or run under torchrun, srun or mpirun)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::launcher::from_vars;
    use crate::bootstrap::launcher::tests::env;

    #[test]
    fn mpirun_without_a_rendezvous_meets_through_pmix() {
        let e = env(&[
            ("PMIX_RANK", "3"),
            ("PMIX_NAMESPACE", "1556873217"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!((i.rank, i.world_size, i.engine), (3, 4, Engine::Pmix));
        assert_eq!(
            (i.token.as_str(), i.token_source),
            ("", TokenSource::Engine)
        );
        // Asking for rank 0's rendezvous keeps it.
        let e = env(&[
            ("PMIX_RANK", "3"),
            ("PMIX_NAMESPACE", "n"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("FERROVIA_RENDEZVOUS", "h:1"),
        ]);
        assert_eq!(from_vars(&e).unwrap().engine, Engine::Rendezvous);
        // srun --mpi=pmix
        let e = env(&[
            ("PMIX_RANK", "1"),
            ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!((i.launcher, i.engine), (Launcher::Slurm, Engine::Pmix));
    }

    #[test]
    fn a_store_url_picks_the_store_with_any_launchers_rank() {
        let e = env(&[
            ("FERROVIA_STORE", "etcd://127.0.0.1:2379/train"),
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
        ]);
        let i = from_vars(&e).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.launcher),
            (2, 4, Launcher::Torchrun)
        );
        assert!(matches!(i.engine, Engine::Store(ref c) if c.job == "train"));
        assert_eq!(i.rendezvous, "127.0.0.1:2379");
        let e = env(&[("FERROVIA_STORE", "etcd://127.0.0.1:2379/train")]);
        assert!(matches!(
            from_vars(&e),
            Err(BootstrapError::MissingVar {
                name: "FERROVIA_RANK",
                ..
            })
        ));
        let e = env(&[
            ("FERROVIA_STORE", "etcd://127.0.0.1:2379/train"),
            ("FERROVIA_RANK", "4"),
            ("FERROVIA_WORLD_SIZE", "4"),
        ]);
        assert!(matches!(
            from_vars(&e),
            Err(BootstrapError::RankOutOfRange { rank: 4, .. })
        ));
    }
}
