//! One-sided access to a peer's array through a `RemoteMemoryRegion`:
//! rank 1 registers an array of records and publishes only the small
//! descriptor; rank 0 navigates to one record's field and writes and reads
//! it with RDMA, never involving rank 1's CPU.
//!
//! `cargo run --example remote_array` starts both ranks here (over UCX
//! without RDMA hardware); on soft-RoCE:
//! `cargo xtask vm -- cargo run --example remote_array`.

use std::error::Error;
use std::mem::offset_of;
use std::time::Duration;

use ferrovia::mr::remote_field;
use ferrovia::{
    Gather, Node, PeerReadWorkRequest, PeerWriteWorkRequest, ReadWorkRequest, RegisterOptions,
    Scatter, WriteWorkRequest,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const WAIT: Duration = Duration::from_secs(10);
const OWNER: usize = 1;

/// The record both sides agree on.
#[repr(C)]
struct Record {
    id: u64,
    score: u64,
}

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?;
    let me = node.rank();
    // The owner's 1000 records, remotely readable and writable (everyone
    // registers the table; only the owner's is used).
    const N: usize = 1000;
    let opts = RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write();
    let table = node.registry().alloc(N * size_of::<Record>(), opts)?;
    let regions = node.all_gather_remote(table.registration().remote()?, WAIT)?;
    let at = 123 * size_of::<Record>() + offset_of!(Record, score);

    if me != OWNER {
        // Find record 123's score in the owner's table, write it, read it back.
        let records = regions[OWNER].array::<Record>()?;
        let score = remote_field!(records.get(123)?, Record, score)?.region();
        let value = node
            .registry()
            .register_buffer(4242u64.to_le_bytes().to_vec(), RegisterOptions::local())?;
        let mut check = node.registry().alloc(8, RegisterOptions::local())?;
        node.scope(|s| -> Res {
            let g = [Gather::of(&value)?];
            s.post_write(PeerWriteWorkRequest::new(
                OWNER,
                WriteWorkRequest::new(&g, score)?,
            ))?
            .wait(WAIT)?;
            s.post_read(PeerReadWorkRequest::new(
                OWNER,
                ReadWorkRequest::new(Scatter::of(&mut check)?, score)?,
            ))?
            .wait(WAIT)?;
            Ok(())
        })?;
        let read = u64::from_le_bytes(check[..].try_into()?);
        assert_eq!(read, 4242);
        println!(
            "remote_array: rank {me} wrote and read record 123's score (offset {at}) over {}: {read}",
            node.describe()
        );
    }
    // After the barrier the write is visible to the owner.
    node.barrier(&[0, 1], WAIT)?;
    if me == OWNER {
        let mut word = [0u8; 8];
        table.read_into(at, &mut word)?; // shared memory: copied out
        let stored = u64::from_le_bytes(word);
        assert_eq!(stored, 4242);
        println!("remote_array: rank {me} finds {stored} in record 123, written without its CPU");
    }
    Ok(())
}
