// An operation's future may be forgotten, so it cannot hold a borrow: a
// registration of borrowed memory is refused (it is not 'static).
use ferrovia_async::AsyncMultiChannel;
use ferrovia_mr::RegisterOptions;

fn receive_into_a_borrow(a: &AsyncMultiChannel, bytes: &mut [u8]) {
    let slice = a.registry().register_slice(bytes, RegisterOptions::local()).unwrap();
    let _op = a.receive(0, slice);
}

fn main() {}
