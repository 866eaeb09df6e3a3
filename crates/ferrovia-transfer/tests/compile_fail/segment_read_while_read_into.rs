// A read batch writes the segment: its lease is exclusive, so the program
// cannot even look at the bytes (an immutable reference the optimizer
// may assume stable) until the scope has ended.
use ferrovia_transfer::{Op, PreparedList, Segment, TransferEngine};

fn look_while_the_device_writes(
    engine: &TransferEngine,
    seg: &mut Segment,
    prepared: &PreparedList,
) {
    let lease = seg.lease_mut();
    let _ = engine.scope(|s| {
        let mut batch = s.submit(prepared, &lease, Op::Read, None)?;
        let first = seg.bytes()[0];
        let r = batch.wait(std::time::Duration::from_secs(1));
        assert_eq!(first, seg.bytes()[0]);
        r
    });
}

fn main() {}
