// The operation owns its buffer until it hands it back: the program
// cannot touch it meanwhile.
use ferrovia_async::AsyncMultiChannel;
use ferrovia_mr::RegisterOptions;

async fn write_while_receiving(a: &AsyncMultiChannel) {
    let mut inbox = a.registry().alloc(64, RegisterOptions::local()).unwrap();
    let op = a.receive(0, inbox);
    inbox[0] = 1;
    let _ = op.await;
}

fn main() {}
