// A receive buffer cannot be read while its receive is posted: the
// request holds the only (mutable) borrow until it completes.
use ferrovia_channel::{Channel, ReceiveWorkRequest, Scatter, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut inbox = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    ch.scope(|s| {
        let _pending = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        let peek = inbox[0];
        let _ = peek;
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
