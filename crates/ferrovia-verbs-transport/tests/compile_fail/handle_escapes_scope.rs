// A pending-work handle cannot leave its scope.
use ferrovia_channel::{Channel, Gather, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let buf = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    let escaped = ch
        .scope(|s| {
            let g = [Gather::of(&buf)?];
            let handle = s.post_send(SendWorkRequest::new(&g)?)?;
            Ok::<_, TransportError>(handle)
        })
        .unwrap();
    drop(escaped);
}
