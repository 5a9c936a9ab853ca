//! What every [`Storage`] backend promises, tested once against each: sled and fjall always, PostgreSQL when
//! `COMMERCE_HOST_TEST_DATABASE_URL` names a server (each test in a fresh database of its own).
//!
//! - A transaction's writes are committed together or not at all; an error from the closure
//!   aborts it and leaves nothing behind.
//! - Inside a transaction, reads see the transaction's own writes and removals.
//! - Transactions are serializable: concurrent read-modify-write transactions on one key lose no
//!   update (the backend runs a loser again), and a transaction never sees part of another's
//!   writes (nor returns an error drawn from such a view).
//! - The engine's bookkeeping ([`Storage::transact_optimistic`]) is at least snapshot-isolated:
//!   it sees one snapshot, and a key it writes that another transaction changed since then makes
//!   it run again, so it too loses no update, and of several that read an entry and remove it,
//!   one does (the fan-out's and the claims' rule). What it only reads may change before it
//!   commits.
//! - Updates of one key ([`Storage::update`]) are atomic: concurrent ones lose none, the first
//!   of them sees no value, and one that fails changes nothing.
//! - Scans (outside transactions: sled has none inside) return keys under the prefix only, in
//!   byte order, ascending or descending, strictly after the cursor, at most `limit`.
//! - Values come back as written (JSON; PostgreSQL keeps them as `jsonb`, so whitespace and key
//!   order are not kept: the typed layer never depends on them).

use std::sync::Arc;

use super::{Db, Storage};

/// A fresh database on the PostgreSQL server of `COMMERCE_HOST_TEST_DATABASE_URL`, if set.
pub fn fresh_postgres() -> Option<Arc<dyn Storage>> {
    Some(Arc::new(fresh_postgres_pool(8)?))
}

/// [`fresh_postgres`] with a pool of `size` connections, as its own type.
pub fn fresh_postgres_pool(size: u32) -> Option<crate::storage::postgres::PgStorage> {
    let url = std::env::var("COMMERCE_HOST_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())?;
    let url = crate::storage::postgres::fresh_database(&url).expect("a fresh test database");
    Some(crate::storage::postgres::PgStorage::connect(&url, size).expect("connect"))
}

/// Runs `check` against each backend available.
fn each_backend(check: impl Fn(&str, Db)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let sled = Db::open_sled(&dir.path().join("sled"), false).expect("sled");
    check("sled", sled);
    let fjall = Db::open_fjall(&dir.path().join("fjall"), false).expect("fjall");
    check("fjall", fjall);
    if let Some(pg) = fresh_postgres() {
        check("postgres", Db::new(pg, true));
    }
}

#[test]
fn a_failed_transaction_leaves_nothing_and_a_transaction_sees_its_own_writes() {
    each_backend(|backend, db| {
        db.tx(|tx| tx.write("k/kept", &1)).expect("write");
        let failed: crate::model::error::Result<()> = db.tx(|tx| {
            tx.write("k/a", &1)?;
            tx.remove("k/kept")?;
            Err(crate::Error::invalid("x", "aborted on purpose"))
        });
        assert!(failed.is_err(), "{backend}");
        assert_eq!(db.read::<i32>("k/a").expect("read"), None, "{backend}");
        assert_eq!(
            db.read::<i32>("k/kept").expect("read"),
            Some(1),
            "{backend}"
        );

        let seen = db
            .tx(|tx| {
                tx.write("k/b", &2)?;
                let own = tx.read::<i32>("k/b")?;
                tx.remove("k/kept")?;
                let removed = tx.read::<i32>("k/kept")?;
                Ok((own, removed))
            })
            .expect("tx");
        assert_eq!(seen, (Some(2), None), "{backend}");
        assert_eq!(db.read::<i32>("k/kept").expect("read"), None, "{backend}");
    });
}

#[test]
fn the_last_of_several_writes_of_a_key_in_a_transaction_is_what_commits() {
    each_backend(|backend, db| {
        db.tx(|tx| {
            tx.write("w/a", &1)?;
            tx.write("w/b", &1)?;
            tx.write("w/c", &1)
        })
        .expect("seed");
        let seen = db
            .tx(|tx| {
                tx.write("w/a", &2)?; // written twice
                tx.write("w/a", &3)?;
                tx.remove("w/b")?; // removed, then written again
                tx.write("w/b", &4)?;
                tx.write("w/c", &5)?; // written, then removed
                tx.remove("w/c")?;
                tx.write("w/d", &6)?; // new, then removed: never there
                tx.remove("w/d")?;
                let many: Vec<i32> = (0..100).map(|n| n * 2).collect();
                for (n, v) in many.iter().enumerate() {
                    tx.write(&format!("w/many/{n:03}"), v)?;
                }
                Ok((
                    tx.read::<i32>("w/a")?,
                    tx.read::<i32>("w/b")?,
                    tx.read::<i32>("w/c")?,
                    tx.read::<i32>("w/d")?,
                ))
            })
            .expect("tx");
        assert_eq!(seen, (Some(3), Some(4), None, None), "{backend}");
        let after: Vec<Option<i32>> = ["w/a", "w/b", "w/c", "w/d"]
            .iter()
            .map(|k| db.read::<i32>(k).expect("read"))
            .collect();
        assert_eq!(after, vec![Some(3), Some(4), None, None], "{backend}");
        let many: Vec<(String, i32)> = db.list("w/many/", None, false, 1000).expect("list");
        assert_eq!(many.len(), 100, "{backend}");
        assert!(
            many.iter()
                .enumerate()
                .all(|(n, (_, v))| *v == n as i32 * 2),
            "{backend}"
        );
    });
}

/// Runs the transaction `f` 25 times in each of four threads at once: a request's (`Db::tx`),
/// or the engine's (`Db::tx_relaxed`) when `relaxed`.
fn four_threads_25_times(
    db: &Db,
    relaxed: bool,
    f: impl Fn(&mut super::Tx<'_>) -> crate::model::error::Result<()> + Send + Sync + 'static,
) {
    let f = Arc::new(f);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (db, f) = (db.clone(), f.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    if relaxed {
                        db.tx_relaxed(|tx| f(tx))
                    } else {
                        db.tx(|tx| f(tx))
                    }
                    .expect("a transaction");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}

#[test]
fn concurrent_read_modify_write_transactions_lose_no_update() {
    // Requests' transactions, then the engine's, each on a key not yet made: the first writes
    // race to make it, and every run that loses must run again and count on.
    each_backend(|backend, db| {
        for relaxed in [false, true] {
            let key = format!("counter/{relaxed}");
            let counted = key.clone();
            four_threads_25_times(&db, relaxed, move |tx| {
                let n: u64 = tx.read(&counted)?.unwrap_or(0);
                tx.write(&counted, &(n + 1))
            });
            assert_eq!(
                db.read::<u64>(&key).expect("read"),
                Some(100),
                "{backend}, relaxed: {relaxed}: an update was lost"
            );
        }
    });
}

#[test]
fn reads_made_ahead_are_the_transactions_own_and_lose_no_update() {
    each_backend(|backend, db| {
        db.tx(|tx| {
            tx.write("ahead/counter", &0u64)?;
            tx.write("ahead/other", &7u64)
        })
        .expect("init");
        four_threads_25_times(&db, false, |tx| {
            tx.prefetch(["ahead/counter", "ahead/other", "ahead/missing"])?;
            let n: u64 = tx.read("ahead/counter")?.unwrap_or(0);
            assert_eq!(tx.read::<u64>("ahead/other")?, Some(7));
            assert_eq!(tx.read::<u64>("ahead/missing")?, None);
            tx.write("ahead/counter", &(n + 1))?;
            assert_eq!(tx.read::<u64>("ahead/counter")?, Some(n + 1));
            Ok(())
        });
        assert_eq!(
            db.read::<u64>("ahead/counter").expect("read"),
            Some(100),
            "{backend}: an update was lost"
        );
    });
}

#[test]
fn of_relaxed_transactions_that_take_an_entry_one_takes_it() {
    // The engine's rule for the outbox and the work queue: a transaction reads an entry and, if
    // it is still there, removes it and acts on it (here: counts it under a key of its own).
    // Concurrent ones each see the entry in their snapshot; exactly one may commit the removal.
    each_backend(|backend, db| {
        const ENTRIES: usize = 40;
        db.tx(|tx| (0..ENTRIES).try_for_each(|i| tx.write(&format!("box/{i:02}"), &i)))
            .expect("seed");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut taken = Vec::new();
                    for i in 0..ENTRIES {
                        let key = format!("box/{i:02}");
                        let took = db
                            .tx_relaxed(|tx| {
                                if tx.read::<usize>(&key)?.is_none() {
                                    return Ok(false);
                                }
                                tx.remove(&key)?;
                                tx.write(&format!("taken/{i:02}/{t}"), &t)?;
                                Ok(true)
                            })
                            .expect("a relaxed transaction");
                        if took {
                            taken.push(i);
                        }
                    }
                    taken
                })
            })
            .collect();
        let mut taken: Vec<usize> = threads
            .into_iter()
            .flat_map(|t| t.join().expect(backend))
            .collect();
        taken.sort_unstable();
        assert_eq!(
            taken,
            (0..ENTRIES).collect::<Vec<_>>(),
            "{backend}: each once"
        );
        assert_eq!(
            db.list::<usize>("taken/", None, false, 1000)
                .expect("list")
                .len(),
            ENTRIES,
            "{backend}: one record of each taking"
        );
        assert!(
            db.list::<usize>("box/", None, false, 10)
                .expect("list")
                .is_empty()
        );
    });
}

#[test]
fn a_transaction_never_sees_half_of_another_ones_writes() {
    // Writers keep "pair/a" and "pair/b" equal, changing both in each transaction; readers
    // refuse (an error, which would abort them) whenever they see them differ. A backend that
    // ran a reader's closure on values read at different times must run it again rather than
    // return its error.
    each_backend(|backend, db| {
        db.tx(|tx| {
            tx.write("pair/a", &0)?;
            tx.write("pair/b", &0)
        })
        .expect("seed");
        // One writer's transactions through `Db::tx`, the other's through `Db::tx_relaxed` (which
        // a backend may run optimistically, see `Storage::transact_optimistic`); the readers'
        // relaxed.
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let both = |tx: &mut super::Tx<'_>| {
                            let a: i64 = tx.read("pair/a")?.unwrap_or(0);
                            tx.write("pair/a", &(a + 1))?;
                            tx.write("pair/b", &(a + 1))
                        };
                        if w == 0 {
                            db.tx(both)
                        } else {
                            db.tx_relaxed(both)
                        }
                        .expect("write both");
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        db.tx_relaxed(|tx| {
                            let a: i64 = tx.read("pair/a")?.unwrap_or(0);
                            let b: i64 = tx.read("pair/b")?.unwrap_or(0);
                            if a == b {
                                Ok(())
                            } else {
                                Err(crate::Error::invalid("pair", format!("{a} != {b}")))
                            }
                        })
                        .expect("a consistent pair");
                    }
                })
            })
            .collect();
        for t in writers.into_iter().chain(readers) {
            t.join().expect(backend);
        }
        let a: Option<i64> = db.read("pair/a").expect("read");
        assert_eq!(a, Some(100), "{backend}: no write lost");
    });
}

#[test]
fn concurrent_updates_of_a_key_lose_none_and_an_error_changes_nothing() {
    each_backend(|backend, db| {
        // The first updates of a missing key race too: exactly one of them sees `None`.
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut firsts = 0;
                    for _ in 0..25 {
                        let first = db
                            .update("hot/counter", |n: Option<u64>| {
                                (n.unwrap_or(0) + 1, n.is_none())
                            })
                            .expect("update");
                        firsts += usize::from(first);
                    }
                    firsts
                })
            })
            .collect();
        let firsts: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(firsts, 1, "{backend}");
        assert_eq!(
            db.read::<u64>("hot/counter").expect("read"),
            Some(200),
            "{backend}"
        );
        let refused = db.inner.update(b"hot/counter", &mut |_| {
            Err(crate::Error::invalid("x", "refused on purpose"))
        });
        assert!(refused.is_err(), "{backend}");
        let seen = db
            .update("hot/counter", |n: Option<u64>| (n.unwrap_or(0), n))
            .expect("update");
        assert_eq!(seen, Some(200), "{backend}");
    });
}

#[test]
fn scans_keep_to_the_prefix_in_byte_order_after_the_cursor() {
    each_backend(|backend, db| {
        db.tx(|tx| {
            for k in ["a/1", "a/2", "a/10", "a/B", "a/b", "a-", "ab/1", "a", "b/1"] {
                tx.write(k, &serde_json::json!({"key": k, "n": [1, 2]}))?;
            }
            Ok(())
        })
        .expect("write");
        let keys = |after: Option<&str>, reverse, limit| {
            db.list::<serde_json::Value>("a/", after, reverse, limit)
                .expect("list")
                .into_iter()
                .map(|(k, v)| {
                    assert_eq!(v["key"], k.as_str());
                    k
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(None, false, 10),
            ["a/1", "a/10", "a/2", "a/B", "a/b"],
            "{backend}"
        );
        assert_eq!(keys(Some("a/10"), false, 2), ["a/2", "a/B"], "{backend}");
        assert_eq!(keys(None, true, 2), ["a/b", "a/B"], "{backend}");
        assert_eq!(keys(Some("a/2"), true, 10), ["a/10", "a/1"], "{backend}");
        assert!(keys(Some("a/b"), false, 10).is_empty(), "{backend}");
        let value: serde_json::Value = db.read("a/2").expect("read").expect("there");
        assert_eq!(
            value,
            serde_json::json!({"n": [1, 2], "key": "a/2"}),
            "{backend}"
        );
    });
}
