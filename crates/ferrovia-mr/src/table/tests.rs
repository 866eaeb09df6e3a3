//! The interval tree against a plain list, on random and chosen cases.

use std::ops::ControlFlow;

use super::{NIL, Table};

/// A plain list of (start, end, id): what the table must agree with.
#[derive(Default)]
struct Model {
    entries: Vec<(usize, usize, usize)>,
}

impl Model {
    fn covering(&self, addr: usize, end: usize) -> Vec<(usize, usize, usize)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .copied()
            .filter(|&(s, e, _)| s <= addr && end <= e)
            .collect();
        v.sort_by_key(|&(s, _, id)| std::cmp::Reverse((s, id)));
        v
    }

    fn tightest(&self, addr: usize, end: usize) -> Option<usize> {
        self.covering(addr, end)
            .into_iter()
            .min_by_key(|&(s, e, id)| (e - s, id))
            .map(|(_, _, id)| id)
    }

    fn containing(&self, addr: usize) -> Option<usize> {
        self.covering(addr, addr + 1).first().map(|&(_, _, id)| id)
    }
}

/// Checks order, heights, balance, `max_end` and the live count; the
/// subtree's (height, max_end, count).
fn check_below<T>(t: &Table<T>, n: u32, lo: Option<(usize, usize)>) -> (u32, usize, usize) {
    if n == NIL {
        return (0, 0, 0);
    }
    let node = t.nodes[n as usize];
    assert!(
        t.values[n as usize].is_some(),
        "linked node {n} has no value"
    );
    let (hl, ml, cl) = check_below(t, node.left, lo);
    let key = (node.start, node.id);
    if let Some(lo) = lo {
        assert!(lo < key, "out of order");
    }
    if node.left != NIL {
        let last = rightmost(t, node.left);
        assert!(t.key(last) < key, "left subtree not below its root");
    }
    let (hr, mr, cr) = check_below(t, node.right, Some(key));
    assert!(hl.abs_diff(hr) <= 1, "unbalanced at {key:?}: {hl} vs {hr}");
    assert_eq!(node.height, 1 + hl.max(hr), "height at {key:?}");
    let max_end = node.end.max(ml).max(mr);
    assert_eq!(node.max_end, max_end, "max_end at {key:?}");
    (node.height, max_end, cl + cr + 1)
}

fn rightmost<T>(t: &Table<T>, mut n: u32) -> u32 {
    while t.nodes[n as usize].right != NIL {
        n = t.nodes[n as usize].right;
    }
    n
}

fn check<T>(t: &Table<T>) {
    let (_, _, count) = check_below(t, t.root, None);
    assert_eq!(count, t.len());
    assert_eq!(t.len() + t.free.len(), t.nodes.len(), "slots leak");
}

fn agree(t: &Table<usize>, m: &Model, addr: usize, end: usize) {
    let mut got = Vec::new();
    t.covering(addr, end, |h| {
        assert_eq!(*h.value, h.id * 10, "value of {}", h.id);
        got.push((h.start, h.end, h.id));
        ControlFlow::<()>::Continue(())
    });
    assert_eq!(got, m.covering(addr, end), "covering [{addr}, {end})");
    assert_eq!(
        t.tightest(addr, end).map(|h| h.id),
        m.tightest(addr, end),
        "tightest [{addr}, {end})"
    );
    assert_eq!(
        t.containing(addr).map(|h| h.id),
        m.containing(addr),
        "containing {addr}"
    );
}

/// xorshift64*: deterministic randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[test]
fn random_inserts_removals_and_queries_agree_with_a_list() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut t = Table::default();
        let mut m = Model::default();
        let mut next_id = 1;
        // Small address spaces and long ranges make deep overlaps and
        // many equal starts; removals interleave to reuse slots.
        let space = [64, 512, 4096][seed as usize % 3];
        for step in 0..600 {
            if m.entries.is_empty() || rng.below(5) < 3 {
                let start = rng.below(space);
                let longest = [4, 64, space][rng.below(3)];
                let len = 1 + rng.below(longest);
                t.insert(start, start + len, next_id, next_id * 10);
                m.entries.push((start, start + len, next_id));
                next_id += 1;
            } else {
                let (start, _, id) = m.entries.swap_remove(rng.below(m.entries.len()));
                assert_eq!(t.remove(start, id), Some(id * 10));
                assert_eq!(t.remove(start, id), None, "removed twice");
            }
            if step % 7 == 0 {
                check(&t);
            }
            for _ in 0..4 {
                let addr = rng.below(space + 64);
                let end = addr + 1 + rng.below(32);
                agree(&t, &m, addr, end);
            }
        }
        check(&t);
        while let Some((start, _, id)) = m.entries.pop() {
            assert_eq!(t.remove(start, id), Some(id * 10));
        }
        check(&t);
        assert_eq!((t.len(), t.root), (0, NIL));
    }
}

#[test]
fn nested_ranges_pick_the_tightest_and_survive_removing_the_longest() {
    let mut t = Table::default();
    // An arena [0, 1000) holding disjoint [10k, 10k + 10).
    t.insert(0, 1000, 1, 0usize);
    for k in 0..100 {
        t.insert(10 * k, 10 * k + 10, 2 + k, 0);
    }
    check(&t);
    assert_eq!(t.tightest(505, 507).map(|h| h.id), Some(2 + 50));
    assert_eq!(
        t.tightest(505, 515).map(|h| h.id),
        Some(1),
        "only the arena"
    );
    assert_eq!(t.containing(999).map(|h| h.id), Some(2 + 99));
    // The longest goes: every later query stays exact.
    assert_eq!(t.remove(0, 1), Some(0));
    check(&t);
    assert_eq!(t.tightest(505, 515).map(|h| h.id), None);
    assert_eq!(t.tightest(990, 1000).map(|h| h.id), Some(2 + 99));
    assert_eq!(t.tightest(990, 1001).map(|h| h.id), None);
    // Every max_end on the path shrank with it.
    assert_eq!(t.max_end(t.root), 1000);
    assert_eq!(t.remove(990, 2 + 99), Some(0));
    assert_eq!(t.max_end(t.root), 990);
}

#[test]
fn many_entries_with_one_start_order_by_id() {
    let mut t = Table::default();
    for id in 1..=300 {
        // Same start, lengths going down then up: the tightest is in the
        // middle, the nearest (largest id) is the last.
        let len = 1 + (id as isize - 150).unsigned_abs();
        t.insert(4096, 4096 + len, id, id);
    }
    check(&t);
    assert_eq!(t.tightest(4096, 4097).map(|h| h.id), Some(150));
    assert_eq!(t.containing(4096).map(|h| h.id), Some(300));
    assert_eq!(t.tightest(4096, 4096 + 3).map(|h| h.id), Some(148));
    let mut n = 0;
    t.covering(4096, 4097, |h| {
        n += 1;
        // Nearest first: ids come down.
        assert_eq!(h.id, 301 - n);
        ControlFlow::<()>::Continue(())
    });
    assert_eq!(n, 300);
    for id in (1..=300).step_by(2) {
        assert_eq!(t.remove(4096, id), Some(id));
    }
    check(&t);
    assert_eq!(t.tightest(4096, 4097).map(|h| h.id), Some(150));
    assert_eq!(t.remove(4097, 2), None, "another start is another key");
}

#[test]
fn boundaries_are_half_open() {
    let mut t = Table::default();
    t.insert(100, 200, 1, ());
    t.insert(200, 300, 2, ());
    check(&t);
    assert_eq!(t.tightest(100, 200).map(|h| h.id), Some(1));
    assert_eq!(t.tightest(199, 200).map(|h| h.id), Some(1));
    assert_eq!(t.tightest(200, 201).map(|h| h.id), Some(2));
    assert_eq!(t.tightest(299, 300).map(|h| h.id), Some(2));
    assert!(t.tightest(199, 201).is_none(), "straddles");
    assert!(t.tightest(299, 301).is_none());
    assert!(t.tightest(99, 100).is_none());
    assert_eq!(t.containing(99).map(|h| h.id), None);
    assert_eq!(t.containing(199).map(|h| h.id), Some(1));
    assert_eq!(t.containing(200).map(|h| h.id), Some(2));
    assert_eq!(t.containing(300).map(|h| h.id), None);
    assert_eq!(t.containing(usize::MAX).map(|h| h.id), None);
    // The top of the address space.
    t.insert(usize::MAX - 10, usize::MAX, 3, ());
    assert_eq!(t.containing(usize::MAX - 1).map(|h| h.id), Some(3));
    assert_eq!(
        t.tightest(usize::MAX - 10, usize::MAX).map(|h| h.id),
        Some(3)
    );
    check(&t);
}

#[test]
fn a_search_can_stop_at_the_first_match() {
    let mut t = Table::default();
    for id in 1..=10 {
        t.insert(0, 100 * id, id, id % 3 == 0);
    }
    // Nearest first, the first whose value says yes: id 9.
    let found = t.covering(10, 20, |h| {
        if *h.value {
            ControlFlow::Break(h.id)
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(found, Some(9));
    assert_eq!(t.covering(10, 950, |h| ControlFlow::Break(h.id)), Some(10));
    assert_eq!(t.covering(10, 1001, |h| ControlFlow::Break(h.id)), None);
}
