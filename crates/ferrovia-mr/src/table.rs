//! The lookup structure behind the registry: a B+ tree of address ranges
//! that also answers interval queries.
//!
//! Entries are ranges `[start, end)` with a unique `id`, ordered by
//! `(start, id)` in the leaves of a B+ tree (up to 16 per node, all leaves
//! at one depth). An inner node keeps, for each child, the smallest key
//! and the largest `end` below it, and every node the largest end before
//! each lane. Inserting and removing cost O(log n): one descent,
//! splitting, merging or sharing nodes on the way back. A full node first
//! lends a lane to its left neighbour, so ascending inserts (successive
//! allocations) fill nodes rather than leave them half full.
//!
//! A view lookup descends once to the entry with the nearest start at or
//! before the address (the floor), taking on the way the largest end of
//! everything ordered before it. If that is below the range's end, no
//! other entry can hold the range and the floor is the answer (or there is
//! none): the common case, with registrations that do not overlap there.
//! Otherwise a walk visits the children whose smallest start is at or
//! before the address and whose largest end reaches the range's end; each
//! such child is on the descent's path or holds an answer, so the walk
//! costs O(log n) per entry holding the range, however long the others
//! are. With a registration inside an arena registration that is two.
//!
//! Within a node the descent finds its lane in two rounds of three
//! comparisons each, summed rather than branched on (which way it turns is
//! as random as the addresses asked for, so a branch would often be
//! mispredicted); a level is a few cache lines of one node.

use std::ops::ControlFlow;

/// Lanes per node.
const B: usize = 16;
// The descent searches a node in quarters of four lanes.
const _: () = assert!(B == 16);
/// The fewest lanes a node other than the root has.
const MIN: usize = B / 2;
/// No node or value.
const NIL: u32 = u32::MAX;
/// The start of an unused lane: after every address a query asks for
/// (an address below some entry's end is below `usize::MAX`).
const PAD: usize = usize::MAX;

/// A leaf (lanes are entries) or an inner node (lanes are children).
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Node {
    /// An entry's first address, or a child's smallest; `PAD` if unused.
    starts: [usize; B],
    /// An entry's value, or a child node.
    links: [u32; B],
    /// The largest end among the lanes before each (0 for the first).
    before: [usize; B],
    /// One past an entry's last address, or a child's largest such end;
    /// 0 if unused.
    ends: [usize; B],
    /// An entry's id, or that of a child's first entry.
    ids: [usize; B],
    len: u32,
}

impl Node {
    const EMPTY: Node = Node {
        starts: [PAD; B],
        links: [NIL; B],
        before: [0; B],
        ends: [0; B],
        ids: [0; B],
        len: 0,
    };

    fn len(&self) -> usize {
        self.len as usize
    }

    fn key(&self, i: usize) -> (usize, usize) {
        (self.starts[i], self.ids[i])
    }

    fn lane(&self, i: usize) -> Lane {
        Lane {
            start: self.starts[i],
            end: self.ends[i],
            id: self.ids[i],
            link: self.links[i],
        }
    }

    fn write(&mut self, i: usize, lane: Lane) {
        self.starts[i] = lane.start;
        self.ends[i] = lane.end;
        self.ids[i] = lane.id;
        self.links[i] = lane.link;
    }

    /// A node holding `lanes`.
    fn of(lanes: &[Lane]) -> Node {
        let mut node = Node::EMPTY;
        for (i, &lane) in lanes.iter().enumerate() {
            node.write(i, lane);
        }
        node.len = index(lanes.len());
        node.recount_after(0);
        node
    }

    /// Recomputes `before` after lane `i` changed (lanes up to `i` keep
    /// theirs).
    fn recount_after(&mut self, i: usize) {
        for j in i + 1..B {
            self.before[j] = self.before[j - 1].max(self.ends[j - 1]);
        }
    }

    /// Replaces lane `i`.
    fn set(&mut self, i: usize, lane: Lane) {
        self.write(i, lane);
        self.recount_after(i);
    }

    /// Inserts `lane` at `i` (the node has room).
    fn insert(&mut self, i: usize, lane: Lane) {
        let len = self.len();
        debug_assert!(len < B && i <= len);
        self.starts.copy_within(i..len, i + 1);
        self.ends.copy_within(i..len, i + 1);
        self.ids.copy_within(i..len, i + 1);
        self.links.copy_within(i..len, i + 1);
        self.len += 1;
        self.set(i, lane);
    }

    /// Removes lane `i`; what it held.
    fn remove(&mut self, i: usize) -> Lane {
        let (lane, len) = (self.lane(i), self.len());
        self.starts.copy_within(i + 1..len, i);
        self.ends.copy_within(i + 1..len, i);
        self.ids.copy_within(i + 1..len, i);
        self.links.copy_within(i + 1..len, i);
        self.len -= 1;
        self.write(len - 1, UNUSED);
        self.recount_after(i);
        lane
    }

    /// What the parent keeps for this node.
    fn summary(&self, link: u32) -> Lane {
        Lane {
            start: self.starts[0],
            end: self.before[B - 1].max(self.ends[B - 1]),
            id: self.ids[0],
            link,
        }
    }

    /// How many lanes after the first start at or before `addr`: the
    /// child holding the floor of `addr`, or in a leaf its lane (if the
    /// first lane starts in time). The lanes are sorted (unused ones
    /// last), so lanes 4, 8 and 12 tell the quarter and the next three
    /// lanes of that quarter the rest: two rounds of three loads side by
    /// side, and no branch.
    fn floor_lane(&self, addr: usize) -> usize {
        let at_or_before = |lanes: [usize; 3]| -> usize {
            lanes
                .iter()
                .map(|&i| usize::from(self.starts[i] <= addr))
                .sum()
        };
        let quarter = 4 * at_or_before([4, 8, 12]);
        quarter + at_or_before([quarter + 1, quarter + 2, quarter + 3])
    }

    /// The last lane whose key is at or before `key`.
    fn last_at_or_before(&self, key: (usize, usize)) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }
}

/// What an unused lane holds.
const UNUSED: Lane = Lane {
    start: PAD,
    end: 0,
    id: 0,
    link: NIL,
};

/// One lane of a node, moved as a whole.
#[derive(Clone, Copy)]
struct Lane {
    start: usize,
    end: usize,
    id: usize,
    link: u32,
}

/// A table of ranges with values: insert, remove and interval queries in
/// O(log n). Ids must be unique among live entries.
pub(crate) struct Table<T> {
    nodes: Vec<Node>,
    /// Indices of unused nodes.
    free_nodes: Vec<u32>,
    /// The entries' values; `None` in an unused slot.
    values: Vec<Option<T>>,
    /// Indices of unused value slots.
    free_values: Vec<u32>,
    root: u32,
    /// Levels of nodes: 1 while the root is a leaf.
    height: u32,
    len: usize,
}

/// An entry a query found.
pub(crate) struct Hit<'a, T> {
    /// Its first address.
    pub(crate) start: usize,
    /// One past its last address.
    pub(crate) end: usize,
    /// Its id.
    pub(crate) id: usize,
    /// Its value.
    pub(crate) value: &'a T,
}

impl<T> Clone for Hit<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Hit<'_, T> {}

impl<T> Hit<'_, T> {
    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }
}

/// Where a descent for an address ended.
struct Floor {
    /// The leaf and lane of the entry with the largest `(start, id)`
    /// starting at or before the address, if any.
    at: Option<(u32, usize)>,
    /// The largest end among entries ordered before it (0 if none).
    before: usize,
    /// The largest end among entries starting at or before the address.
    upto: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            nodes: vec![Node::EMPTY],
            free_nodes: Vec::new(),
            values: Vec::new(),
            free_values: Vec::new(),
            root: 0,
            height: 1,
            len: 0,
        }
    }
}

impl<T> Table<T> {
    /// Adds `[start, end)` (not empty) as entry `id` (not live).
    pub(crate) fn insert(&mut self, start: usize, end: usize, id: usize, value: T) {
        debug_assert!(start < end);
        let link = match self.free_values.pop() {
            Some(at) => {
                self.values[at as usize] = Some(value);
                at
            }
            None => {
                self.values.push(Some(value));
                index(self.values.len() - 1)
            }
        };
        let lane = Lane {
            start,
            end,
            id,
            link,
        };
        if let Some(right) = self.insert_below(self.root, self.height, lane) {
            // The root split: a new root above both halves.
            let left = self.nodes[self.root as usize].summary(self.root);
            let right = self.nodes[right as usize].summary(right);
            self.root = self.alloc(Node::of(&[left, right]));
            self.height += 1;
        }
        self.len += 1;
    }

    /// Removes the entry starting at `start` with `id`; its value, or
    /// `None` if there is no such entry.
    pub(crate) fn remove(&mut self, start: usize, id: usize) -> Option<T> {
        let link = self.remove_below(self.root, self.height, (start, id))?;
        let root = &self.nodes[self.root as usize];
        if self.height > 1 && root.len() == 1 {
            // A root with one child hands over to it.
            let child = root.links[0];
            self.release(self.root);
            self.root = child;
            self.height -= 1;
        }
        self.len -= 1;
        self.free_values.push(link);
        self.values[link as usize].take()
    }

    /// The shortest entry holding all of `[addr, end)` (`addr < end`); of
    /// equally short ones, the one with the smallest id.
    pub(crate) fn tightest(&self, addr: usize, end: usize) -> Option<Hit<'_, T>> {
        let floor = self.floor(addr);
        if floor.upto < end {
            // Nothing starting at or before `addr` reaches `end`.
            return None;
        }
        if floor.before < end {
            // Only the floor does (`upto` is the larger of its end and
            // `before`): no overlap here, the common case.
            return floor.at.map(|(leaf, i)| self.hit(leaf, i));
        }
        let mut best: Option<Hit<'_, T>> = None;
        self.covering(addr, end, |hit| {
            if best.is_none_or(|b| (hit.len(), hit.id) < (b.len(), b.id)) {
                best = Some(hit);
            }
            ControlFlow::<()>::Continue(())
        });
        best
    }

    /// The entry holding byte `addr` with the nearest start (of those
    /// starting there, the largest id).
    pub(crate) fn containing(&self, addr: usize) -> Option<Hit<'_, T>> {
        // `addr` is below some entry's end, so `addr + 1` cannot overflow
        // when there is an answer.
        let end = addr.checked_add(1)?;
        let floor = self.floor(addr);
        if floor.upto < end {
            return None;
        }
        match floor.at {
            Some((leaf, i)) if self.nodes[leaf as usize].ends[i] >= end => Some(self.hit(leaf, i)),
            _ => self.covering(addr, end, ControlFlow::Break),
        }
    }

    /// Calls `f` on every entry holding all of `[addr, end)` (`addr <
    /// end`), nearest start first (by descending `(start, id)`), until it
    /// breaks; what it broke with.
    pub(crate) fn covering<'a, R>(
        &'a self,
        addr: usize,
        end: usize,
        mut f: impl FnMut(Hit<'a, T>) -> ControlFlow<R>,
    ) -> Option<R> {
        match self.walk(self.root, self.height, addr, end, &mut f) {
            ControlFlow::Break(r) => Some(r),
            ControlFlow::Continue(()) => None,
        }
    }

    /// One descent to the floor of `addr`.
    fn floor(&self, addr: usize) -> Floor {
        let mut n = self.root;
        let mut before = 0;
        for _ in 1..self.height {
            // The child holding the floor: the last one starting at or
            // before `addr` (or the first, if none does).
            let node = &self.nodes[n as usize];
            let child = node.floor_lane(addr);
            before = before.max(node.before[child]);
            n = node.links[child];
        }
        let leaf = &self.nodes[n as usize];
        if leaf.starts[0] > addr {
            // Only on the leftmost path, where nothing came before.
            return Floor {
                at: None,
                before: 0,
                upto: 0,
            };
        }
        let last = leaf.floor_lane(addr);
        let before = before.max(leaf.before[last]);
        Floor {
            at: Some((n, last)),
            before,
            upto: before.max(leaf.ends[last]),
        }
    }

    fn hit(&self, leaf: u32, i: usize) -> Hit<'_, T> {
        let node = &self.nodes[leaf as usize];
        let value = self.values[node.links[i] as usize].as_ref();
        Hit {
            start: node.starts[i],
            end: node.ends[i],
            id: node.ids[i],
            value: value.expect("a live entry has a value"),
        }
    }

    /// Visits, last first, the entries of `n` (at `level`; 1 is a leaf)
    /// holding `[addr, end)`.
    fn walk<'a, R>(
        &'a self,
        n: u32,
        level: u32,
        addr: usize,
        end: usize,
        f: &mut impl FnMut(Hit<'a, T>) -> ControlFlow<R>,
    ) -> ControlFlow<R> {
        let node = &self.nodes[n as usize];
        for i in (0..node.len()).rev() {
            // An entry, or a child whose entries all start later or all
            // end sooner, is skipped.
            if node.starts[i] > addr || node.ends[i] < end {
                continue;
            }
            if level == 1 {
                f(self.hit(n, i))?;
            } else {
                self.walk(node.links[i], level - 1, addr, end, f)?;
            }
        }
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, node: Node) -> u32 {
        match self.free_nodes.pop() {
            Some(at) => {
                self.nodes[at as usize] = node;
                at
            }
            None => {
                self.nodes.push(node);
                index(self.nodes.len() - 1)
            }
        }
    }

    fn release(&mut self, n: u32) {
        self.nodes[n as usize] = Node::EMPTY;
        self.free_nodes.push(n);
    }

    /// Inserts `lane` (an entry) into `n`'s subtree, `n` being at `level`;
    /// the new node right of `n` if `n` split.
    fn insert_below(&mut self, n: u32, level: u32, lane: Lane) -> Option<u32> {
        let key = (lane.start, lane.id);
        let node = &self.nodes[n as usize];
        if level == 1 {
            let at = node.last_at_or_before(key).map_or(0, |i| i + 1);
            return self.insert_lane(n, at, lane);
        }
        let mut i = node.last_at_or_before(key).unwrap_or(0);
        let full = |m: u32| self.nodes[m as usize].len() == B;
        if i > 0 && full(node.links[i]) && !full(node.links[i - 1]) {
            // Room on the left: lend it the child's first lane rather than
            // split the child. Ascending inserts (addresses of successive
            // allocations) then fill nodes instead of leaving them half
            // full, and the tree stays a level lower.
            self.shift_left(n, i);
            if key < self.nodes[n as usize].key(i) {
                i -= 1;
            }
        }
        let child = self.nodes[n as usize].links[i];
        let split = self.insert_below(child, level - 1, lane);
        self.refresh(n, i);
        let right = split?;
        let summary = self.nodes[right as usize].summary(right);
        self.insert_lane(n, i + 1, summary)
    }

    /// Moves the first lane of `n`'s child `i` to the end of child
    /// `i - 1` (which has room).
    fn shift_left(&mut self, n: u32, i: usize) {
        let [left, child] = [i - 1, i].map(|j| self.nodes[n as usize].links[j]);
        let lane = self.nodes[child as usize].remove(0);
        let left_node = &mut self.nodes[left as usize];
        left_node.insert(left_node.len(), lane);
        self.refresh(n, i - 1);
        self.refresh(n, i);
    }

    /// Inserts `lane` at `at` in `n`, splitting `n` if it is full; the new
    /// right half if it split.
    fn insert_lane(&mut self, n: u32, at: usize, lane: Lane) -> Option<u32> {
        let node = &mut self.nodes[n as usize];
        if node.len() < B {
            node.insert(at, lane);
            return None;
        }
        let lanes: [Lane; B] = std::array::from_fn(|i| node.lane(i));
        *node = Node::of(&lanes[..MIN]);
        let mut right = Node::of(&lanes[MIN..]);
        if at <= MIN {
            node.insert(at, lane);
        } else {
            right.insert(at - MIN, lane);
        }
        Some(self.alloc(right))
    }

    /// Removes the entry with `key` from `n`'s subtree, `n` being at
    /// `level`; its value slot, or `None` if there is none. Leaves every
    /// node below `n` at least half full.
    fn remove_below(&mut self, n: u32, level: u32, key: (usize, usize)) -> Option<u32> {
        let node = &mut self.nodes[n as usize];
        let i = node.last_at_or_before(key)?;
        if level == 1 {
            return (node.key(i) == key).then(|| node.remove(i).link);
        }
        let child = node.links[i];
        let link = self.remove_below(child, level - 1, key)?;
        if self.nodes[child as usize].len() < MIN {
            self.rebalance(n, i);
        } else {
            self.refresh(n, i);
        }
        Some(link)
    }

    /// Child `i` of `n` is below half full: merges it with a neighbour, or
    /// shares the neighbour's lanes evenly with it.
    fn rebalance(&mut self, n: u32, i: usize) {
        // `n` has two children at least (a root with one is replaced by
        // it; any other node is half full).
        let (l, r) = if i > 0 { (i - 1, i) } else { (i, i + 1) };
        let (a, b) = {
            let node = &self.nodes[n as usize];
            (node.links[l], node.links[r])
        };
        let (mut lanes, mut count) = ([UNUSED; 2 * B], 0);
        for m in [a, b] {
            let node = &self.nodes[m as usize];
            for j in 0..node.len() {
                lanes[count] = node.lane(j);
                count += 1;
            }
        }
        let lanes = &lanes[..count];
        if lanes.len() <= B {
            self.nodes[a as usize] = Node::of(lanes);
            self.release(b);
            self.nodes[n as usize].remove(r);
            self.refresh(n, l);
        } else {
            let half = lanes.len() / 2;
            self.nodes[a as usize] = Node::of(&lanes[..half]);
            self.nodes[b as usize] = Node::of(&lanes[half..]);
            self.refresh(n, l);
            self.refresh(n, r);
        }
    }

    /// Updates what `n` keeps for its child `i`.
    fn refresh(&mut self, n: u32, i: usize) {
        let child = self.nodes[n as usize].links[i];
        let summary = self.nodes[child as usize].summary(child);
        self.nodes[n as usize].set(i, summary);
    }
}

/// `i` as a link.
fn index(i: usize) -> u32 {
    u32::try_from(i)
        .ok()
        .filter(|&i| i != NIL)
        .expect("fewer than 2^32 - 1 nodes and entries")
}

#[cfg(test)]
mod tests;
