// A posted buffer cannot be written: local memory has no atomic view
// through which a shared borrow could store while a send reads it (only
// shared memory has one, and it is never a slice).
use std::sync::atomic::Ordering::Relaxed;

use ferrovia_channel::{Channel, Gather, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let buf = ch.registry().alloc(64, RegisterOptions::local()).unwrap();
    ch.scope(|s| {
        let g = [Gather::of(&buf)?];
        s.post_send(SendWorkRequest::new(&g)?)?;
        buf.as_atomic_u64s().unwrap()[0].store(1, Relaxed);
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
