// A buffer shared through an Arc is read-only while an operation holds
// it: it can be a source, never a read's target.
use std::sync::Arc;

use ferrovia_async::AsyncMultiChannel;
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};

fn read_into_an_arc(a: &AsyncMultiChannel, remote: RemoteMemoryRegion) {
    let dst = Arc::new(a.registry().alloc(64, RegisterOptions::local()).unwrap());
    let _op = a.read(0, dst, remote);
}

fn main() {}
