// A lease made inside the scope ends before the scope drains: submit wants
// one that outlives the scope ('env).
use ferrovia_transfer::{Op, PreparedList, Segment, TransferEngine};

fn short_lease(engine: &TransferEngine, seg: &mut Segment, prepared: &PreparedList) {
    let _ = engine.scope(|s| {
        let lease = seg.lease_mut();
        s.submit(prepared, &lease, Op::Write, None)?.wait(std::time::Duration::from_secs(1))
    });
}

fn main() {}
