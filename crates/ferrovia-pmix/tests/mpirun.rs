//! The client under Debian's `mpirun` (Open MPI 4.1 with PMIx 4): each
//! test runs itself again as the ranks of an `mpirun` job, and the ranks
//! put, fence and get. Needs `openmpi-bin` (`cargo xtask deps`).

use std::process::Command;
use std::time::{Duration, Instant};

use ferrovia_pmix::{Client, PmixError, launched_by_pmix};

fn under_pmix() -> bool {
    launched_by_pmix(&|k| std::env::var(k).ok())
}

/// Runs test `name` as `n` ranks under mpirun; returns (success, output).
fn mpirun(name: &str, n: usize, extra: &[(&str, &str)]) -> (bool, String) {
    // A session directory of its own: concurrent mpiruns sharing
    // /tmp/ompi.HOST.UID race to create it.
    let session =
        std::env::temp_dir().join(format!("ferrovia-pmix-test-{}-{name}", std::process::id()));
    let _ = std::fs::create_dir_all(&session);
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(n.to_string())
        .args(["--mca", "orte_tmpdir_base"])
        .arg(&session);
    for (k, v) in extra {
        c.args(["-x", &format!("{k}={v}")]);
    }
    let out = c
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .output()
        .expect("mpirun (apt-get install openmpi-bin, or cargo xtask deps)");
    let _ = std::fs::remove_dir_all(&session);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn four_ranks_put_fence_and_get() {
    if !under_pmix() {
        let (ok, out) = mpirun("four_ranks_put_fence_and_get", 4, &[]);
        assert!(ok, "{out}");
        for r in 0..4 {
            assert!(
                out.contains(&format!("rank {r} of 4 got every peer's value")),
                "{out}"
            );
        }
        return;
    }
    let c = Client::init().unwrap();
    let (me, n) = (c.rank(), c.job_size().unwrap());
    assert_eq!(n, 4);
    assert!(c.local_size().unwrap() >= 1);
    assert!(!c.namespace().is_empty());
    for peer in 0..n {
        c.put(
            &format!("t.{peer}"),
            format!("from {me} for {peer}").as_bytes(),
        )
        .unwrap();
    }
    c.put("t.empty", b"").unwrap();
    c.commit().unwrap();
    c.fence(true, Duration::from_secs(30)).unwrap();
    for peer in 0..n {
        let got = c.get(peer, &format!("t.{me}")).unwrap();
        assert_eq!(got, format!("from {peer} for {me}").as_bytes());
        assert!(c.get(peer, "t.empty").unwrap().is_empty());
    }
    // Nobody put it: an error at once, not a wait.
    let t = Instant::now();
    let e = c.get((me + 1) % n, "t.nobody").unwrap_err();
    assert!(
        matches!(
            e,
            PmixError::Call {
                call: "PMIx_Get",
                ..
            }
        ),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    c.fence(false, Duration::from_secs(30)).unwrap();
    println!("rank {me} of {n} got every peer's value");
}

#[test]
fn a_fence_a_rank_never_enters_times_out_naming_the_call() {
    if !under_pmix() {
        let (ok, out) = mpirun(
            "a_fence_a_rank_never_enters_times_out_naming_the_call",
            2,
            &[],
        );
        assert!(ok, "{out}");
        assert!(
            out.contains("rank 0: PMIx_Fence_nb did not complete within 1s"),
            "{out}"
        );
        return;
    }
    let c = Client::init().unwrap();
    if c.rank() == 1 {
        // Never enters: stays until rank 0 gave up, then leaves cleanly.
        std::thread::sleep(Duration::from_secs(3));
        return;
    }
    let t = Instant::now();
    let e = c.fence(false, Duration::from_secs(1)).unwrap_err();
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(matches!(e, PmixError::TimedOut { .. }));
    println!("rank 0: {e}");
}

#[test]
fn without_libpmix_init_fails_naming_the_library() {
    if std::env::var("FERROVIA_LIBPMIX").as_deref() != Ok("/nonexistent/libpmix.so.2") {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "without_libpmix_init_fails_naming_the_library",
                "--exact",
                "--nocapture",
            ])
            .env("FERROVIA_LIBPMIX", "/nonexistent/libpmix.so.2")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        return;
    }
    let e = Client::init().unwrap_err();
    assert!(matches!(e, PmixError::Load { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/libpmix.so.2"), "{e}");
    assert!(ferrovia_pmix::available().is_err());
}
