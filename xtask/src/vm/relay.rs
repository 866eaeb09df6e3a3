//! Copying the guest command's stdout/stderr to ours. qemu writes each
//! virtio-serial port into a FIFO (it cannot open our fd 1 itself when that
//! is a socket); a thread per FIFO drains it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which of our streams a relay writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

/// A running relay thread; dropping it waits (briefly) for it to finish.
pub(crate) struct Relay {
    fifo: PathBuf,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Starts draining `fifo` into `sink`. With a `prefix` (several VMs at
    /// once), output is relayed line by line with the prefix in front.
    pub(crate) fn start(fifo: &Path, sink: Sink, prefix: Option<String>) -> std::io::Result<Relay> {
        let path = fifo.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("vm-relay".into())
            .spawn(move || {
                // Blocks until qemu opens the FIFO for writing; ends at EOF,
                // i.e. when qemu exits.
                if let Ok(file) = File::open(&path) {
                    match prefix {
                        Some(prefix) => copy_lines(file, sink, &prefix),
                        None => copy_raw(file, sink),
                    }
                }
            })?;
        Ok(Relay {
            fifo: fifo.to_path_buf(),
            thread: Some(thread),
        })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        // If qemu never opened the FIFO, the thread still sits in open():
        // opening the write end ourselves (non-blocking) releases it, and
        // closing it again gives it EOF. Give up after ~2 s (the thread is
        // then left behind; xtask exits soon anyway).
        let give_up = Instant::now() + Duration::from_secs(2);
        while !thread.is_finished() && Instant::now() < give_up {
            let _ = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.fifo);
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
}

fn copy_raw(mut from: File, sink: Sink) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => write_to(sink, &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn copy_lines(from: File, sink: Sink, prefix: &str) {
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                let mut out = prefix.as_bytes().to_vec();
                out.extend_from_slice(&line);
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                write_to(sink, &out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Writes and flushes at once: the guest's output should appear live.
/// Errors (e.g. our reader went away) are ignored: the VM keeps running
/// and its exit status still matters.
fn write_to(sink: Sink, data: &[u8]) {
    let _ = match sink {
        Sink::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(data).and_then(|()| out.flush())
        }
        Sink::Stderr => {
            let mut err = std::io::stderr().lock();
            err.write_all(data).and_then(|()| err.flush())
        }
    };
}
