//! With `FERROVIA_RANK_STATS=1`, a rank prints what its node counted per
//! peer once its command is done (`Node::stats`), one line per peer, for
//! the tests that check the counters against what the job did.

use ferrovia_node::Node;
use ferrovia_types::WcStatus;

/// Prints `stats rank=R peer=P key=value...` for every peer, if asked.
pub(crate) fn print_if_asked(node: &Node) {
    if std::env::var_os("FERROVIA_RANK_STATS").is_none_or(|v| v != "1") {
        return;
    }
    let me = node.rank();
    for p in node.stats().peers {
        println!(
            "stats rank={me} peer={} send_ops={} send_bytes={} write_ops={} write_bytes={} \
             read_ops={} read_bytes={} atomic_ops={} receive_ops={} receive_bytes={} \
             completed={} failed={} flushes={} reconnects={} revocations={} outstanding={} \
             latency_samples={}",
            p.peer,
            p.ops.send,
            p.bytes.send,
            p.ops.write,
            p.bytes.write,
            p.ops.read,
            p.bytes.read,
            p.ops.atomic,
            p.ops.receive,
            p.bytes.receive,
            p.completed(WcStatus::SUCCESS),
            p.failed(),
            p.flushes,
            p.reconnects,
            p.revocations,
            p.outstanding,
            p.latency.samples(),
        );
    }
}
