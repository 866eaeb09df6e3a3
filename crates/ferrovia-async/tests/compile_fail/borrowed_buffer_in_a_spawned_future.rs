// A future that owns its buffer can be spawned; one that borrows a local
// buffer cannot outlive it.
use ferrovia_async::AsyncMultiChannel;
use ferrovia_mr::RegisterOptions;

async fn spawn_with_a_borrow(a: AsyncMultiChannel) {
    let mut local = vec![0u8; 64];
    let slice = a.registry().register_slice(&mut local[..], RegisterOptions::local()).unwrap();
    tokio::spawn(async move {
        let _ = a.send(0, slice).await;
    });
}

fn main() {}
