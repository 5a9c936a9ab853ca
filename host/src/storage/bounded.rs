//! A map of values by storage key within a count and a byte budget, the oldest let go first:
//! what the host keeps of records in memory for a moment (the events committed and not yet
//! fanned out, `fresh`; the events the engine's attempts use, `delivery::recent`).

use std::collections::VecDeque;

use foldhash::HashMap;

/// Values by key, at most `max_count` of them and `max_bytes` of their sizes (each given with
/// it: its stored record's), the oldest let go first. Not locked: its owner wraps it.
#[derive(Debug)]
pub struct Bounded<V> {
    max_count: usize,
    max_bytes: usize,
    /// Each value by its key, with its size and the number it was inserted under.
    entries: HashMap<String, (V, usize, u64)>,
    /// The keys in the order they were inserted, with their numbers (those removed among them,
    /// until they reach the front or the order is compacted).
    order: VecDeque<(u64, String)>,
    /// The sum of the sizes kept.
    bytes: usize,
    /// The number the next value is inserted under.
    next: u64,
    /// The number of the first value inserted since the last [`Bounded::forget_stale`].
    since: u64,
}

impl<V> Bounded<V> {
    /// Empty, within `max_count` values and `max_bytes` of their sizes.
    pub fn new(max_count: usize, max_bytes: usize) -> Self {
        Self {
            max_count,
            max_bytes,
            entries: HashMap::default(),
            order: VecDeque::new(),
            bytes: 0,
            next: 0,
            since: 0,
        }
    }

    /// The value under `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key).map(|(value, ..)| value)
    }

    /// Keeps `value` of `bytes` under `key` (replacing what was kept under it), letting the
    /// oldest go as needed. One larger than the whole budget is not kept, and nothing goes for
    /// it; returns whether it was kept.
    pub fn insert(&mut self, key: String, value: V, bytes: usize) -> bool {
        if bytes > self.max_bytes || self.max_count == 0 {
            return false;
        }
        while self.entries.len() >= self.max_count || self.bytes + bytes > self.max_bytes {
            let Some((number, oldest)) = self.order.pop_front() else {
                break;
            };
            self.let_go(number, oldest);
        }
        let number = self.next;
        self.next += 1;
        self.bytes += bytes;
        self.order.push_back((number, key.clone()));
        if let Some((_, size, _)) = self.entries.insert(key, (value, bytes, number)) {
            self.bytes -= size;
        }
        // Removed keys stay in the order until they reach its front: past twice the values it
        // may keep, the order drops them all at once.
        if self.order.len() > 2 * self.max_count {
            let entries = &self.entries;
            self.order
                .retain(|(number, key)| entries.get(key).is_some_and(|(.., n)| n == number));
        }
        true
    }

    /// Takes the value under `key` out, with its size.
    pub fn remove(&mut self, key: &str) -> Option<(V, usize)> {
        let (value, size, _) = self.entries.remove(key)?;
        self.removed(size);
        Some((value, size))
    }

    /// Accounts for a value of `size` taken out of `entries`: its bytes go, and once none is
    /// left, the order's keys (all of them removed ones) go too.
    fn removed(&mut self, size: usize) {
        self.bytes -= size;
        if self.entries.is_empty() {
            self.order.clear();
        }
    }

    /// Lets go the values inserted before the last call: those that stayed through a whole
    /// interval between two calls.
    pub fn forget_stale(&mut self) {
        let since = self.since;
        while self
            .order
            .front()
            .is_some_and(|(inserted, _)| *inserted < since)
        {
            if let Some((inserted, key)) = self.order.pop_front() {
                self.let_go(inserted, key);
            }
        }
        if self.entries.is_empty() {
            self.clear();
        }
        self.since = self.next;
    }

    /// Lets every value go, with the room they took.
    pub fn clear(&mut self) {
        *self = Self {
            next: self.next,
            since: self.since,
            ..Self::new(self.max_count, self.max_bytes)
        };
    }

    /// How many values are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The sum of the sizes of the values kept.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The values the map has room for without growing (0 once cleared).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Lets the value under `key` go if it is still the one inserted under `number` (one lookup;
    /// one inserted again since goes back).
    fn let_go(&mut self, number: u64, key: String) {
        match self.entries.remove(&key) {
            Some((value, size, inserted)) if inserted != number => {
                self.entries.insert(key, (value, size, inserted));
            }
            Some((_, size, _)) => self.removed(size),
            None => {}
        }
    }

    #[cfg(test)]
    fn order_len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(map: &Bounded<usize>) -> Vec<usize> {
        let mut kept: Vec<usize> = map.entries.values().map(|(v, ..)| *v).collect();
        kept.sort_unstable();
        kept
    }

    fn insert(map: &mut Bounded<usize>, n: usize, bytes: usize) -> bool {
        map.insert(format!("k{n}"), n, bytes)
    }

    #[test]
    fn the_oldest_go_first_past_the_count_and_past_the_bytes() {
        let mut map = Bounded::new(3, usize::MAX);
        for n in 0..5 {
            insert(&mut map, n, 10);
        }
        assert_eq!(keys(&map), [2, 3, 4]);
        let mut map = Bounded::new(10, 35);
        for n in 0..4 {
            insert(&mut map, n, 10);
        }
        // 40 bytes do not fit in 35: the oldest went.
        assert_eq!(keys(&map), [1, 2, 3]);
        assert_eq!(map.bytes(), 30);
    }

    #[test]
    fn one_larger_than_the_budget_is_not_kept_and_nothing_goes_for_it() {
        let mut map = Bounded::new(10, 100);
        insert(&mut map, 0, 40);
        insert(&mut map, 1, 40);
        assert!(!insert(&mut map, 2, 101));
        assert_eq!(keys(&map), [0, 1]);
        assert!(
            !Bounded::new(0, 100).insert("k".into(), 0, 1),
            "no room at all"
        );
    }

    #[test]
    fn one_kept_again_under_its_key_is_replaced_and_counts_once() {
        let mut map = Bounded::new(2, usize::MAX);
        insert(&mut map, 0, 10);
        map.insert("k0".into(), 7, 20);
        assert_eq!(map.get("k0"), Some(&7));
        assert_eq!((map.len(), map.bytes()), (1, 20));
        insert(&mut map, 1, 10);
        // Two keys in two places: both kept; the replaced one is now the older.
        assert_eq!(keys(&map), [1, 7]);
        insert(&mut map, 2, 10);
        assert_eq!(keys(&map), [1, 2]);
    }

    #[test]
    fn a_value_removed_takes_no_room_and_the_order_does_not_grow_past_twice_the_count() {
        let mut map = Bounded::new(3, usize::MAX);
        for n in 0..100 {
            insert(&mut map, n, 10);
            if n % 10 != 0 {
                assert_eq!(map.remove(&format!("k{n}")), Some((n, 10)));
            }
        }
        // Of those not removed (0, 10, …, 90), 90 and the two before it were kept, and the
        // oldest of them went for each value inserted after it (91, removed since).
        assert_eq!(keys(&map), [80, 90]);
        assert!(map.order_len() <= 2 * 3 + 1);
        assert_eq!(map.bytes(), 20);
    }

    #[test]
    fn those_inserted_before_the_last_forget_go_at_the_next_and_with_the_last_the_room() {
        let mut map = Bounded::new(10, usize::MAX);
        insert(&mut map, 0, 10);
        insert(&mut map, 1, 10);
        map.forget_stale();
        assert_eq!(keys(&map), [0, 1], "inserted since the last");
        insert(&mut map, 2, 10);
        map.forget_stale();
        assert_eq!(keys(&map), [2]);
        assert_eq!(map.bytes(), 10);
        map.forget_stale();
        assert!(map.is_empty() && map.order_len() == 0);
        assert_eq!((map.bytes(), map.capacity()), (0, 0), "the room went too");
        insert(&mut map, 3, 10);
        map.forget_stale();
        assert_eq!(keys(&map), [3], "kept again afterwards");
    }
}
