//! The lookup structure behind the registry: an interval tree.
//!
//! Entries are address ranges `[start, end)` with a unique `id`, kept in
//! an AVL tree ordered by `(start, id)` whose nodes also record the
//! largest `end` in their subtree. Inserting and removing cost
//! O(log n) (a descent, and rotations on the way back). A query for the
//! entries holding a range `[addr, end)` visits the nodes on the search
//! path for `addr` and, below them, only subtrees whose largest `end`
//! reaches `end`, each of which holds at least one answer: O(log n) per
//! entry reported, however long the other entries are and however many
//! start below `addr`. With non-overlapping registrations that is one
//! answer; a registration inside an arena registration makes two.
//!
//! The nodes live in one vector (slots of removed entries are reused),
//! linked by `u32` indices; what a node carries for its entry is kept in a
//! second vector, so a descent reads only the small nodes.

use std::cmp::Ordering;
use std::ops::ControlFlow;

/// No node.
const NIL: u32 = u32::MAX;

/// What a descent reads.
#[derive(Clone, Copy)]
struct Node {
    start: usize,
    end: usize,
    /// The largest `end` in this node's subtree (0 for none): a subtree
    /// whose `max_end` is below a range's end holds nothing covering it.
    max_end: usize,
    id: usize,
    left: u32,
    right: u32,
    /// Of the subtree, in nodes along its longest path (a leaf is 1).
    height: u32,
}

/// A table of ranges with values: insert, remove and interval queries in
/// O(log n). Ids must be unique among live entries.
pub(crate) struct Table<T> {
    nodes: Vec<Node>,
    /// The value of each node's entry, at the node's index; `None` for a
    /// free slot.
    values: Vec<Option<T>>,
    /// Indices of free slots.
    free: Vec<u32>,
    root: u32,
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

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            nodes: Vec::new(),
            values: Vec::new(),
            free: Vec::new(),
            root: NIL,
            len: 0,
        }
    }
}

impl<T> Table<T> {
    /// How many entries are live.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `[start, end)` (not empty) as entry `id` (not live).
    pub(crate) fn insert(&mut self, start: usize, end: usize, id: usize, value: T) {
        debug_assert!(start < end);
        let node = Node {
            start,
            end,
            max_end: end,
            id,
            left: NIL,
            right: NIL,
            height: 1,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.nodes[at as usize] = node;
                self.values[at as usize] = Some(value);
                at
            }
            None => {
                let at = u32::try_from(self.nodes.len())
                    .ok()
                    .filter(|&at| at != NIL)
                    .expect("fewer than 2^32 - 1 registrations");
                self.nodes.push(node);
                self.values.push(Some(value));
                at
            }
        };
        self.root = self.insert_below(self.root, at);
        self.len += 1;
    }

    /// Removes the entry starting at `start` with `id`; its value, or
    /// `None` if there is no such entry.
    pub(crate) fn remove(&mut self, start: usize, id: usize) -> Option<T> {
        let mut found = NIL;
        self.root = self.remove_below(self.root, (start, id), &mut found);
        if found == NIL {
            return None;
        }
        self.len -= 1;
        self.free.push(found);
        self.values[found as usize].take()
    }

    /// Calls `f` on every entry holding all of `[addr, end)` (`addr <
    /// end`), nearest start first (by descending `(start, id)`), until it
    /// breaks; what it broke with.
    pub(crate) fn covering<'a, B>(
        &'a self,
        addr: usize,
        end: usize,
        mut f: impl FnMut(Hit<'a, T>) -> ControlFlow<B>,
    ) -> Option<B> {
        match self.walk(self.root, addr, end, &mut f) {
            ControlFlow::Break(b) => Some(b),
            ControlFlow::Continue(()) => None,
        }
    }

    /// The shortest entry holding all of `[addr, end)`; of equally short
    /// ones, the one with the smallest id.
    pub(crate) fn tightest(&self, addr: usize, end: usize) -> Option<Hit<'_, T>> {
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
        self.covering(addr, addr.checked_add(1)?, ControlFlow::Break)
    }

    /// Reverse in-order walk of `n`'s subtree over the entries holding
    /// `[addr, end)`.
    fn walk<'a, B>(
        &'a self,
        n: u32,
        addr: usize,
        end: usize,
        f: &mut impl FnMut(Hit<'a, T>) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if n == NIL {
            return ControlFlow::Continue(());
        }
        let node = self.nodes[n as usize];
        if node.max_end < end {
            // Nothing below reaches far enough.
            return ControlFlow::Continue(());
        }
        if node.start <= addr {
            self.walk(node.right, addr, end, f)?;
            if node.end >= end {
                let value = self.values[n as usize]
                    .as_ref()
                    .expect("a linked node has a value");
                f(Hit {
                    start: node.start,
                    end: node.end,
                    id: node.id,
                    value,
                })?;
            }
        }
        // Everything to the left starts no later than this node.
        self.walk(node.left, addr, end, f)
    }

    fn key(&self, n: u32) -> (usize, usize) {
        let node = &self.nodes[n as usize];
        (node.start, node.id)
    }

    fn height(&self, n: u32) -> u32 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].height
        }
    }

    fn max_end(&self, n: u32) -> usize {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max_end
        }
    }

    /// Recomputes `n`'s height and `max_end` from its children.
    fn update(&mut self, n: u32) {
        let Node {
            left, right, end, ..
        } = self.nodes[n as usize];
        let height = 1 + self.height(left).max(self.height(right));
        let max_end = end.max(self.max_end(left)).max(self.max_end(right));
        let node = &mut self.nodes[n as usize];
        node.height = height;
        node.max_end = max_end;
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.nodes[n as usize].left;
        self.nodes[n as usize].left = self.nodes[l as usize].right;
        self.update(n);
        self.nodes[l as usize].right = n;
        self.update(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.nodes[n as usize].right;
        self.nodes[n as usize].right = self.nodes[r as usize].left;
        self.update(n);
        self.nodes[r as usize].left = n;
        self.update(r);
        r
    }

    /// Updates `n` and restores the AVL balance of its subtree (children
    /// balanced, heights differing by at most 2); the subtree's new root.
    fn balance(&mut self, n: u32) -> u32 {
        self.update(n);
        let Node { left, right, .. } = self.nodes[n as usize];
        let (hl, hr) = (self.height(left), self.height(right));
        if hl > hr + 1 {
            let l = &self.nodes[left as usize];
            if self.height(l.left) < self.height(l.right) {
                self.nodes[n as usize].left = self.rotate_left(left);
            }
            return self.rotate_right(n);
        }
        if hr > hl + 1 {
            let r = &self.nodes[right as usize];
            if self.height(r.right) < self.height(r.left) {
                self.nodes[n as usize].right = self.rotate_right(right);
            }
            return self.rotate_left(n);
        }
        n
    }

    /// Links the lone node `new` into `n`'s subtree; its new root.
    fn insert_below(&mut self, n: u32, new: u32) -> u32 {
        if n == NIL {
            return new;
        }
        if self.key(new) < self.key(n) {
            let l = self.insert_below(self.nodes[n as usize].left, new);
            self.nodes[n as usize].left = l;
        } else {
            let r = self.insert_below(self.nodes[n as usize].right, new);
            self.nodes[n as usize].right = r;
        }
        self.balance(n)
    }

    /// Unlinks the node with `key` from `n`'s subtree, noting it in
    /// `found`; the subtree's new root.
    fn remove_below(&mut self, n: u32, key: (usize, usize), found: &mut u32) -> u32 {
        if n == NIL {
            return NIL;
        }
        let Node { left, right, .. } = self.nodes[n as usize];
        match key.cmp(&self.key(n)) {
            Ordering::Less => {
                let l = self.remove_below(left, key, found);
                self.nodes[n as usize].left = l;
            }
            Ordering::Greater => {
                let r = self.remove_below(right, key, found);
                self.nodes[n as usize].right = r;
            }
            Ordering::Equal => {
                *found = n;
                if left == NIL {
                    return right;
                }
                if right == NIL {
                    return left;
                }
                // The successor takes this node's place.
                let (rest, next) = self.take_min(right);
                let node = &mut self.nodes[next as usize];
                node.left = left;
                node.right = rest;
                return self.balance(next);
            }
        }
        self.balance(n)
    }

    /// Unlinks the first node of `n`'s subtree: (the subtree's new root,
    /// that node).
    fn take_min(&mut self, n: u32) -> (u32, u32) {
        let Node { left, right, .. } = self.nodes[n as usize];
        if left == NIL {
            return (right, n);
        }
        let (rest, min) = self.take_min(left);
        self.nodes[n as usize].left = rest;
        (self.balance(n), min)
    }
}

#[cfg(test)]
mod tests;
