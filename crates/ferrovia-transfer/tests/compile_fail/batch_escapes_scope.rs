// A batch cannot leave its scope: the scope drains every run before it
// returns, so a batch outside it would follow runs that no longer exist
// and keep bytes borrowed the scope gave back.
use ferrovia_transfer::{Op, PreparedList, Segment, TransferEngine};

fn escape(engine: &TransferEngine, seg: &mut Segment, prepared: &PreparedList) {
    let lease = seg.lease_mut();
    let batch = engine.scope(|s| Ok(s.submit(prepared, &lease, Op::Write, None)?));
    drop(batch);
}

fn main() {}
