//! The loaded components: which plugin version maps to which compiled component, and which
//! components are held in memory.
//!
//! A plugin version (`name@version`) is known by the identity of its precompiled file on disk
//! (device, inode, size, modification time) and the SHA-256 of that file's bytes. Components are
//! held by that digest, so versions whose compiled bytes are identical (the same component
//! published under several names) share one loaded component. The components held are bounded
//! (a count and a total of compiled bytes); past either bound the least recently used is let go
//! and loaded again from its file on its next use. A version whose file changed (a new compiled
//! form written in its place) or vanished is forgotten, and a component no known version uses any
//! more is dropped at once.
//!
//! This is bookkeeping only: it does no I/O and runs no wasm. [`super::Plugins::load`] stats,
//! hashes and maps files around it, outside its lock.

use std::collections::{BTreeMap, HashMap};

/// SHA-256 of a precompiled component's bytes.
pub type Digest = [u8; 32];

/// How much the cache may hold.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Distinct components held at most (at least one is always held).
    pub max_components: usize,
    /// Total size of their compiled forms at most, in bytes (the component just loaded is held
    /// even when it alone is larger).
    pub max_bytes: u64,
}

/// What the cache holds and has done since the host started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Plugin versions whose compiled file is known (identity and digest).
    pub versions: usize,
    /// Distinct components loaded in memory.
    pub components: usize,
    /// Total size of their compiled forms, in bytes.
    pub bytes: u64,
    /// Components loaded (mapped from their compiled file) since the start.
    pub loads: u64,
    /// Times a version found its component already loaded for another version.
    pub shared: u64,
    /// Components let go to stay within the bounds.
    pub evictions: u64,
}

/// What [`Cache::lookup`] found for a plugin version.
#[derive(Debug)]
pub enum Lookup<V> {
    /// Its component is loaded, and its file is the one it was loaded from.
    Hit(V),
    /// Its file is unchanged and its digest known, but its component was let go: map it again.
    Known(Digest),
    /// Never seen, or its file changed: hash the file, then [`Cache::share`] or load it.
    Unknown,
}

struct Version<I> {
    file: I,
    digest: Digest,
}

struct Held<V> {
    value: V,
    bytes: u64,
    used: u64,
}

/// The loaded components and the versions that use them; `I` is a file's identity, `V` a loaded
/// component.
pub struct Cache<I, V> {
    bounds: Bounds,
    versions: HashMap<String, Version<I>>,
    held: HashMap<Digest, Held<V>>,
    /// Use counter → digest, oldest first (the eviction order).
    recency: BTreeMap<u64, Digest>,
    counter: u64,
    stats: CacheStats,
}

impl<I: PartialEq + Clone, V: Clone> Cache<I, V> {
    /// An empty cache.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            versions: HashMap::new(),
            held: HashMap::new(),
            recency: BTreeMap::new(),
            counter: 0,
            stats: CacheStats::default(),
        }
    }

    /// The component of `stem` (`name@version`), whose compiled file now has identity `file`.
    pub fn lookup(&mut self, stem: &str, file: &I) -> Lookup<V> {
        let digest = match self.versions.get(stem) {
            Some(version) if version.file == *file => version.digest,
            Some(_) => {
                self.forget(stem);
                return Lookup::Unknown;
            }
            None => return Lookup::Unknown,
        };
        match self.touch(&digest) {
            Some(value) => Lookup::Hit(value),
            None => Lookup::Known(digest),
        }
    }

    /// The component of `stem` if it is loaded, without comparing its file (for a watched folder,
    /// where a changed file has already been forgotten).
    pub fn get(&mut self, stem: &str) -> Option<V> {
        let digest = self.versions.get(stem)?.digest;
        self.touch(&digest)
    }

    /// Records that `stem`'s file `file` has `digest`, and returns the component of that digest
    /// if another version already loaded it.
    pub fn share(&mut self, stem: &str, file: I, digest: Digest) -> Option<V> {
        let value = self.touch(&digest)?;
        self.stats.shared += 1;
        self.record(stem, file, digest);
        Some(value)
    }

    /// Holds `value`, loaded from `stem`'s file `file` (`bytes` long, with `digest`), letting go
    /// of the least recently used components beyond the bounds; returns the component to use
    /// (the one already held when another thread loaded the same digest meanwhile).
    pub fn insert(&mut self, stem: &str, file: I, digest: Digest, value: V, bytes: u64) -> V {
        if let Some(held) = self.touch(&digest) {
            self.record(stem, file, digest);
            return held;
        }
        self.counter += 1;
        self.held.insert(
            digest,
            Held {
                value: value.clone(),
                bytes,
                used: self.counter,
            },
        );
        self.recency.insert(self.counter, digest);
        self.stats.bytes += bytes;
        self.stats.loads += 1;
        self.record(stem, file, digest);
        while self.held.len() > self.bounds.max_components.max(1)
            || (self.stats.bytes > self.bounds.max_bytes && self.held.len() > 1)
        {
            let Some((_, oldest)) = self.recency.pop_first() else {
                break;
            };
            if oldest == digest {
                // The one just loaded stays; it is the newest, so nothing older is left.
                self.recency.insert(self.counter, digest);
                break;
            }
            self.drop_held(&oldest);
            self.stats.evictions += 1;
        }
        value
    }

    /// Forgets `stem` (its files changed or vanished); its component goes too unless another
    /// known version uses the same one.
    pub fn forget(&mut self, stem: &str) {
        if let Some(old) = self.versions.remove(stem) {
            self.drop_if_unused(&old.digest);
        }
    }

    /// Forgets every version and lets every component go (changes may have been missed).
    pub fn forget_all(&mut self) {
        self.versions.clear();
        self.held.clear();
        self.recency.clear();
        self.stats.bytes = 0;
    }

    /// What the cache holds and has done.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            versions: self.versions.len(),
            components: self.held.len(),
            ..self.stats
        }
    }

    fn record(&mut self, stem: &str, file: I, digest: Digest) {
        if let Some(old) = self
            .versions
            .insert(stem.to_owned(), Version { file, digest })
            && old.digest != digest
        {
            self.drop_if_unused(&old.digest);
        }
    }

    /// The held component of `digest`, marked as used now.
    fn touch(&mut self, digest: &Digest) -> Option<V> {
        let held = self.held.get_mut(digest)?;
        self.counter += 1;
        self.recency.remove(&held.used);
        held.used = self.counter;
        self.recency.insert(self.counter, *digest);
        Some(held.value.clone())
    }

    fn drop_if_unused(&mut self, digest: &Digest) {
        if !self.versions.values().any(|v| v.digest == *digest) {
            self.drop_held(digest);
        }
    }

    fn drop_held(&mut self, digest: &Digest) {
        if let Some(held) = self.held.remove(digest) {
            self.recency.remove(&held.used);
            self.stats.bytes -= held.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file identity for the tests: (inode, modification).
    type File = (u64, u64);

    fn cache(max_components: usize, max_bytes: u64) -> Cache<File, &'static str> {
        Cache::new(Bounds {
            max_components,
            max_bytes,
        })
    }

    fn digest(n: u8) -> Digest {
        [n; 32]
    }

    /// Looks `stem` up as `load` does: a hit, else share by digest, else insert.
    fn load(
        cache: &mut Cache<File, &'static str>,
        stem: &str,
        file: File,
        d: Digest,
        value: &'static str,
    ) -> &'static str {
        match cache.lookup(stem, &file) {
            Lookup::Hit(v) => v,
            Lookup::Known(known) => {
                assert_eq!(known, d);
                cache.insert(stem, file, d, value, 10)
            }
            Lookup::Unknown => match cache.share(stem, file, d) {
                Some(v) => v,
                None => cache.insert(stem, file, d, value, 10),
            },
        }
    }

    #[test]
    fn versions_with_identical_compiled_bytes_share_one_component() {
        let mut c = cache(8, 1 << 20);
        assert_eq!(load(&mut c, "a@1", (1, 0), digest(7), "first"), "first");
        assert_eq!(load(&mut c, "b@1", (2, 0), digest(7), "second"), "first");
        assert_eq!(load(&mut c, "c@1", (3, 0), digest(7), "third"), "first");
        let stats = c.stats();
        assert_eq!((stats.versions, stats.components, stats.loads), (3, 1, 1));
        assert_eq!((stats.shared, stats.bytes), (2, 10));
    }

    #[test]
    fn an_unchanged_file_is_a_hit_without_hashing_again() {
        let mut c = cache(8, 1 << 20);
        load(&mut c, "a@1", (1, 0), digest(1), "a");
        assert!(matches!(c.lookup("a@1", &(1, 0)), Lookup::Hit("a")));
    }

    #[test]
    fn a_changed_file_is_unknown_again_and_its_old_component_is_dropped() {
        let mut c = cache(8, 1 << 20);
        load(&mut c, "a@1", (1, 0), digest(1), "old");
        assert!(matches!(c.lookup("a@1", &(2, 5)), Lookup::Unknown));
        assert_eq!(
            c.stats().components,
            0,
            "nothing else used the old component"
        );
        assert_eq!(load(&mut c, "a@1", (2, 5), digest(2), "new"), "new");
        assert_eq!((c.stats().versions, c.stats().components), (1, 1));
    }

    #[test]
    fn a_forgotten_version_keeps_a_component_another_version_still_uses() {
        let mut c = cache(8, 1 << 20);
        load(&mut c, "a@1", (1, 0), digest(1), "shared");
        load(&mut c, "b@1", (2, 0), digest(1), "unused");
        c.forget("a@1");
        assert_eq!((c.stats().versions, c.stats().components), (1, 1));
        assert!(matches!(c.lookup("b@1", &(2, 0)), Lookup::Hit("shared")));
        c.forget("b@1");
        assert_eq!((c.stats().versions, c.stats().components), (0, 0));
        assert!(matches!(c.lookup("b@1", &(2, 0)), Lookup::Unknown));
    }

    #[test]
    fn past_its_count_the_least_recently_used_component_is_let_go_and_loads_again() {
        let mut c = cache(2, 1 << 20);
        load(&mut c, "a@1", (1, 0), digest(1), "a");
        load(&mut c, "b@1", (2, 0), digest(2), "b");
        // `a` is used again, so `b` is now the least recently used.
        assert!(matches!(c.lookup("a@1", &(1, 0)), Lookup::Hit("a")));
        load(&mut c, "c@1", (3, 0), digest(3), "c");
        let stats = c.stats();
        assert_eq!((stats.components, stats.evictions, stats.bytes), (2, 1, 20));
        assert!(matches!(c.lookup("a@1", &(1, 0)), Lookup::Hit("a")));
        assert!(matches!(c.lookup("c@1", &(3, 0)), Lookup::Hit("c")));
        // `b`'s file is unchanged: its digest is known, it only needs mapping again.
        assert!(matches!(c.lookup("b@1", &(2, 0)), Lookup::Known(d) if d == digest(2)));
        assert_eq!(load(&mut c, "b@1", (2, 0), digest(2), "b again"), "b again");
        assert_eq!(c.stats().loads, 4);
        assert_eq!(c.stats().components, 2);
    }

    #[test]
    fn past_its_bytes_the_oldest_components_go_but_the_newest_always_stays() {
        let mut c = cache(100, 25);
        load(&mut c, "a@1", (1, 0), digest(1), "a");
        load(&mut c, "b@1", (2, 0), digest(2), "b");
        assert_eq!(c.stats().components, 2);
        load(&mut c, "c@1", (3, 0), digest(3), "c");
        assert_eq!((c.stats().components, c.stats().bytes), (2, 20));
        assert!(matches!(c.lookup("a@1", &(1, 0)), Lookup::Known(_)));
        // A component larger than the whole budget is still held, alone.
        c.insert("big@1", (9, 0), digest(9), "big", 100);
        assert_eq!((c.stats().components, c.stats().bytes), (1, 100));
        assert!(matches!(c.lookup("big@1", &(9, 0)), Lookup::Hit("big")));
    }

    #[test]
    fn a_version_is_got_without_its_file_only_while_known_and_loaded() {
        let mut c = cache(1, 1 << 20);
        assert_eq!(c.get("a@1"), None);
        load(&mut c, "a@1", (1, 0), digest(1), "a");
        assert_eq!(c.get("a@1"), Some("a"));
        load(&mut c, "b@1", (2, 0), digest(2), "b");
        assert_eq!(c.get("a@1"), None, "let go");
        c.forget_all();
        assert_eq!(c.get("b@1"), None);
        assert_eq!(c.stats().versions + c.stats().components, 0);
        assert_eq!(c.stats().bytes, 0);
    }

    #[test]
    fn a_component_loaded_twice_at_once_is_held_once() {
        let mut c = cache(8, 1 << 20);
        // Two threads missed, hashed and mapped the same bytes; the second gets the first's.
        assert_eq!(c.insert("a@1", (1, 0), digest(1), "first", 10), "first");
        assert_eq!(c.insert("b@1", (2, 0), digest(1), "second", 10), "first");
        assert_eq!(
            (c.stats().components, c.stats().loads, c.stats().bytes),
            (1, 1, 10)
        );
    }

    #[test]
    fn a_bound_of_zero_still_holds_the_component_in_use() {
        let mut c = cache(0, 0);
        assert_eq!(load(&mut c, "a@1", (1, 0), digest(1), "a"), "a");
        assert_eq!(c.stats().components, 1);
        assert_eq!(load(&mut c, "b@1", (2, 0), digest(2), "b"), "b");
        assert_eq!((c.stats().components, c.stats().evictions), (1, 1));
    }
}
