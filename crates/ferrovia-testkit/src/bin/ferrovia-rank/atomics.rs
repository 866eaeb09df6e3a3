//! `ferrovia-rank atomics`: remote atomics on rank 0's memory from every
//! rank (issue 14). Every rank adds 1 to one counter `adds` times, and
//! the total must be exact; then a ticket lock (fetch-and-add for the
//! ticket, compare-and-swap to pass the turn on) guards a read-modify-
//! write of an array of words, which must lose no update; and every bad
//! request is a typed error before posting. Rank 0 prints the results.

use std::collections::VecDeque;
use std::time::Duration;

use ferrovia_channel::{
    AtomicWorkRequest, Gather, PeerAtomicWorkRequest, PeerReadWorkRequest, PeerWriteWorkRequest,
    ReadWorkRequest, Scatter, ScopedPendingWork, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_node::{Node, NodeError};

const WAIT: Duration = Duration::from_secs(30);
/// Fetch-and-adds in flight per rank.
const WINDOW: usize = 16;
/// Words of the array the lock guards.
const WORDS: usize = 8;

fn config(e: String) -> NodeError {
    NodeError::Transport(TransportError::Config(e))
}

pub(crate) fn run(node: &mut Node, adds: u64, rounds: u64) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    // Rank 0's words: [counter, next ticket, now serving], and the array.
    let words = node
        .registry()
        .alloc(24, RegisterOptions::local().allow_remote_atomic())?;
    let array = node.registry().alloc(
        WORDS * 8,
        RegisterOptions::local()
            .allow_remote_read()
            .allow_remote_write(),
    )?;
    let w = node.all_gather_remote(words.registration().remote()?, WAIT)?[0];
    let a = node.all_gather_remote(array.registration().remote()?, WAIT)?[0];
    let (counter, next, serving) = (
        w.sub_region(0, 8)?,
        w.sub_region(8, 8)?,
        w.sub_region(16, 8)?,
    );
    let mut results = node
        .registry()
        .alloc(WINDOW * 8, RegisterOptions::local())?;

    // 1. The counter, WINDOW adds in flight.
    node.scope(|s| {
        let (bytes, reg) = results.split_mut();
        let mut free: Vec<Scatter<'_>> = bytes
            .chunks_mut(8)
            .map(|c| Scatter::new(reg, c))
            .collect::<Result<_, _>>()?;
        let mut pending = VecDeque::with_capacity(WINDOW);
        let mut seen = Vec::with_capacity(adds as usize);
        for _ in 0..adds {
            if free.is_empty() {
                let done = pending
                    .pop_front()
                    .ok_or_else(|| config("no add in flight".into()))?;
                retire(done, &mut free, &mut seen)?;
            }
            let buf = free
                .pop()
                .ok_or_else(|| config("no free result slot".into()))?;
            let wr = AtomicWorkRequest::fetch_add(buf, counter, 1)?;
            pending.push_back(s.post_atomic(PeerAtomicWorkRequest::new(0, wr))?);
        }
        while let Some(h) = pending.pop_front() {
            retire(h, &mut free, &mut seen)?;
        }
        // Every value this rank saw was handed to it alone: no repeats.
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(config(format!("two adds saw the same value {}", w[0])));
        }
        Ok::<_, NodeError>(())
    })?;
    node.barrier(&all, WAIT)?;
    if me == 0 {
        let total = words.load_u64(0)?;
        let want = n as u64 * adds;
        if total != want {
            return Err(config(format!("the counter is {total}, not {want}")));
        }
        println!("rank 0: counter {total} = {n} ranks x {adds} adds");
    }

    // 2. The ticket lock over the array.
    let mut local = node.registry().alloc(WORDS * 8, RegisterOptions::local())?;
    let mut result = node.registry().alloc(8, RegisterOptions::local())?;
    for _ in 0..rounds {
        let ticket = atomic(node, &mut result, |b| {
            AtomicWorkRequest::fetch_add(b, next, 1)
        })?;
        while atomic(node, &mut result, |b| {
            AtomicWorkRequest::fetch_add(b, serving, 0)
        })? != ticket
        {
            std::thread::yield_now();
        }
        // Our turn: read, add 1 to every word, write back.
        node.scope(|s| {
            s.post_read(PeerReadWorkRequest::new(
                0,
                ReadWorkRequest::new(Scatter::of(&mut local)?, a)?,
            ))?
            .wait(WAIT)?;
            Ok::<_, NodeError>(())
        })?;
        for word in local.chunks_mut(8) {
            let v = u64::from_ne_bytes(word.try_into().unwrap_or_default()) + 1;
            word.copy_from_slice(&v.to_ne_bytes());
        }
        node.scope(|s| {
            let g = [Gather::of(&local)?];
            s.post_write(PeerWriteWorkRequest::new(0, WriteWorkRequest::new(&g, a)?))?
                .wait(WAIT)?;
            Ok::<_, NodeError>(())
        })?;
        // Pass the turn on; it must still be ours.
        let was = atomic(node, &mut result, |b| {
            AtomicWorkRequest::compare_swap(b, serving, ticket, ticket + 1)
        })?;
        if was != ticket {
            return Err(config(format!(
                "the turn was {was} while ticket {ticket} held it"
            )));
        }
    }
    node.barrier(&all, WAIT)?;
    if me == 0 {
        let got = array.to_vec();
        let want = n as u64 * rounds;
        let bad: Vec<u64> = got
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
            .filter(|&v| v != want)
            .collect();
        if !bad.is_empty() {
            return Err(config(format!(
                "lost updates under the lock: words {bad:?}, want {want}"
            )));
        }
        println!("rank 0: lock array {WORDS} words = {want} each, no lost update");
        bad_requests(node, w)?;
        println!("rank 0: every bad atomic was a typed error before posting");
    }
    node.barrier(&all, WAIT)?;
    Ok(())
}

/// Takes a finished add: its value, and its result buffer back.
fn retire<'env>(
    h: ScopedPendingWork<'_, 'env>,
    free: &mut Vec<Scatter<'env>>,
    seen: &mut Vec<u64>,
) -> Result<(), NodeError> {
    let done = h.wait(WAIT)?;
    seen.push(done.original_value().unwrap_or_default());
    free.extend(done.into_scatter());
    Ok(())
}

/// One atomic on rank 0, waited for; the word's value before it.
fn atomic(
    node: &mut Node,
    result: &mut RegisteredBuffer,
    make: impl for<'a> FnOnce(Scatter<'a>) -> Result<AtomicWorkRequest<'a>, TransportError>,
) -> Result<u64, NodeError> {
    node.scope(|s| {
        let wr = make(Scatter::of(result)?)?;
        let done = s
            .post_atomic(PeerAtomicWorkRequest::new(0, wr))?
            .wait(WAIT)?;
        Ok::<_, NodeError>(done.original_value().unwrap_or_default())
    })
    .map_err(NodeError::from)
}

/// Misaligned, too short, no atomic right, a wrong-sized result: each
/// refused before posting, with its error.
fn bad_requests(node: &mut Node, words: RemoteMemoryRegion) -> Result<(), NodeError> {
    let mut result = node.registry().alloc(16, RegisterOptions::local())?;
    let readable = node
        .registry()
        .alloc(8, RegisterOptions::local().allow_remote_read())?;
    let no_atomics = readable.registration().remote()?;
    let odd = RemoteMemoryRegion::new(words.addr() + 4, 8, words.rkey())?;
    let short = words.sub_region(0, 4)?;
    let mut errors = vec![
        AtomicWorkRequest::fetch_add(Scatter::of(&mut result)?, words, 1).map_or_else(
            |e| e.to_string(),
            |_| "a 16-byte result was accepted".to_owned(),
        ),
    ];
    for (what, remote) in [
        ("misaligned", odd),
        ("short", short),
        ("no atomic right", no_atomics),
    ] {
        let r = AtomicWorkRequest::compare_swap(Scatter::range(&mut result, 0..8)?, remote, 0, 1);
        errors.push(r.map_or_else(|e| e.to_string(), |_| format!("{what} was accepted")));
    }
    for e in &errors {
        println!("rank 0: bad atomic: {e}");
        if e.ends_with("was accepted") {
            return Err(config(e.clone()));
        }
    }
    Ok(())
}
