//! Hosts sharing one database divide the delivery work between them instead of racing for it.
//!
//! Each host's engine writes a heartbeat record (`peer/{host}/{boot}`, the time it last wrote it)
//! every [`HEARTBEAT`] and reads the others'; the hosts heard from within [`PEER_TIMEOUT`] are
//! the live ones. Each target (and, for the fan-out, each store) belongs to one live host, by
//! rendezvous hashing over their names: every host computes the same owner from the same list,
//! and when a host joins or leaves only the keys it owned or now owns move. A host starts the
//! deliveries of its own targets and fans out the events of its own stores; work of another
//! host's that has waited [`TAKEOVER`] (its host died, or the hosts' lists differ for a moment) is
//! taken by any host. Claims still decide who makes an attempt: dividing the work only keeps two
//! hosts from reading, claiming and losing the same entries, which on two hosts on one database
//! cost more than the second host brought.
//!
//! On a storage of its own (sled or fjall) a host owns everything.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::error::Result;
use crate::model::work::Holder;
use crate::storage::Db;

/// How often a host's engine writes its heartbeat and reads the others'.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// A host not heard from in this long is no longer live: its targets go to the others.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Work of another host's that has waited this long (due this long ago, or committed this long
/// ago for the fan-out) is taken by any host.
pub const TAKEOVER: Duration = Duration::from_secs(5);

/// A host's heartbeat records are removed by the others once this old (it stopped without
/// removing its own).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The key prefix of the heartbeat records.
const PREFIX: &str = "peer/";

/// Most heartbeat records read.
const MAX_PEERS: usize = 1024;

/// A heartbeat record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Heartbeat {
    /// When the host wrote it last.
    seen_at: Timestamp,
}

/// What a heartbeat record says of its host (see [`Peers::beat`]).
enum Standing<'k> {
    /// This host's own record.
    Mine,
    /// A live host, by this name.
    Live(&'k str),
    /// Not live, but not gone long enough to be forgotten.
    Quiet,
    /// Gone for [`FORGET_AFTER`], or an earlier boot of this host: the record is removed.
    Forgotten,
}

/// The live hosts, as this host last read them.
#[derive(Debug)]
pub struct Peers {
    /// This host, as it names itself in the list.
    me: String,
    /// What the names of this host's boots start with: an earlier boot's record is of a boot
    /// that ended (a crash), not of a live host.
    my_boots: String,
    /// The live hosts' names, sorted (this host's included).
    live: RwLock<Arc<[String]>>,
}

impl Peers {
    /// This host alone, until its first heartbeat reads the others.
    pub fn new(holder: &Holder) -> Self {
        let me = format!("{}/{}", holder.host, holder.boot);
        Self {
            live: RwLock::new(Arc::from([me.clone()])),
            me,
            my_boots: format!("{}/", holder.host),
        }
    }

    /// The live hosts' names, sorted.
    pub fn live(&self) -> Arc<[String]> {
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `key` (a target's or a store's) is this host's, of the live hosts.
    pub fn owns(&self, key: &str) -> bool {
        let live = self.live();
        live.len() <= 1 || owner(&live, key) == Some(self.me.as_str())
    }

    /// Whether this host takes work on `key` that has waited `waited`: its own, or any once it
    /// has waited [`TAKEOVER`].
    pub fn takes(&self, key: &str, waited: Duration) -> bool {
        waited >= TAKEOVER || self.owns(key)
    }

    /// Writes this host's heartbeat at `now`, reads the others', keeps the live ones, and removes
    /// those of hosts gone for long.
    pub fn beat(&self, db: &Db, now: Timestamp) -> Result<()> {
        let mine = format!("{PREFIX}{}", self.me);
        db.tx_relaxed(|tx| tx.write(&mine, &Heartbeat { seen_at: now }))?;
        let mut live = vec![self.me.clone()];
        let mut forgotten = Vec::new();
        for (key, beat) in db.list::<Heartbeat>(PREFIX, None, false, MAX_PEERS)? {
            match self.standing(&key, &beat, now) {
                Standing::Live(name) => live.push(name.to_owned()),
                Standing::Forgotten => forgotten.push(key),
                Standing::Mine | Standing::Quiet => {}
            }
        }
        live.sort();
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = Arc::from(live);
        if !forgotten.is_empty() {
            self.forget(db, &forgotten, now)?;
        }
        Ok(())
    }

    /// What the heartbeat record at `key` says of its host at `now`.
    fn standing<'k>(&self, key: &'k str, beat: &Heartbeat, now: Timestamp) -> Standing<'k> {
        let Some(name) = key.strip_prefix(PREFIX) else {
            return Standing::Quiet;
        };
        let age = now.duration_since(beat.seen_at).unsigned_abs();
        if name == self.me {
            Standing::Mine
        } else if name.starts_with(&self.my_boots) {
            Standing::Forgotten // This host's boot before a crash.
        } else if age < PEER_TIMEOUT {
            Standing::Live(name)
        } else if age >= FORGET_AFTER {
            Standing::Forgotten
        } else {
            Standing::Quiet
        }
    }

    /// Removes the heartbeat records at `keys` (listed as forgotten) that are still forgotten
    /// when read again in the removing transaction: a host gone for long may have beaten again
    /// since they were listed, and its fresh record stays. (A beat committed after this
    /// transaction's snapshot writes the same key, so the removal runs again and reads it.)
    fn forget(&self, db: &Db, keys: &[String], now: Timestamp) -> Result<()> {
        db.tx_relaxed(|tx| {
            for key in keys {
                if let Some(beat) = tx.read::<Heartbeat>(key)?
                    && matches!(self.standing(key, &beat, now), Standing::Forgotten)
                {
                    tx.remove(key)?;
                }
            }
            Ok(())
        })
    }

    /// Removes this host's heartbeat (it stops): the others take its work at their next beat.
    pub fn leave(&self, db: &Db) -> Result<()> {
        let mine = format!("{PREFIX}{}", self.me);
        db.tx_relaxed(|tx| tx.remove(&mine))
    }
}

/// The host `key` belongs to, of `live`: the one whose hash with it is highest.
fn owner<'a>(live: &'a [String], key: &str) -> Option<&'a str> {
    live.iter()
        .max_by_key(|host| (score(host, key), host.as_str()))
        .map(String::as_str)
}

/// A hash of `host` and `key` that every build computes alike (FNV-1a, then a final mix).
fn score(host: &str, key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in host.bytes().chain([0]).chain(key.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finalizer: nearby keys get unrelated scores.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(host: &str) -> Holder {
        Holder {
            host: host.to_owned(),
            boot: "boot1".to_owned(),
        }
    }

    fn keys() -> Vec<String> {
        (0..1000).map(|n| format!("wh_{n:05}")).collect()
    }

    #[test]
    fn alone_a_host_owns_everything() {
        let peers = Peers::new(&holder("a"));
        assert!(keys().iter().all(|k| peers.owns(k)));
    }

    #[test]
    fn live_hosts_divide_the_keys_each_key_to_one_and_a_leaver_moves_only_its_own() {
        let live: Vec<String> = ["a/boot1", "b/boot1", "c/boot1"].map(String::from).to_vec();
        let keys = keys();
        let owners: Vec<&str> = keys.iter().filter_map(|k| owner(&live, k)).collect();
        assert_eq!(owners.len(), keys.len(), "every key has an owner");
        for host in &live {
            let share = owners.iter().filter(|o| **o == host.as_str()).count();
            assert!((250..420).contains(&share), "{host} owns {share} of 1000");
        }
        // c leaves: a's and b's keys stay theirs, c's are divided between them.
        let two = &live[..2];
        for (key, before) in keys.iter().zip(&owners) {
            let after = owner(two, key).expect("an owner");
            if *before != "c/boot1" {
                assert_eq!(after, *before, "{key} moved");
            }
        }
    }

    #[test]
    fn work_of_another_host_is_taken_once_it_has_waited_the_takeover() {
        let a = Peers::new(&holder("a"));
        *a.live.write().expect("lock") = Arc::from(["a/boot1".to_owned(), "b/boot1".to_owned()]);
        let theirs = keys()
            .into_iter()
            .find(|k| !a.owns(k))
            .expect("b owns some");
        assert!(!a.takes(&theirs, TAKEOVER - Duration::from_millis(1)));
        assert!(a.takes(&theirs, TAKEOVER));
    }

    #[test]
    fn heartbeats_show_the_live_hosts_and_forget_the_long_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let (a, b) = (Peers::new(&holder("a")), Peers::new(&holder("b")));
        let t0 = Timestamp::from_second(1_800_000_000).expect("time");
        a.beat(&db, t0).expect("beat");
        b.beat(&db, t0).expect("beat");
        a.beat(&db, t0).expect("beat");
        assert_eq!(&*a.live(), ["a/boot1".to_owned(), "b/boot1".to_owned()]);
        // b stops beating: past the timeout a has only itself, and past an hour b's record goes.
        let later = t0 + PEER_TIMEOUT;
        a.beat(&db, later).expect("beat");
        assert_eq!(&*a.live(), ["a/boot1".to_owned()]);
        assert_eq!(
            db.list::<Heartbeat>(PREFIX, None, false, 10)
                .expect("list")
                .len(),
            2
        );
        a.beat(&db, t0 + FORGET_AFTER).expect("beat");
        assert_eq!(
            db.list::<Heartbeat>(PREFIX, None, false, 10)
                .expect("list")
                .len(),
            1
        );
        // A record listed as forgotten is not removed if its host beats again before the
        // removal: the removal reads it again.
        let c = Peers::new(&holder("c"));
        c.beat(&db, t0).expect("beat");
        let c_key = format!("{PREFIX}{}", c.me);
        c.beat(&db, t0 + FORGET_AFTER).expect("beat");
        a.forget(&db, std::slice::from_ref(&c_key), t0 + FORGET_AFTER)
            .expect("forget");
        assert!(db.read::<Heartbeat>(&c_key).expect("read").is_some());
        a.forget(&db, std::slice::from_ref(&c_key), t0 + 2 * FORGET_AFTER)
            .expect("forget");
        assert!(db.read::<Heartbeat>(&c_key).expect("read").is_none());
        // A host that leaves removes its record.
        b.beat(&db, t0 + FORGET_AFTER).expect("beat");
        b.leave(&db).expect("leave");
        a.beat(&db, t0 + FORGET_AFTER).expect("beat");
        assert_eq!(&*a.live(), ["a/boot1".to_owned()]);
        // A host restarted after a crash does not wait for its own earlier boot to time out.
        let b1 = Peers::new(&holder("b"));
        b1.beat(&db, t0 + FORGET_AFTER).expect("beat");
        let b2 = Peers::new(&Holder {
            host: "b".to_owned(),
            boot: "boot2".to_owned(),
        });
        b2.beat(&db, t0 + FORGET_AFTER).expect("beat");
        assert_eq!(&*b2.live(), ["a/boot1".to_owned(), "b/boot2".to_owned()]);
        assert_eq!(
            db.list::<Heartbeat>(PREFIX, None, false, 10)
                .expect("list")
                .len(),
            2
        );
    }
}
