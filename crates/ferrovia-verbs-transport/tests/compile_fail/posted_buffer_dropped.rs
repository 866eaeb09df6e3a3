// A borrowed registration cannot be dropped, nor its memory freed, while a
// scope that posted it lives.
use ferrovia_channel::{Channel, Gather, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let registry = ch.registry().clone();
    let mut memory = vec![0u8; 8];
    let slice = registry.register_slice(&mut memory, RegisterOptions::local()).unwrap();
    ch.scope(|s| {
        let g = [Gather::of(&slice)?];
        s.post_send(SendWorkRequest::new(&g)?)?;
        drop(memory);
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
