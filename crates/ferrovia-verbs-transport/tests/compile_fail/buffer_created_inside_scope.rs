// A buffer made inside the scope does not outlive it: it cannot be posted.
use ferrovia_channel::{Channel, Gather, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let registry = ch.registry().clone();
    ch.scope(|s| {
        let local = registry.register_buffer(vec![0u8; 8], RegisterOptions::local())?;
        let g = [Gather::of(&local)?];
        s.post_send(SendWorkRequest::new(&g)?)?;
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
