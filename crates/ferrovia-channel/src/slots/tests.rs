//! The slot table's bookkeeping: signalled sends completing the
//! unsignalled ones before them, stale ids, detached slots, one take.

use super::*;

fn done(s: &Slots, (i, g): (u32, u32)) -> Option<Completion> {
    match s.state(i, g) {
        Some(State::Done) => Some(s.done[i as usize]),
        _ => None,
    }
}

#[test]
fn a_signalled_send_completes_the_unsignalled_ones_before_it() {
    let mut s = Slots::new(&[4, 4], &[4, 4], 0);
    let a = s.alloc(0, Queue::Send, &[], false);
    let b = s.alloc(0, Queue::Send, &[], false);
    let other_peer = s.alloc(1, Queue::Send, &[], false);
    let c = s.alloc(0, Queue::Send, &[], false);
    assert_eq!(s.pending(), 4);
    s.route(&Completion {
        wr_id: wr_id(c.0, c.1),
        byte_len: 9,
        ..Default::default()
    });
    assert!(done(&s, a).is_some() && done(&s, b).is_some());
    assert_eq!(done(&s, c).unwrap().byte_len, 9);
    assert!(
        done(&s, other_peer).is_none(),
        "another peer's queue is independent"
    );
    assert_eq!(s.outstanding_send, vec![0, 1]);
}

#[test]
fn stale_and_foreign_wr_ids_are_ignored() {
    let mut s = Slots::new(&[2], &[2], 0);
    let a = s.alloc(0, Queue::Recv, &[], false);
    s.route(&Completion {
        wr_id: wr_id(a.0, a.1 + 1),
        ..Default::default()
    });
    s.route(&Completion {
        wr_id: u64::MAX,
        ..Default::default()
    });
    assert!(done(&s, a).is_none());
    assert_eq!(s.pending(), 1);
}

#[test]
fn detached_slots_free_on_completion_and_keep_errors() {
    let mut s = Slots::new(&[2], &[2], 0);
    let free_before = s.free.len();
    let a = s.alloc(0, Queue::Recv, &[], false);
    s.detach(a.0, a.1);
    s.route(&Completion {
        wr_id: wr_id(a.0, a.1),
        status: WcStatus::WR_FLUSH_ERR,
        ..Default::default()
    });
    assert_eq!(s.free.len(), free_before);
    assert_eq!(s.unobserved.len(), 1);
    assert_eq!(s.unobserved[0].status, WcStatus::WR_FLUSH_ERR);
    // The slot is reused with a new epoch, and the old ticket no longer
    // matches it.
    let b = s.alloc(0, Queue::Recv, &[], false);
    assert_eq!(b.0, a.0);
    assert_ne!(b.1, a.1);
    assert!(s.state(a.0, a.1).is_none());
    assert!(matches!(s.take(a.0, a.1, &mut Landing::new()), Look::Gone));
}

#[test]
fn taking_a_completion_releases_the_slot_once() {
    let mut s = Slots::new(&[2], &[2], 0);
    let a = s.alloc(0, Queue::Recv, &[RawBuf::default(); 2], false);
    let mut out = Landing::new();
    assert!(matches!(s.take(a.0, a.1, &mut out), Look::Pending));
    s.route(&Completion {
        wr_id: wr_id(a.0, a.1),
        byte_len: 3,
        ..Default::default()
    });
    assert!(matches!(s.take(a.0, a.1, &mut out), Look::Done));
    assert_eq!((out.completion.byte_len, out.nbufs), (3, 2));
    assert!(matches!(s.take(a.0, a.1, &mut out), Look::Gone));
    assert_eq!(s.pending(), 0);
}

#[test]
fn a_send_done_in_the_post_is_settled_only_when_alone() {
    let mut s = Slots::new(&[4, 4], &[4, 4], 0);
    let ok = |(i, g): (u32, u32)| Completion {
        wr_id: wr_id(i, g),
        ..Default::default()
    };
    let free = s.free_count();
    // Alone on its peer: settled, its slot free again and
    // nothing left outstanding.
    let a = s.alloc(1, Queue::Send, &[], false);
    assert!(s.settle_sole(a.0, &ok(a)));
    assert_eq!(s.state(a.0, a.1), None, "released");
    assert_eq!(s.free_count(), free);
    assert_eq!(s.outstanding_send, vec![0, 0]);
    // Behind an earlier send of the same peer: left to `route`, which
    // completes that one too.
    let b = s.alloc(0, Queue::Send, &[], false);
    let c = s.alloc(0, Queue::Send, &[], false);
    assert!(!s.settle_sole(c.0, &ok(c)));
    assert_eq!(s.state(c.0, c.1), Some(State::Pending), "nothing changed");
    // Not its completion, a failure, or a dropped handle: refused too.
    let d = s.alloc(1, Queue::Send, &[], false);
    assert!(!s.settle_sole(d.0, &ok(b)));
    let failed = Completion {
        status: WcStatus::REM_ACCESS_ERR,
        ..ok(d)
    };
    assert!(!s.settle_sole(d.0, &failed));
    s.detach(d.0, d.1);
    assert!(!s.settle_sole(d.0, &ok(d)));
    assert_eq!(s.outstanding_send, vec![2, 1]);
}
