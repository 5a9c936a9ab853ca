//! The embedded backend: one sled tree, serializable transactions.

use std::cell::RefCell;
use std::ops::Bound;
use std::path::Path;

use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

use super::{Entry, Storage, Txn};
use crate::model::error::{Error, Result};

/// Storage in a sled database on local disk.
#[derive(Debug, Clone)]
pub struct SledStorage {
    db: sled::Db,
    tree: sled::Tree,
}

impl SledStorage {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| {
                Error::Internal(
                    anyhow::Error::new(e)
                        .context(format!("opening the database in {}", dir.display())),
                )
            })?;
        let tree = db.open_tree("records")?;
        Ok(Self { db, tree })
    }
}

/// Marks a sled conflict travelling through our error type, so the transaction is retried.
#[derive(Debug, thiserror::Error)]
#[error("transaction conflict")]
struct Conflict;

fn txn_err(e: UnabortableTransactionError) -> Error {
    match e {
        UnabortableTransactionError::Conflict => Error::Internal(anyhow::Error::new(Conflict)),
        UnabortableTransactionError::Storage(e) => Error::from(e),
    }
}

struct SledTxn<'a>(&'a TransactionalTree);

impl Txn for SledTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0
            .get(key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(txn_err)
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
        self.0.insert(key, value).map(drop).map_err(txn_err)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.0.remove(key).map(drop).map_err(txn_err)
    }
}

impl Storage for SledStorage {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        let iter = match (after, reverse) {
            (None, _) => self.tree.scan_prefix(prefix),
            (Some(after), false) => self
                .tree
                .range::<&[u8], _>((Bound::Excluded(after), Bound::Unbounded)),
            (Some(after), true) => self
                .tree
                .range::<&[u8], _>((Bound::Included(prefix), Bound::Excluded(after))),
        };
        let mut push = |item: sled::Result<(sled::IVec, sled::IVec)>| -> Result<bool> {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                return Ok(!reverse && k.as_ref() < prefix);
            }
            out.push((k.to_vec(), v.to_vec()));
            Ok(out.len() < limit)
        };
        if reverse {
            for item in iter.rev() {
                if !push(item)? {
                    break;
                }
            }
        } else {
            for item in iter {
                if !push(item)? {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        let f = RefCell::new(f);
        let result = self.tree.transaction(|t| {
            let mut f = f.borrow_mut();
            match (*f)(&mut SledTxn(t)) {
                Ok(()) => Ok(()),
                Err(Error::Internal(e)) if e.is::<Conflict>() => {
                    Err(ConflictableTransactionError::Conflict)
                }
                Err(e) => Err(ConflictableTransactionError::Abort(e)),
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => Err(e.into()),
        }
    }

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}
