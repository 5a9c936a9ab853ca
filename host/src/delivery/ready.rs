//! A lane's ready entries (due, read from storage, not started), grouped by the target they go
//! to, and the order a dispatch round takes them in.
//!
//! A round takes entries in due order (their keys' order) across every group, as a merge of the
//! groups' own orders, and passes over a whole group at once when the first entry of it that it
//! meets cannot start (its target, store or plugin is at its share): the group's other entries,
//! however many, cost the round nothing. So a round costs what it starts plus the groups it
//! passes over, not the length of a backlog that one target holds in front of another's entry.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, btree_map, btree_set};

use foldhash::HashMap;

use crate::model::work::Work;

/// A ready entry's work.
#[derive(Debug)]
pub(super) enum Entry {
    /// As the queue stores it, read from storage: decoded when it starts (most entries a round
    /// passes over are never decoded).
    Stored(Vec<u8>),
    /// Made in memory by the fan-out, handed over for its first attempt (see [`super::first`]):
    /// neither encoded nor decoded.
    Made(Work),
}

/// The ready entries of one lane (see the module's documentation).
#[derive(Debug, Default)]
pub(super) struct Ready {
    /// Each group's entries by key: a group is the target a delivery's key names, or an entry
    /// alone (a message, a mail) under its own key.
    groups: HashMap<String, BTreeMap<String, Entry>>,
    /// Each group's first key, with the group, in key order.
    heads: BTreeSet<(String, String)>,
    len: usize,
}

/// The group of a queue entry's key: the target it names (`work/{kind}/{due}/{store}/{target}/…`
/// for deliveries), else the key itself.
fn group_of(key: &str) -> &str {
    super::delivery_of_key(key).map_or(key, |(_, _, target)| target)
}

impl Ready {
    /// How many entries are ready.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many entries of the group of `key` (its target) are ready.
    #[cfg(test)]
    pub(super) fn ready_in_group_of(&self, key: &str) -> usize {
        self.groups.get(group_of(key)).map_or(0, BTreeMap::len)
    }

    /// Whether the entry at `key` is ready.
    #[cfg(test)]
    pub(super) fn contains(&self, key: &str) -> bool {
        self.groups
            .get(group_of(key))
            .is_some_and(|entries| entries.contains_key(key))
    }

    /// How many entries of the group of `key` (its target) are ready at or before `up_to` (all
    /// of them when `None`), counting to `at_most`.
    pub(super) fn ready_in_group_up_to(
        &self,
        key: &str,
        up_to: Option<&str>,
        at_most: usize,
    ) -> usize {
        use std::ops::Bound;
        let Some(entries) = self.groups.get(group_of(key)) else {
            return 0;
        };
        let end = up_to.map_or(Bound::Unbounded, Bound::Included);
        entries
            .range::<str, _>((Bound::Unbounded, end))
            .take(at_most)
            .count()
    }

    /// Adds the entry at `key`; returns whether it was not ready already (an entry read again
    /// keeps its place and takes the work given last).
    pub(super) fn insert(&mut self, key: String, entry: Entry) -> bool {
        let group = group_of(&key);
        let Some(entries) = self.groups.get_mut(group) else {
            let group = group.to_owned();
            self.heads.insert((key.clone(), group.clone()));
            self.groups.insert(group, BTreeMap::from([(key, entry)]));
            self.len += 1;
            return true;
        };
        // (Allocates only when the entry becomes its group's first.)
        if let Some(head) = entries.keys().next()
            && key.as_str() < head.as_str()
        {
            let group = group.to_owned();
            self.heads.remove(&(head.clone(), group.clone()));
            self.heads.insert((key.clone(), group));
        }
        let new = entries.insert(key, entry).is_none();
        self.len += usize::from(new);
        new
    }

    /// Takes the entry at `key` out, if it is ready.
    pub(super) fn remove(&mut self, key: &str) -> Option<Entry> {
        let group = group_of(key);
        let entries = self.groups.get_mut(group)?;
        let was_head = entries.keys().next().is_some_and(|head| head == key);
        let removed = entries.remove(key)?;
        self.len -= 1;
        if was_head {
            // The group's place in `heads` moves to its next entry (one key allocated for both).
            let mut head = (key.to_owned(), group.to_owned());
            self.heads.remove(&head);
            match entries.keys().next() {
                Some(next) => {
                    head.0.clone_from(next);
                    self.heads.insert(head);
                }
                None => {
                    self.groups.remove(group);
                }
            }
        }
        Some(removed)
    }

    /// The entries in key order, for one round (see [`Round`]).
    pub(super) fn round(&self) -> Round<'_> {
        Round {
            groups: &self.groups,
            heads: self.heads.iter().peekable(),
            open: BinaryHeap::new(),
            current: None,
        }
    }
}

/// A group a round has reached: its next entry, and the ones after it.
struct Open<'a> {
    key: &'a str,
    entry: &'a Entry,
    group: &'a str,
    rest: btree_map::Iter<'a, String, Entry>,
}

impl PartialEq for Open<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Open<'_> {}

impl PartialOrd for Open<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Open<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(other.key)
    }
}

/// One round over the ready entries: [`Round::next`] gives them in key order; after
/// [`Round::pass_over`], the group of the entry it gave last gives no more.
pub(super) struct Round<'a> {
    groups: &'a HashMap<String, BTreeMap<String, Entry>>,
    /// The groups not reached yet, by their first key.
    heads: std::iter::Peekable<btree_set::Iter<'a, (String, String)>>,
    /// The groups reached and not passed over, by their next key.
    open: BinaryHeap<Reverse<Open<'a>>>,
    /// The group of the entry given last, until the next call (or `pass_over`).
    current: Option<Open<'a>>,
}

impl<'a> Round<'a> {
    /// The next entry in key order: its key, its work, and its group.
    pub(super) fn next(&mut self) -> Option<(&'a str, &'a Entry, &'a str)> {
        if let Some(mut current) = self.current.take()
            && let Some((key, entry)) = current.rest.next()
        {
            current.key = key;
            current.entry = entry;
            self.open.push(Reverse(current));
        }
        let from_heads = match (self.heads.peek(), self.open.peek()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((head, _)), Some(Reverse(open))) => head.as_str() < open.key,
        };
        let next = if from_heads {
            let (_, group) = self.heads.next()?;
            let mut rest = self.groups.get(group)?.iter();
            let (key, entry) = rest.next()?;
            Open {
                key,
                entry,
                group,
                rest,
            }
        } else {
            self.open.pop()?.0
        };
        let given = (next.key, next.entry, next.group);
        self.current = Some(next);
        Some(given)
    }

    /// The group of the entry given last gives no more entries this round.
    pub(super) fn pass_over(&mut self) {
        self.current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(due: u32, store: &str, target: &str, n: u32) -> String {
        format!("work/webhook/{due:013}/{store}/{target}/evt_{n}")
    }

    /// An entry as stored, its bytes its own key's.
    fn stored(key: &str) -> Entry {
        Entry::Stored(key.as_bytes().to_vec())
    }

    fn ready(keys: &[String]) -> Ready {
        let mut ready = Ready::default();
        for k in keys {
            assert!(ready.insert(k.clone(), stored(k)));
        }
        ready
    }

    /// Every entry of a round, passing over the groups `busy` names at their first entry.
    fn taken(ready: &Ready, busy: &[&str]) -> Vec<String> {
        let mut round = ready.round();
        let mut out = Vec::new();
        while let Some((key, entry, group)) = round.next() {
            assert!(
                matches!(entry, Entry::Stored(bytes) if bytes == key.as_bytes()),
                "the entry's own bytes"
            );
            if busy.contains(&group) {
                round.pass_over();
            } else {
                out.push(key.to_owned());
            }
        }
        out
    }

    #[test]
    fn a_round_takes_every_entry_in_key_order_across_groups() {
        let mut keys = vec![
            key(3, "s1", "wh_a", 1),
            key(1, "s1", "wh_b", 2),
            key(2, "s1", "wh_a", 3),
            key(2, "s2", "wh_c", 4),
            key(5, "s1", "wh_b", 5),
            "work/message/0000000000004/msg_1".to_owned(),
            key(4, "s1", "wh_a", 6),
        ];
        let ready = ready(&keys);
        assert_eq!(ready.len(), keys.len());
        keys.sort();
        assert_eq!(taken(&ready, &[]), keys);
    }

    #[test]
    fn a_group_passed_over_gives_nothing_more_and_the_others_keep_their_order() {
        let mut keys: Vec<String> = (0..100).map(|n| key(1 + n, "loud", "wh_loud", n)).collect();
        keys.push(key(50, "quiet", "wh_quiet", 1000));
        keys.push(key(150, "quiet", "wh_quiet", 1001));
        keys.push(key(20, "other", "wh_other", 1002));
        let ready = ready(&keys);
        assert_eq!(
            taken(&ready, &["wh_loud"]),
            vec![
                key(20, "other", "wh_other", 1002),
                key(50, "quiet", "wh_quiet", 1000),
                key(150, "quiet", "wh_quiet", 1001),
            ]
        );
        // Passed over at its third entry: its first two were taken, in order with the rest.
        let mut round = ready.round();
        let mut seen = Vec::new();
        let mut loud = 0;
        while let Some((key, _, group)) = round.next() {
            if group == "wh_loud" {
                loud += 1;
                if loud == 3 {
                    round.pass_over();
                    continue;
                }
            }
            seen.push(key.to_owned());
        }
        assert_eq!(
            seen,
            vec![
                key(1, "loud", "wh_loud", 0),
                key(2, "loud", "wh_loud", 1),
                key(20, "other", "wh_other", 1002),
                key(50, "quiet", "wh_quiet", 1000),
                key(150, "quiet", "wh_quiet", 1001),
            ]
        );
    }

    #[test]
    fn work_made_in_memory_is_given_by_a_round_and_moved_out_whole() {
        let mail = |n: u32| Work::Mail {
            mail_id: format!("mail_{n}").parse().expect("id"),
        };
        let (made, stored) = (key(2, "s", "wh_a", 1), key(1, "s", "wh_a", 2));
        let mut ready = Ready::default();
        assert!(ready.insert(made.clone(), Entry::Made(mail(1))));
        assert!(ready.insert(stored.clone(), self::stored(&stored)));
        let mut round = ready.round();
        let mut given = Vec::new();
        while let Some((key, entry, _)) = round.next() {
            given.push((key.to_owned(), matches!(entry, Entry::Made(_))));
        }
        assert_eq!(given, [(stored.clone(), false), (made.clone(), true)]);
        assert!(matches!(ready.remove(&made), Some(Entry::Made(work)) if work == mail(1)));
        // Given again, an entry keeps its place and takes the work given last.
        assert!(!ready.insert(stored.clone(), Entry::Made(mail(2))));
        assert!(matches!(ready.remove(&stored), Some(Entry::Made(work)) if work == mail(2)));
        assert_eq!(ready.len(), 0);
    }

    #[test]
    fn removing_and_adding_entries_keeps_each_group_at_its_first_key() {
        let a = [key(5, "s", "wh_a", 1), key(7, "s", "wh_a", 2)];
        let b = key(6, "s", "wh_b", 3);
        let mut ready = ready(&[a[0].clone(), a[1].clone(), b.clone()]);
        assert!(!ready.insert(a[1].clone(), stored(&a[1])), "again");
        assert_eq!(ready.len(), 3);
        assert!(
            matches!(ready.remove(&a[0]), Some(Entry::Stored(bytes)) if bytes == a[0].as_bytes())
        );
        assert!(ready.remove(&a[0]).is_none(), "removed once");
        assert_eq!(taken(&ready, &[]), vec![b.clone(), a[1].clone()]);
        // An earlier entry of a group becomes its head.
        let early = key(1, "s", "wh_a", 4);
        assert_eq!(ready.ready_in_group_of(&early), 1);
        assert_eq!(ready.ready_in_group_of(&key(1, "s", "wh_c", 5)), 0);
        ready.insert(early.clone(), stored(&early));
        assert_eq!(
            taken(&ready, &[]),
            vec![early.clone(), b.clone(), a[1].clone()]
        );
        for k in [&early, &b, &a[1], &a[0]] {
            ready.remove(k);
        }
        assert_eq!(ready.len(), 0);
        assert!(
            ready.groups.is_empty() && ready.heads.is_empty(),
            "{ready:?}"
        );
        assert_eq!(taken(&ready, &[]), Vec::<String>::new());
    }
}
