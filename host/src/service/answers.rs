//! Answers to reads of one record, kept as the JSON they were sent as: the `GET`s of one order,
//! product or customer ([`RecordAnswers`]). `GET /v1/orders/{id}` read the order, decoded it and
//! encoded it again for every request, and that was most of what the request cost beyond HTTP
//! (in the api bench's profile, 7.8 % of the process in the read, 6.3 % of it decoding the
//! JSON, and about 1.5 % encoding the answer). A kept answer is sent as it is: 42 → 33.5 µs of
//! CPU a request (client and host, medians of 8 alternated runs; see PERFORMANCE.md, the
//! twenty-third pass).
//!
//! Validity is the generation of a [`Changes`] watch on the records' prefix, as for the auth cache
//! (`auth_cache.rs`): storage moves it on after every committed transaction that writes or removes
//! one of them, before the transaction returns; whenever it has moved, every kept answer is
//! dropped before one is used; and an answer is kept only if the generation read *before* its
//! record was read is still the current one, so one made of a record read while it changed is
//! never kept. A request that starts after a change was committed never gets an answer from
//! before it.
//!
//! Only where one host has the storage to itself: there every change is committed through this
//! process, and the watch moves with the commit. Hosts sharing PostgreSQL learn of each other's
//! changes from announcements, a moment later, and a client that changed an order through one
//! host must read the change through another: there nothing is kept ([`Answers::new`] with no
//! watch).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Service;
use crate::model::error::{Error, Result};
use crate::storage::{Changes, Copied, Db};

/// Answers kept at most of one kind of record, and their bytes at most (whichever comes first):
/// past either, every kept answer of the kind is dropped and keeping starts again, so that the
/// ones read now are kept.
pub const CAPACITY: (usize, usize) = (4096, 8 << 20);

/// The kept answers of the `GET`s of one record, each kind under a watch of its own, so that a
/// change of a product (its stock, at every order) does not drop the customers' answers.
#[derive(Debug)]
pub struct RecordAnswers {
    /// `GET /v1/orders/{id}`.
    pub orders: Answers,
    /// `GET /v1/products/{id}`.
    pub products: Answers,
    /// `GET /v1/customers/{id}`.
    pub customers: Answers,
}

impl RecordAnswers {
    /// Answers kept over `db` where it has one host (see the module's doc), none where hosts
    /// share it.
    pub fn new(db: &Db) -> Self {
        let kind =
            |prefix: &str| Answers::new((!db.is_shared()).then(|| db.watch(&[prefix])), CAPACITY);
        Self {
            orders: kind(crate::model::order::ORDER_PREFIX),
            products: kind(crate::model::product::PRODUCT_PREFIX),
            customers: kind(crate::model::customer::CUSTOMER_PREFIX),
        }
    }
}

impl Service {
    /// The record at `key` as the JSON its `GET` answers, `show` making of it what the caller
    /// may see (`view` names that view, `""` when every caller sees the same), kept in `answers`
    /// for the next request (see the module's doc). `None` when there is no record.
    pub(crate) fn record_answer<T: DeserializeOwned + Serialize>(
        &self,
        answers: &Answers,
        key: String,
        view: &str,
        show: impl FnOnce(T) -> T,
    ) -> Result<Option<Answer>> {
        let record = key.len();
        let mut kept_as = key;
        kept_as.push_str(view);
        answers.get_or_make(&kept_as, || {
            let Some(value) = self.db.read::<T>(&kept_as[..record])? else {
                return Ok(None);
            };
            serde_json::to_vec(&show(value))
                .map(Some)
                .map_err(|e| Error::Internal(anyhow::Error::new(e).context("the answer")))
        })
    }
}

/// An answer as sent: JSON.
pub type Answer = Arc<[u8]>;

/// Answers kept as of one generation of their records (see the module's doc).
#[derive(Debug)]
pub struct Answers {
    copy: Option<Copied<Kept>>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Kept {
    answers: HashMap<String, Answer>,
    bytes: usize,
}

impl Answers {
    /// Answers current while `changes` (a watch on the prefix of the records they are made of)
    /// does not move, at most `max_entries` of them and `max_bytes` in all; none are kept without
    /// a watch.
    pub fn new(changes: Option<Arc<Changes>>, (max_entries, max_bytes): (usize, usize)) -> Self {
        Self {
            copy: changes.map(Copied::new),
            max_entries,
            max_bytes,
        }
    }

    /// The answer kept under `key`, or the one `make` makes (reading the record, `None` when
    /// there is none), kept if the record did not change while it was made. `key` names the
    /// record and everything else the answer depends on (what the caller may see of it).
    pub fn get_or_make(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<Option<Vec<u8>>>,
    ) -> Result<Option<Answer>> {
        let Some(copy) = &self.copy else {
            return Ok(make()?.map(Answer::from));
        };
        let generation = copy.generation();
        if let Some(kept) = copy.current().answers.get(key) {
            return Ok(Some(kept.clone()));
        }
        let Some(made) = make()? else {
            return Ok(None);
        };
        let made = Answer::from(made);
        let mut kept = copy.current();
        if kept.generation() == generation && made.len() <= self.max_bytes {
            if kept.answers.len() >= self.max_entries || kept.bytes + made.len() > self.max_bytes {
                kept.answers.clear();
                kept.bytes = 0;
            }
            kept.bytes += made.len();
            if let Some(before) = kept.answers.insert(key.to_owned(), made.clone()) {
                kept.bytes -= before.len();
            }
        }
        Ok(Some(made))
    }

    /// How many answers are kept now (for tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.copy.as_ref().map_or(0, |c| c.current().answers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Db;

    fn db() -> (Db, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        (db, dir)
    }

    fn write(db: &Db, key: &str, value: u64) {
        db.tx(|tx| tx.write(key, &value)).expect("write");
    }

    /// The answer for `key`, made from its record; counts the makes in `made`.
    fn answer(answers: &Answers, db: &Db, key: &str, made: &mut usize) -> Option<String> {
        answers
            .get_or_make(key, || {
                *made += 1;
                Ok(db.read::<u64>(key)?.map(|v| v.to_string().into_bytes()))
            })
            .expect("answer")
            .map(|a| String::from_utf8(a.to_vec()).expect("utf-8"))
    }

    #[test]
    fn an_answer_is_made_once_and_made_again_after_any_change_of_the_records() {
        let (db, _dir) = db();
        let answers = Answers::new(Some(db.watch(&["rec/"])), CAPACITY);
        write(&db, "rec/a", 1);
        let mut made = 0;
        assert_eq!(
            answer(&answers, &db, "rec/a", &mut made).as_deref(),
            Some("1")
        );
        assert_eq!(
            answer(&answers, &db, "rec/a", &mut made).as_deref(),
            Some("1")
        );
        assert_eq!(made, 1, "the second from what was kept");
        // A change of another record under the prefix drops it too; one elsewhere does not.
        write(&db, "other/x", 5);
        assert_eq!(
            answer(&answers, &db, "rec/a", &mut made).as_deref(),
            Some("1")
        );
        assert_eq!(made, 1);
        write(&db, "rec/b", 2);
        write(&db, "rec/a", 3);
        assert_eq!(
            answer(&answers, &db, "rec/a", &mut made).as_deref(),
            Some("3")
        );
        assert_eq!(made, 2);
        db.tx(|tx| tx.remove("rec/a")).expect("remove");
        assert_eq!(answer(&answers, &db, "rec/a", &mut made), None);
        assert_eq!(answer(&answers, &db, "rec/a", &mut made), None);
        assert_eq!(made, 4, "no record, nothing kept");
    }

    #[test]
    fn an_answer_made_while_its_record_changed_is_not_kept() {
        let (db, _dir) = db();
        let answers = Answers::new(Some(db.watch(&["rec/"])), CAPACITY);
        write(&db, "rec/a", 1);
        // The record is read, then changed (committed) before the answer is kept.
        let stale = answers
            .get_or_make("rec/a", || {
                let read = db.read::<u64>("rec/a")?;
                write(&db, "rec/a", 2);
                Ok(read.map(|v| v.to_string().into_bytes()))
            })
            .expect("answer");
        assert_eq!(stale.as_deref(), Some(&b"1"[..]), "answered as read");
        assert_eq!(answers.kept(), 0, "not kept");
        let mut made = 0;
        assert_eq!(
            answer(&answers, &db, "rec/a", &mut made).as_deref(),
            Some("2")
        );
        assert_eq!(made, 1);
    }

    #[test]
    fn past_the_capacity_the_kept_answers_start_again_and_without_a_watch_none_are_kept() {
        let (db, _dir) = db();
        let answers = Answers::new(Some(db.watch(&["rec/"])), (3, 1 << 20));
        let mut made = 0;
        for n in 0..4 {
            let key = format!("rec/{n}");
            write(&db, &key, n);
            answer(&answers, &db, &key, &mut made);
        }
        assert_eq!(answers.kept(), 1, "the fourth started them again");
        // Bytes: two answers of 1 byte fit in 2, a third starts again.
        let answers = Answers::new(Some(db.watch(&["rec/"])), (100, 2));
        for n in 0..3 {
            answer(&answers, &db, &format!("rec/{n}"), &mut made);
        }
        assert_eq!(answers.kept(), 1);
        let answers = Answers::new(None, CAPACITY);
        let mut made = 0;
        answer(&answers, &db, "rec/1", &mut made);
        answer(&answers, &db, "rec/1", &mut made);
        assert_eq!((made, answers.kept()), (2, 0), "made for every read");
    }
}
