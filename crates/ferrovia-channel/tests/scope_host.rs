//! The scope rules that keep borrows sound, on the host through a
//! transport double: a scope posts to and drains one engine, and scopes
//! over one engine do not nest.

use std::cell::Cell;
use std::time::Duration;

use ferrovia_channel::engine::{ChannelCore, run_scope};
use ferrovia_channel::{
    ChannelConfig, MultiPeer, PeerReceiveWorkRequest, ReceiveWorkRequest, Scatter, ScopeError,
    ScopeTarget, TransportError, Unpolled,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{Double, Mode};

fn quick() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(200);
    cfg
}

/// A safe `ScopeTarget` that answers engine 1 on its second call (where
/// a scope that asked per post would post) and engine 0 otherwise (where
/// it would drain).
struct Flipping {
    engines: [ChannelCore; 2],
    calls: Cell<usize>,
}

impl ScopeTarget for Flipping {
    fn core(&self) -> &ChannelCore {
        let n = self.calls.get();
        self.calls.set(n + 1);
        &self.engines[usize::from(n == 1)]
    }
}

impl MultiPeer for Flipping {}

#[test]
fn a_target_that_answers_another_engine_cannot_end_a_borrow_under_live_work() {
    let doubles = [Double::new(1, 8, Mode::Held), Double::new(1, 8, Mode::Held)];
    let target = Flipping {
        engines: [0, 1].map(|i| ChannelCore::new(doubles[i].clone(), quick())),
        calls: Cell::new(0),
    };
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        s.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))
        .map(drop)
    });
    // The receive was never completed, so the drain had to flush it...
    match r {
        Err(ScopeError::Drain(d)) => assert_eq!(d.flushed.len(), 1, "{d}"),
        other => panic!("the outstanding receive was not drained: {other:?}"),
    }
    // ...on the engine it was posted to: when the borrow of `inbox` ends,
    // no transport still holds it.
    for (i, d) in doubles.iter().enumerate() {
        assert_eq!(
            d.in_flight(),
            0,
            "engine {i} still has work under a dead borrow"
        );
    }
    inbox[0] = 1;
}

#[test]
fn a_scope_cannot_open_inside_another_over_the_same_engine() {
    let double = Double::new(1, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, quick());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let mut ran = false;
    let outer = run_scope(&target, Unpolled::Drain, |s| {
        let h = s.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        // An inner scope's drain would settle the outer receive behind its
        // handle's back; it is refused before its closure runs.
        let inner = run_scope(s.target(), Unpolled::Drain, |_| {
            ran = true;
            Ok::<_, TransportError>(())
        });
        assert!(matches!(inner, Err(ScopeError::Nested)), "{inner:?}");
        double.complete_all();
        h.wait(Duration::from_secs(1))?;
        Ok::<_, TransportError>(())
    });
    assert!(!ran, "the nested closure ran");
    outer.expect("the outer scope ends cleanly");
    // Closed again: the next scope opens.
    run_scope(&target, Unpolled::Drain, |_| Ok::<_, TransportError>(())).unwrap();
}
