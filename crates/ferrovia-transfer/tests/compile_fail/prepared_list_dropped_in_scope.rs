// The prepared list holds the batch's pieces and their keys: it is
// borrowed for the scope, so it cannot be dropped while runs may be out.
use ferrovia_transfer::{Op, PreparedList, Segment, TransferEngine};

fn drop_the_list(engine: &TransferEngine, seg: &mut Segment, prepared: PreparedList) {
    let lease = seg.lease_mut();
    let _ = engine.scope(|s| {
        let batch = s.submit(&prepared, &lease, Op::Write, None)?;
        drop(prepared);
        drop(batch);
        Ok(())
    });
}

fn main() {}
