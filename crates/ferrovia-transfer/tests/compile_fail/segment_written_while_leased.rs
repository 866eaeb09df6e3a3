// While a batch may read the segment (its lease lent for the scope), the
// program cannot write it: the device would send torn bytes.
use ferrovia_transfer::{Op, PreparedList, Segment, TransferEngine};

fn write_under_the_device(engine: &TransferEngine, seg: &mut Segment, prepared: &PreparedList) {
    let lease = seg.lease();
    let _ = engine.scope(|s| {
        let mut batch = s.submit(prepared, &lease, Op::Write, None)?;
        seg.bytes_mut()[0] = 1;
        batch.wait(std::time::Duration::from_secs(1))
    });
}

fn main() {}
