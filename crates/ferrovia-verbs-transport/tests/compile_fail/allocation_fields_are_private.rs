// An `Allocation` names raw memory: its fields are private, so safe code
// cannot build one pointing anywhere.
use std::ptr::NonNull;

use ferrovia_mr::Allocation;

fn main() {
    let _ = Allocation {
        ptr: NonNull::new(0x1000 as *mut u8).unwrap(),
        len: 4096,
        owner: Box::new(()),
    };
}
