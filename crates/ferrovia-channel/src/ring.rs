//! A peer's send requests in posting order (their slot indices), the
//! order their completions arrive in: a fixed ring, a power of two long,
//! so pushing and popping are a mask and a store or a load.

pub(crate) struct SendRing {
    slots: Box<[u32]>,
    mask: usize,
    /// Positions (wrapping counters) of the oldest entry and one past the
    /// newest.
    head: usize,
    tail: usize,
}

impl SendRing {
    /// A ring with room for `depth` requests (the send queue's depth,
    /// which posting never exceeds).
    pub(crate) fn new(depth: u32) -> SendRing {
        let cap = (depth as usize).max(1).next_power_of_two();
        SendRing {
            slots: vec![0; cap].into_boxed_slice(),
            mask: cap - 1,
            head: 0,
            tail: 0,
        }
    }

    fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    #[inline]
    pub(crate) fn push_back(&mut self, index: u32) {
        if self.len() == self.slots.len() {
            self.grow();
        }
        self.slots[self.tail & self.mask] = index;
        self.tail = self.tail.wrapping_add(1);
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<u32> {
        if self.head == self.tail {
            return None;
        }
        let index = self.slots[self.head & self.mask];
        self.head = self.head.wrapping_add(1);
        Some(index)
    }

    /// Removes the newest entry for `index` (undoing a push whose request
    /// the transport refused), keeping the others in order.
    pub(crate) fn remove_newest(&mut self, index: u32) {
        let Some(back) =
            (0..self.len()).rfind(|&i| self.slots[self.head.wrapping_add(i) & self.mask] == index)
        else {
            return;
        };
        for i in back..self.len() - 1 {
            let at = self.head.wrapping_add(i);
            self.slots[at & self.mask] = self.slots[at.wrapping_add(1) & self.mask];
        }
        self.tail = self.tail.wrapping_sub(1);
    }

    /// Doubles the room. Posting reserves queue room first, so the ring
    /// never holds more than the queue's depth: this is not reached.
    #[cold]
    fn grow(&mut self) {
        let mut bigger = SendRing::new((2 * self.slots.len()) as u32);
        while let Some(i) = self.pop_front() {
            bigger.push_back(i);
        }
        *self = bigger;
    }
}

#[cfg(test)]
mod tests {
    use super::SendRing;

    fn drain(r: &mut SendRing) -> Vec<u32> {
        std::iter::from_fn(|| r.pop_front()).collect()
    }

    #[test]
    fn keeps_posting_order_across_the_wrap_and_beyond_its_room() {
        let mut r = SendRing::new(3);
        for round in 0..5u32 {
            for i in 0..4 {
                r.push_back(round * 10 + i);
            }
            assert_eq!(
                drain(&mut r),
                (0..4).map(|i| round * 10 + i).collect::<Vec<_>>()
            );
        }
        (0..9).for_each(|i| r.push_back(i));
        assert_eq!(drain(&mut r), (0..9).collect::<Vec<_>>());
    }

    #[test]
    fn removing_the_newest_entry_of_an_index_keeps_the_rest_in_order() {
        let mut r = SendRing::new(4);
        (0..3).for_each(|i| r.push_back(i));
        assert_eq!(drain(&mut r), vec![0, 1, 2]);
        // Holds 9, 9, 1, 2 across the wrap.
        [9, 9, 1, 2].into_iter().for_each(|i| r.push_back(i));
        r.remove_newest(9);
        assert_eq!(drain(&mut r), vec![9, 1, 2]);
        r.push_back(5);
        r.remove_newest(7);
        assert_eq!(drain(&mut r), vec![5]);
    }
}
