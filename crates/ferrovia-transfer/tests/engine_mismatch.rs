//! Engines do not take each other's segments or lists (through transport
//! doubles): another engine's keys would fail on these rails, and on
//! verbs take the connection down with them; refused before posting.

use std::sync::Arc;

use ferrovia_channel::transport::Transport;
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{Counting, registry};
use ferrovia_transfer::{DescriptorList, Op, TransferEngine, TransferError, target_options};

fn engine() -> TransferEngine {
    let transports: Vec<Arc<dyn Transport>> = (0..2)
        .map(|_| Counting::new(1, 4096) as Arc<dyn Transport>)
        .collect();
    TransferEngine::builder()
        .same_rails(2)
        .over_rails(0, 1, transports, vec![registry(), registry()])
        .expect("engine over the doubles")
}

#[test]
fn another_engine_s_segment_or_list_is_refused() {
    let (a, b) = (engine(), engine());
    let seg_a = a.alloc(4096, RegisterOptions::local()).unwrap();
    let target = a.alloc(4096, target_options()).unwrap();
    let remotes = vec![target.remote().unwrap()];
    let mut list = DescriptorList::new();
    list.push(0..4096, 0, 0);
    let e = b.prepare(&seg_a, &list, &remotes).unwrap_err();
    assert!(
        matches!(&e, TransferError::Mismatch(m) if m.contains("another engine")),
        "{e}"
    );
    let prepared = a.prepare(&seg_a, &list, &remotes).unwrap();
    let lease = seg_a.lease();
    let r = b.scope(|s| s.submit(&prepared, &lease, Op::Write, None).map(|_| ()));
    assert!(
        matches!(&r, Err(TransferError::Mismatch(m)) if m.contains("another engine")),
        "{r:?}"
    );
}
