//! Bad input at the front door (issue 13, part 4): a malformed variable or
//! argument is refused at once, naming it, instead of a default taken in
//! silence and a job that fails a minute later.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const RANK_BIN: &str = env!("CARGO_BIN_EXE_ferrovia-rank");

/// `ferrovia-rank args` as rank 0 of 2 meeting at `rendezvous`, with a
/// bootstrap timeout of 5 s: (exit code, stdout, stderr, how long it ran).
fn rank0(
    rendezvous: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> (i32, String, String, Duration) {
    let mut c = Command::new(RANK_BIN);
    c.args(args)
        .env("FERROVIA_RANK", "0")
        .env("FERROVIA_WORLD_SIZE", "2")
        .env("FERROVIA_RENDEZVOUS", rendezvous)
        .env("FERROVIA_JOB_TOKEN", "t")
        .env("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "5000")
        .env("FERROVIA_BACKEND", "ucx")
        .env("UCX_TLS", "tcp");
    for (k, v) in extra {
        c.env(k, v);
    }
    let started = Instant::now();
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("run ferrovia-rank");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn a_malformed_rendezvous_is_refused_at_once_naming_the_variable() {
    for bad in ["127.0.0.1:notaport", ":"] {
        let (code, _, err, took) = rank0(bad, &["exchange", "1"], &[]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains("FERROVIA_RENDEZVOUS"), "{bad}: {err}");
        assert!(took < Duration::from_secs(2), "{bad}: took {took:?}");
    }
}

#[test]
fn a_number_that_does_not_parse_is_an_error_naming_the_argument() {
    let (code, _, err, _) = rank0("127.0.0.1:1", &["exchange", "many"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ITERS") && err.contains("many"), "{err}");
    let (code, _, err, _) = rank0(
        "127.0.0.1:1",
        &["exchange", "1"],
        &[("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "soon")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("FERROVIA_BOOTSTRAP_TIMEOUT_MS"), "{err}");
    let (code, _, err, _) = rank0("127.0.0.1:1", &["barrier-bench", "ring"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ring"), "{err}");
}

#[test]
fn help_is_help() {
    let (code, out, err, _) = rank0("127.0.0.1:1", &["--help"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Usage") && out.contains("exchange"), "{out}");
}

#[test]
fn a_local_job_of_no_rank_is_an_error() {
    let out = Command::new(RANK_BIN)
        .args(["--launch", "0", "exchange", "1"])
        .env_remove("FERROVIA_RANK")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("at least one rank"), "{err}");
}
