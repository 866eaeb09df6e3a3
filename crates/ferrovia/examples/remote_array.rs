//! One-sided access to a peer's array through a `RemoteMemoryRegion`: the
//! owner registers an array of records and sends only the small wire form
//! of its descriptor; the other side navigates to one record's field and
//! writes and reads it with RDMA, never involving the owner's CPU.

use std::error::Error;
use std::mem::offset_of;
use std::time::Duration;

use ferrovia::mr::remote_field;
use ferrovia::{
    Channel, Gather, ReadWorkRequest, RegisterOptions, RemoteMemoryRegion, Scatter,
    WriteWorkRequest,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const WAIT: Duration = Duration::from_secs(10);

/// The record both sides agree on.
#[repr(C)]
struct Record {
    id: u64,
    score: u64,
}

fn main() -> Res {
    let mut owner = Channel::builder().build()?;
    let mut user = Channel::builder().pd(owner.pd()).build()?;
    let (eo, eu) = (owner.endpoint(), user.endpoint());
    owner.connect(&eu)?;
    user.connect(&eo)?;

    // The owner: 1000 records, remotely readable and writable.
    const N: usize = 1000;
    let opts = RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write();
    let table = owner.registry().alloc(N * size_of::<Record>(), opts)?;
    let wire = table.registration().remote()?.encode(); // what travels to the peer

    // The user: decode, find record 123's score, write it, read it back.
    let remote = RemoteMemoryRegion::decode(&wire)?;
    let records = remote.array::<Record>()?;
    let score = remote_field!(records.get(123)?, Record, score)?.region();
    let value = user
        .registry()
        .register_buffer(4242u64.to_le_bytes().to_vec(), RegisterOptions::local())?;
    let mut check = user
        .registry()
        .register_buffer(vec![0u8; 8], RegisterOptions::local())?;
    user.scope(|s| -> Res {
        s.post_write(WriteWorkRequest::new(&[Gather::of(&value)?], score)?)?
            .wait(WAIT)?;
        s.post_read(ReadWorkRequest::new(Scatter::of(&mut check)?, score)?)?
            .wait(WAIT)?;
        Ok(())
    })?;
    let at = 123 * size_of::<Record>() + offset_of!(Record, score);
    let stored = u64::from_le_bytes(table[at..at + 8].try_into()?);
    let read = u64::from_le_bytes(check[..].try_into()?);
    assert_eq!((stored, read), (4242, 4242));
    println!(
        "remote_array: wrote and read record 123's score (offset {at}) through a {}-byte descriptor: {stored}",
        wire.len()
    );
    Ok(())
}
