// A buffer a completed receive hands back lives only as long as the scope.
use std::time::Duration;

use ferrovia_channel::{Channel, ReceiveWorkRequest, Scatter, TransportError};
use ferrovia_mr::RegisterOptions;

fn main() {
    let mut ch = Channel::builder().build().unwrap();
    let mut inbox = ch.registry().register_buffer(vec![0u8; 8], RegisterOptions::local()).unwrap();
    let data: &mut [u8] = ch
        .scope(|s| {
            let h = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
            Ok::<_, TransportError>(h.wait(Duration::from_secs(1))?.into_buffer().unwrap())
        })
        .unwrap();
    data[0] = 1;
}
