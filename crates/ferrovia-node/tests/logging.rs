//! Operators see what happened through the `log` facade (silent unless the
//! program installs a logger): here, a refused stranger at the rendezvous.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use ferrovia_node::bootstrap::{Rendezvous, RendezvousConfig, exchange};

struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

#[test]
fn a_refused_connection_is_logged() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Debug);
    let cfg = move |rank, port| {
        RendezvousConfig::new(rank, 2, format!("127.0.0.1:{port}"), "t")
            .timeout(Duration::from_secs(10))
    };
    let rv = Rendezvous::bind(&cfg(0, 0)).unwrap();
    let port = rv.local_addr().port();
    let root = thread::spawn(move || {
        rv.exchange(&cfg(0, port), vec![vec![0], vec![1]])
            .map(|_| ())
    });
    // A stranger speaking HTTP, then the real rank 1.
    let mut stranger = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    };
    stranger.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    thread::sleep(Duration::from_millis(300));
    exchange(&cfg(1, port), vec![vec![2], vec![3]]).unwrap();
    root.join().unwrap().unwrap();
    let lines = CAPTURE.0.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("WARN") && l.contains("refused a connection")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("rank 1 checked in")),
        "{lines:?}"
    );
}
