// A buffer handed back by a completed receive can be posted again in the
// same scope; once reposted, it is the request's until that completes.
use std::time::Duration;

use ferrovia_channel::{Channel, ReceiveWorkRequest, Scatter, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut inbox = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    ch.scope(|s| {
        let h = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        let again = h.wait(Duration::from_secs(1))?.into_scatter().unwrap();
        let _next = s.post_receive(ReceiveWorkRequest::new(again))?;
        let _ = again.len();
        Ok::<_, TransportError>(())
    })
    .unwrap();
}
