//! The interval tree against a plain list, on random and chosen cases.

use std::ops::ControlFlow;

use super::{B, MIN, NIL, PAD, Table};

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

/// Checks `n`'s subtree (`n` at `level`): lanes in order and unused ones
/// padded, what inner nodes keep for their children exact, every node but
/// the root at least half full, all leaves at level 1; appends its keys
/// in order, and returns (its nodes, its largest end).
fn check_below<T>(
    t: &Table<T>,
    n: u32,
    level: u32,
    root: bool,
    keys: &mut Vec<(usize, usize)>,
) -> (usize, usize) {
    let node = &t.nodes[n as usize];
    let len = node.len();
    assert!(len <= B);
    if !root {
        assert!(len >= MIN, "node {n} holds {len} lanes");
    } else if level > 1 {
        assert!(len >= 2, "an inner root with {len} children");
    }
    for i in len..B {
        assert_eq!(node.lane(i).start, PAD);
        assert_eq!((node.ends[i], node.ids[i], node.links[i]), (0, 0, NIL));
    }
    let (mut nodes, mut max_end) = (1, 0);
    for i in 0..B {
        assert_eq!(
            node.before[i],
            node.ends[..i].iter().copied().max().unwrap_or(0)
        );
    }
    for i in 0..len {
        max_end = max_end.max(node.ends[i]);
        if level == 1 {
            assert!(node.starts[i] < node.ends[i]);
            let value = t.values[node.links[i] as usize].as_ref();
            assert!(value.is_some(), "entry {:?} has no value", node.key(i));
            keys.push(node.key(i));
            continue;
        }
        let child = node.links[i];
        let first = keys.len();
        let (below, child_max) = check_below(t, child, level - 1, false, keys);
        nodes += below;
        assert_eq!(node.key(i), keys[first], "smallest key of child {i}");
        assert_eq!(node.ends[i], child_max, "largest end of child {i}");
    }
    (nodes, max_end)
}

fn check<T>(t: &Table<T>) {
    let mut keys = Vec::new();
    let (nodes, _) = check_below(t, t.root, t.height, true, &mut keys);
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys out of order");
    assert_eq!(keys.len(), t.len);
    assert_eq!(nodes + t.free_nodes.len(), t.nodes.len(), "nodes leak");
    let live = t.values.iter().filter(|v| v.is_some()).count();
    assert_eq!(live, t.len, "values leak");
    assert_eq!(live + t.free_values.len(), t.values.len());
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
        assert_eq!((t.len, t.height), (0, 1), "back to one empty leaf");
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
    assert_eq!(t.remove(990, 2 + 99), Some(0));
    check(&t);
    assert_eq!(t.containing(995).map(|h| h.id), None);
    assert_eq!(t.containing(985).map(|h| h.id), Some(2 + 98));
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

#[test]
fn ascending_and_descending_inserts_stay_shallow() {
    for descending in [false, true] {
        let mut t = Table::default();
        for i in 0..10_000usize {
            let k = if descending { 10_000 - i } else { i };
            t.insert(k * 4096, k * 4096 + 4000, i + 1, ());
        }
        check(&t);
        // Nodes at least half full: at most 1250 leaves, then 156, 19
        // and 2 nodes, then the root.
        assert!(t.height <= 5, "height {}", t.height);
        if !descending {
            // Ascending inserts fill nodes: 625 leaves, 40 and 3 nodes,
            // the root (and a few not yet full at the right edge).
            assert_eq!(t.height, 4);
            let nodes = t.nodes.len() - t.free_nodes.len();
            assert!(nodes <= 625 + 40 + 3 + 1 + 4, "{nodes} nodes");
        }
    }
}

#[test]
fn growing_and_shrinking_merges_and_shares_at_every_level() {
    let mut rng = Rng(0x5eed);
    let mut t = Table::default();
    let mut m = Model::default();
    for round in 0..3 {
        // Grow to a few thousand (four levels), then shrink to a few.
        for id in 1..=3000 {
            let id = round * 10_000 + id;
            let start = rng.below(1 << 20);
            let len = 1 + rng.below(4096);
            t.insert(start, start + len, id, id * 10);
            m.entries.push((start, start + len, id));
        }
        check(&t);
        assert!(t.height >= 4, "height {}", t.height);
        while m.entries.len() > 5 {
            let (start, _, id) = m.entries.swap_remove(rng.below(m.entries.len()));
            assert_eq!(t.remove(start, id), Some(id * 10));
            if m.entries.len() % 101 == 0 {
                check(&t);
                let addr = rng.below(1 << 20);
                agree(&t, &m, addr, addr + 1 + rng.below(64));
            }
        }
        check(&t);
    }
}
