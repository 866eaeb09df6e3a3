//! Copying the guest command's stdout/stderr to ours. qemu writes each
//! virtio-serial port into a FIFO (it cannot open our fd 1 itself when that
//! is a socket); a thread per FIFO drains it, as it comes or (several VMs)
//! line by line with a prefix.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::out::Sink;
use crate::process::{Lines, read_chunks, read_lines};

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
                        Some(prefix) => {
                            read_lines(file, &Lines::shown(sink, prefix, false));
                        }
                        None => read_chunks(file, |data| sink.write(data)),
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
