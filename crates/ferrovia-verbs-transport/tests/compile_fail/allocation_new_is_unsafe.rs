// An `Allocation` names raw memory: its only constructor is unsafe.
use std::ptr::NonNull;

use ferrovia_mr::Allocation;

fn main() {
    let _ = Allocation::new(NonNull::new(0x1000 as *mut u8).unwrap(), 4096, Box::new(()));
}
