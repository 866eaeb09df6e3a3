// A registrar hands the registry raw memory: implementing it is unsafe, so
// a safe program cannot return a dangling `Allocation` (which made a safe
// `buf[0]` segfault).
use ferrovia_mr::{Allocation, MrError, RegisteredKeys, Registrar};
use ferrovia_verbs::AccessFlags;

struct Liar;

impl Registrar for Liar {
    fn allocate(&self, _len: usize) -> Option<Result<Allocation, MrError>> {
        None
    }
    unsafe fn register(
        &self,
        _: *mut u8,
        _: usize,
        _: Option<u64>,
        _: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        Err(MrError::ZeroLength { addr: 0 })
    }
}

fn main() {
    let _ = Liar;
}
