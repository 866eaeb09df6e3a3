// A receive hands its buffer back as plain bytes, so memory peers may
// write cannot be its target.
use ferrovia_async::AsyncMultiChannel;
use ferrovia_mr::RegisterOptions;

fn receive_into_shared(a: &AsyncMultiChannel) {
    let inbox = a.registry().alloc(64, RegisterOptions::local().allow_remote_write()).unwrap();
    let _op = a.receive(0, inbox);
}

fn main() {}
