// An owned batch follows its runs through the engine's rails: the engine
// cannot go while the batch lives.
use std::sync::Arc;

use ferrovia_transfer::{Lease, Op, PreparedList, TransferEngine};

fn drop_the_engine(engine: TransferEngine, prepared: PreparedList, lease: &Arc<Lease<'static>>) {
    let batch = engine.submit(prepared, lease, Op::Write, None);
    drop(engine);
    drop(batch);
}

fn main() {}
