//! The rendezvous protocol on loopback TCP, with opaque blobs standing in
//! for queue-pair endpoints: no RDMA device needed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use ferrovia_node::BootstrapError;
use ferrovia_node::bootstrap::{Rendezvous, RendezvousConfig, exchange};

fn cfg(rank: usize, n: usize, port: u16, token: &str, timeout: Duration) -> RendezvousConfig {
    RendezvousConfig::new(rank, n, format!("127.0.0.1:{port}"), token).timeout(timeout)
}

type Outcome = thread::JoinHandle<Result<Vec<Vec<u8>>, BootstrapError>>;

/// Rank 0 of `n`, listening on a port the OS chose: (that port, its run).
fn root(n: usize, token: &str, timeout: Duration) -> (u16, Outcome) {
    let c = cfg(0, n, 0, token, timeout);
    let rv = Rendezvous::bind(&c).unwrap();
    let port = rv.local_addr().port();
    let run = thread::spawn(move || {
        let (session, got) = rv.exchange(&c, blobs(0, c.world_size))?;
        session.ready()?;
        Ok(got)
    });
    (port, run)
}

/// `blobs[j]` from rank `i` is "i->j".
fn blobs(i: usize, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|j| format!("{i}->{j}").into_bytes()).collect()
}

fn run_rank(rank: usize, n: usize, port: u16, token: &str) -> Outcome {
    let c = cfg(rank, n, port, token, Duration::from_secs(10));
    thread::spawn(move || {
        let (session, got) = exchange(&c, blobs(c.rank, c.world_size))?;
        session.ready()?;
        Ok(got)
    })
}

fn check_columns(results: Vec<Result<Vec<Vec<u8>>, BootstrapError>>) {
    let n = results.len();
    for (me, r) in results.into_iter().enumerate() {
        let got = r.unwrap_or_else(|e| panic!("rank {me}: {e}"));
        for (j, blob) in got.iter().enumerate() {
            assert_eq!(blob, format!("{j}->{me}").as_bytes(), "rank {me} from {j}");
        }
        assert_eq!(got.len(), n);
    }
}

#[test]
fn every_rank_gets_what_every_peer_made_for_it() {
    for n in [1, 2, 5] {
        let (port, zero) = root(n, "job-1", Duration::from_secs(10));
        let hs: Vec<_> = (1..n)
            .rev()
            .map(|r| run_rank(r, n, port, "job-1"))
            .collect();
        let mut results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        results.push(zero.join().unwrap());
        results.reverse();
        check_columns(results);
    }
}

/// Sends raw bytes as a stranger; returns what rank 0 answered.
fn stranger(port: u16, bytes: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("rank 0 never listened: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    answer
}

fn frame(version: u16, body: &[u8]) -> Vec<u8> {
    let mut f = b"FRVB".to_vec();
    f.extend_from_slice(&version.to_le_bytes());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    f
}

#[test]
fn strangers_are_refused_and_the_job_completes() {
    let n = 3;
    let (port, root) = root(n, "right", Duration::from_secs(10));
    // A wrong token, a protocol-1 peer, an HTTP request, and a rank out of
    // range, all before the real ranks arrive.
    let wrong = stranger(port, &wrong_token_join(n));
    assert!(
        String::from_utf8_lossy(&wrong).contains("wrong job token"),
        "{wrong:?}"
    );
    let v1 = stranger(port, &frame(1, &[0]));
    assert!(String::from_utf8_lossy(&v1).contains("version"), "{v1:?}");
    let http = stranger(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(String::from_utf8_lossy(&http).contains("magic"), "{http:?}");
    let out_of_range = thread::spawn(move || {
        exchange(
            &cfg(7, n, port, "right", Duration::from_secs(5)),
            blobs(7, n),
        )
    });
    match out_of_range.join().unwrap() {
        Err(BootstrapError::Rejected { reason, .. }) => {
            assert!(reason.contains("out of range"), "{reason}")
        }
        other => panic!("rank 7 of 3 was not refused: {other:?}"),
    }
    let others: Vec<_> = (1..n).map(|r| run_rank(r, n, port, "right")).collect();
    let mut results = vec![root.join().unwrap()];
    results.extend(others.into_iter().map(|h| h.join().unwrap()));
    check_columns(results);
}

fn wrong_token_join(n: usize) -> Vec<u8> {
    // Encode a Join the way a peer with another token would: through the
    // public API of a second rendezvous run against a capture socket.
    let capture = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = capture.local_addr().unwrap().port();
    let t = thread::spawn(move || {
        let c = cfg(1, n, port, "wrong", Duration::from_millis(500));
        let _ = exchange(&c, blobs(1, n));
    });
    let (mut s, _) = capture.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut hello = vec![0u8; 10];
    s.read_exact(&mut hello).unwrap();
    let len = u32::from_le_bytes(hello[6..10].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    drop(s);
    t.join().unwrap();
    hello.extend(body);
    hello
}

#[test]
fn a_duplicate_rank_is_refused_without_breaking_the_job() {
    let n = 3;
    let (port, root) = root(n, "t", Duration::from_secs(10));
    let first = run_rank(1, n, port, "t");
    thread::sleep(Duration::from_millis(500)); // rank 1 has checked in
    match exchange(&cfg(1, n, port, "t", Duration::from_secs(5)), blobs(1, n)) {
        Err(BootstrapError::Rejected { reason, .. }) => {
            assert!(reason.contains("already checked in"), "{reason}")
        }
        other => panic!("the duplicate rank 1 was not refused: {other:?}"),
    }
    let last = run_rank(2, n, port, "t");
    check_columns(vec![
        root.join().unwrap(),
        first.join().unwrap(),
        last.join().unwrap(),
    ]);
}

#[test]
fn a_rank_that_never_starts_fails_bootstrap_within_its_deadline() {
    let n = 3;
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let (port, root) = root(n, "t", timeout);
    let one = thread::spawn(move || {
        exchange(
            &cfg(1, n, port, "t", timeout + Duration::from_secs(3)),
            blobs(1, n),
        )
        .map(|_| ())
    });
    match root.join().unwrap().map(|_| ()) {
        Err(BootstrapError::MissingRanks { missing, .. }) => assert_eq!(missing, vec![2]),
        other => panic!("expected rank 2 missing, got {other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(1),
        "{elapsed:?}"
    );
    // The rank that came is told at once, not left to its own deadline.
    match one.join().unwrap() {
        Err(BootstrapError::Rejected { reason, .. }) => assert!(reason.contains("[2]"), "{reason}"),
        other => panic!("rank 1 was not told: {other:?}"),
    }
    assert!(started.elapsed() < timeout + Duration::from_secs(2));
}

#[test]
fn an_absent_rank_zero_is_unreachable_within_the_deadline() {
    // A port nobody listens on: bound, then closed, on a loopback address
    // of its own (the other tests' rank 0 may get the same port number on
    // 127.0.0.1 meanwhile, and listens there only).
    let port = TcpListener::bind("127.0.0.3:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let mut c = cfg(1, 2, port, "t", Duration::from_secs(1));
    c.addr = format!("127.0.0.3:{port}");
    let r = exchange(&c, blobs(1, 2));
    assert!(
        matches!(r, Err(BootstrapError::Unreachable { .. })),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// A rank whose rank 0 takes the connection and never answers says that it
/// timed out, and waiting for what (it used to say "Resource temporarily
/// unavailable").
#[test]
fn a_member_that_times_out_says_so() {
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let started = Instant::now();
    let r = exchange(&cfg(1, 2, port, "t", Duration::from_secs(1)), blobs(1, 2));
    let e = r.expect_err("no rank 0 answered");
    assert!(matches!(e, BootstrapError::TimedOut { .. }), "{e:?}");
    assert!(e.to_string().contains("timed out after"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(mute);
}

/// Rank 0 asked for port 0 listens where the OS chose; the other ranks
/// need that port and refuse port 0 at once.
#[test]
fn port_0_is_for_rank_0_only() {
    let (port, zero) = root(2, "t", Duration::from_secs(10));
    assert_ne!(port, 0);
    let started = Instant::now();
    let r = exchange(&cfg(1, 2, 0, "t", Duration::from_secs(10)), blobs(1, 2));
    assert!(
        matches!(r, Err(BootstrapError::MalformedVar { .. })),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let one = run_rank(1, 2, port, "t");
    check_columns(vec![zero.join().unwrap(), one.join().unwrap()]);
}

/// A connection that never shows the token is dropped after the join
/// window (5 s), not kept until the bootstrap deadline.
#[test]
fn a_connection_that_shows_no_token_is_dropped_after_the_join_window() {
    let (port, zero) = root(2, "t", Duration::from_secs(30));
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"FRV").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "dropped after {took:?}"
    );
    let one = run_rank(1, 2, port, "t");
    check_columns(vec![zero.join().unwrap(), one.join().unwrap()]);
}
