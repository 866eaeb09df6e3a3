// A receive or read hands its buffer back as `&mut [u8]`, so memory a
// peer may write cannot be its target.
use ferrovia_channel::{Channel, ReceiveWorkRequest, Scatter};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut inbox = ch
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_write())
        .unwrap();
    ch.scope(|s| {
        s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        Ok::<_, ferrovia_channel::TransportError>(())
    })
    .unwrap();
}
