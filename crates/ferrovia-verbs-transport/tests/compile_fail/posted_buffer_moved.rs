// A buffer posted in a scope cannot be moved (here: swapped out) while the
// scope lives.
use ferrovia_channel::{Channel, Gather, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut buf = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    let mut other = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    ch.scope(|s| {
        let g = [Gather::of(&buf)?];
        s.post_send(SendWorkRequest::new(&g)?)?;
        std::mem::swap(&mut buf, &mut other);
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
