//! `ferrovia-perf write_lat` pairs in a loop beside busy threads, over UCX
//! shared memory: every pair finishes. This loop found the benchmark's
//! hang (a run of the docs table timed out once): the receiver used to
//! clear its flag, a repeated store of the peer's 8-byte copy set it
//! again, and both sides then waited for ever. With that flag 4 of these
//! 8 pairs hung (and 20 of 100 release-build pairs of 10,000 rounds with
//! two busy loops beside them); none has since the flag alternates
//! (`ferrovia-perf`'s `flag` module).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{finish, start_with};

const PERF: &str = env!("CARGO_BIN_EXE_ferrovia-perf");
const UCX_SM: &[(&str, &str)] = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "sm,self")];
const PAIRS: u16 = 8;

#[test]
fn write_lat_pairs_finish_beside_busy_threads() {
    let stop = Arc::new(AtomicBool::new(false));
    let burners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for i in 0..PAIRS {
        let port = (18600 + i).to_string();
        let args = ["write_lat", "-s", "8", "-n", "20000", "-p", &port];
        let server = start_with(PERF, &args, UCX_SM);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut client_args = args.to_vec();
        client_args.push("127.0.0.1");
        let client = start_with(PERF, &client_args, UCX_SM);
        let (client_ok, client_out) = finish(client, "client");
        let (server_ok, server_out) = finish(server, "server");
        if !(client_ok && server_ok) {
            failures.push(format!("pair {i}:\n{client_out}\n{server_out}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for b in burners {
        b.join().expect("a busy thread");
    }
    assert!(
        failures.is_empty(),
        "{} of {PAIRS} pairs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
