//! `Idempotency-Key` for `POST` requests: a retry with the same key and body gets the first
//! result without doing the work twice; the same key with another body is refused.
//!
//! Keys are per store, kept 24 hours. While the first request runs, a retry gets 409
//! `idempotency_in_progress`. A first request that failed with a 5xx is forgotten, so it can be
//! retried.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::Service;
use crate::error::{Error, Result};
use crate::ids::StoreId;

/// How long a key is remembered.
pub const KEY_RETENTION: SignedDuration = SignedDuration::from_hours(24);

/// A stored response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// Body bytes (JSON), for successes.
    pub body: String,
    /// Error code, message and field, for errors (their body is written per request).
    pub error: Option<(String, String, Option<String>)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    fingerprint: String,
    #[serde(with = "crate::clock::api_ts")]
    created_at: Timestamp,
    response: Option<StoredResponse>,
}

/// What to do with a request that carries a key.
#[derive(Debug)]
pub enum Begin {
    /// First time: run it, then call [`Service::idempotency_finish`].
    Run,
    /// Seen before with the same body: answer this.
    Replay(StoredResponse),
}

/// Key of an idempotency record.
pub fn key(store: &StoreId, key: &str) -> String {
    format!("idem/{store}/{}", hex::encode(key.as_bytes()))
}

impl Service {
    /// Claims `idem_key` for a request with `fingerprint`, or returns the stored response.
    pub fn idempotency_begin(
        &self,
        store: &StoreId,
        idem_key: &str,
        fingerprint: &str,
    ) -> Result<Begin> {
        let now = self.now();
        let k = key(store, idem_key);
        self.db.tx(|tx| {
            if let Some(record) = tx.read::<Record>(&k)?
                && record.created_at + KEY_RETENTION > now
            {
                if record.fingerprint != fingerprint {
                    return Err(Error::Conflict {
                        code: "idempotency_key_reused",
                        message: "this Idempotency-Key was used for a different request; use a new key".into(),
                        field: Some("Idempotency-Key".into()),
                    });
                }
                return match record.response {
                    Some(response) => Ok(Begin::Replay(response)),
                    None => Err(Error::conflict(
                        "idempotency_in_progress",
                        "a request with this Idempotency-Key is still being processed; retry shortly",
                    )),
                };
            }
            tx.write(&k, &Record { fingerprint: fingerprint.to_owned(), created_at: now, response: None })?;
            Ok(Begin::Run)
        })
    }

    /// Stores the response of a claimed key; a 5xx (or `None`) releases the key instead.
    pub fn idempotency_finish(
        &self,
        store: &StoreId,
        idem_key: &str,
        response: Option<StoredResponse>,
    ) -> Result<()> {
        let k = key(store, idem_key);
        self.db.tx(|tx| match (&response, tx.read::<Record>(&k)?) {
            (Some(r), Some(mut record)) if r.status < 500 => {
                record.response = Some(r.clone());
                tx.write(&k, &record)
            }
            _ => tx.remove(&k),
        })
    }

    /// Forgets keys older than the retention; returns how many.
    pub fn purge_idempotency_keys(&self, store: &StoreId, now: Timestamp) -> Result<usize> {
        let prefix = format!("idem/{store}/");
        let mut purged = 0;
        let mut after: Option<String> = None;
        loop {
            let batch: Vec<(String, Record)> =
                self.db.list(&prefix, after.as_deref(), false, 256)?;
            let done = batch.len() < 256;
            for (k, record) in batch {
                if record.created_at + KEY_RETENTION <= now {
                    self.db.tx(|tx| tx.remove(&k))?;
                    purged += 1;
                }
                after = Some(k);
            }
            if done {
                return Ok(purged);
            }
        }
    }
}
