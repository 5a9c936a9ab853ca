//! `Idempotency-Key` for `POST` requests: a retry with the same key and body gets the first
//! result without doing the work twice; the same key with another body is refused.
//!
//! Keys belong to the caller: one installation's key never reaches another installation's
//! record, even in the same store. Before anything is claimed or replayed the caller must pass
//! every check the request itself would pass first: authentication and the store match (the
//! `/v1` middleware, before this), then the scope of the route. A caller without the scope gets
//! 403 `missing_scope`, never a stored response.
//!
//! Records are kept 24 hours. While the first request runs, a retry gets 409
//! `idempotency_in_progress`; but a claim is only "in progress" for [`IN_PROGRESS_LEASE`] on the
//! injected clock, and only in the boot of the host that made it: a request cut short by a crash
//! or a restart can be retried at once after the restart, and one that never finished within the
//! lease can be retried after it. A first request that failed with a 5xx is forgotten, so it can
//! be retried.

use jiff::{SignedDuration, Timestamp};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Actor, Scope, Service};
use crate::model::error::{Error, Result};
use crate::model::ids::{InstallationId, StoreId};

/// How long a key is remembered.
pub const KEY_RETENTION: SignedDuration = SignedDuration::from_hours(24);

/// How long a claimed key that has no response yet blocks retries (on the injected clock).
pub const IN_PROGRESS_LEASE: SignedDuration = SignedDuration::from_secs(60);

/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

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
    #[serde(with = "crate::model::clock::api_ts")]
    created_at: Timestamp,
    response: Option<StoredResponse>,
    /// The boot of the host that claimed the key (absent in records of older hosts).
    #[serde(default)]
    boot: Option<String>,
    /// The claim that may finish this record.
    #[serde(default)]
    claim: Option<String>,
}

/// What to do with a request that carries a key.
#[derive(Debug)]
pub enum Begin {
    /// First time (or the earlier attempt was cut short): run it, then call
    /// [`Service::idempotency_finish`] with the claim.
    Run(Claim),
    /// Seen before with the same body: answer this.
    Replay(StoredResponse),
}

/// The right to record the response of a request that claimed a key.
#[derive(Debug, Clone)]
pub struct Claim {
    key: String,
    id: String,
}

/// Key of an idempotency record: per store (for the retention purge), then per installation.
pub fn key(store: &StoreId, installation: &InstallationId, key: &str) -> String {
    format!(
        "idem/{store}/{installation}/{}",
        hex::encode(key.as_bytes())
    )
}

/// What identifies "the same request": method, path with query, and the exact body bytes.
pub fn fingerprint(method: &str, path_and_query: &str, body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method);
    hasher.update(b" ");
    hasher.update(path_and_query);
    hasher.update(b"\n");
    hasher.update(body);
    hex::encode(hasher.finalize())
}

/// Checks the value of an `Idempotency-Key` header: 1 to 255 visible ASCII characters.
pub fn parse_key(raw: &[u8]) -> Result<&str> {
    let valid = !raw.is_empty() && raw.len() <= MAX_KEY_LEN && raw.iter().all(u8::is_ascii_graphic);
    match std::str::from_utf8(raw) {
        Ok(key) if valid => Ok(key),
        _ => Err(Error::invalid(
            "Idempotency-Key",
            "must be 1 to 255 visible ASCII characters",
        )),
    }
}

impl Service {
    /// Claims `idem_key` for `actor`'s request with `fingerprint`, or returns the stored
    /// response. `needs` is the scope of the route: checked before any record is read, so a
    /// caller without it never sees a stored response.
    pub fn idempotency_begin(
        &self,
        actor: &Actor,
        needs: Option<Scope>,
        idem_key: &[u8],
        fingerprint: &str,
    ) -> Result<Begin> {
        if let Some(scope) = needs {
            actor.require(scope)?;
        }
        let idem_key = parse_key(idem_key)?;
        let now = self.now();
        let k = key(actor.store_id(), &actor.installation, idem_key);
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        let claim = hex::encode(bytes);
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
                if let Some(response) = record.response {
                    return Ok(Begin::Replay(response));
                }
                if self.in_progress(&record, now) {
                    return Err(Error::conflict(
                        "idempotency_in_progress",
                        "a request with this Idempotency-Key is still being processed; retry shortly",
                    ));
                }
                // The earlier attempt was cut short (a crash, a restart, or past its lease).
            }
            tx.write(
                &k,
                &Record {
                    fingerprint: fingerprint.to_owned(),
                    created_at: now,
                    response: None,
                    boot: Some(self.boot_id.clone()),
                    claim: Some(claim.clone()),
                },
            )?;
            Ok(Begin::Run(Claim { key: k.clone(), id: claim.clone() }))
        })
    }

    /// A record without a response blocks retries only while the boot that claimed it runs
    /// and its lease lasts.
    fn in_progress(&self, record: &Record, now: Timestamp) -> bool {
        record.boot.as_deref() == Some(self.boot_id.as_str())
            && record.created_at + IN_PROGRESS_LEASE > now
    }

    /// Stores the response of a claimed key; a 5xx (or `None`) releases the key instead. A
    /// claim that was taken over in the meantime (its lease ran out and a retry claimed the key)
    /// changes nothing.
    pub fn idempotency_finish(
        &self,
        claim: &Claim,
        response: Option<StoredResponse>,
    ) -> Result<()> {
        self.db.tx(|tx| {
            let Some(mut record) = tx.read::<Record>(&claim.key)? else {
                return Ok(());
            };
            if record.response.is_some() || record.claim.as_deref() != Some(claim.id.as_str()) {
                return Ok(());
            }
            match &response {
                Some(r) if r.status < 500 => {
                    record.response = Some(r.clone());
                    tx.write(&claim.key, &record)
                }
                _ => tx.remove(&claim.key),
            }
        })
    }

    /// Forgets keys older than the retention; returns how many.
    pub fn purge_idempotency_keys(&self, store: &StoreId, now: Timestamp) -> Result<usize> {
        let prefix = format!("idem/{store}/");
        let mut purged = 0;
        self.db.scan_all(&prefix, |k, record: Record| {
            if record.created_at + KEY_RETENTION <= now {
                self.db.tx(|tx| tx.remove(&k))?;
                purged += 1;
            }
            Ok(())
        })?;
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::model::event::StoreRef;
    use crate::model::store::RateLimits;
    use crate::storage::Db;

    fn epoch() -> Timestamp {
        "2026-01-05T00:00:00Z".parse().expect("ts")
    }

    fn service(dir: &std::path::Path, clock: &ManualClock) -> Service {
        let db = Db::open_sled(dir, false).expect("db");
        Service::new(db, Arc::new(clock.clone()), "admin-token-for-tests").expect("service")
    }

    fn actor(scopes: &[Scope]) -> Actor {
        Actor {
            store: StoreRef {
                id: StoreId::generate(epoch()),
                domain: "acme.example".to_owned(),
            },
            installation: InstallationId::generate(epoch()),
            plugin: "p".to_owned(),
            scopes: scopes.iter().copied().collect::<BTreeSet<_>>(),
            limits: RateLimits::default(),
        }
    }

    fn created() -> Option<StoredResponse> {
        Some(StoredResponse {
            status: 201,
            body: "{}".to_owned(),
            error: None,
        })
    }

    #[test]
    fn an_unfinished_claim_is_in_progress_only_for_its_lease() {
        let dir = tempfile::tempdir().expect("dir");
        let clock = ManualClock::new(epoch());
        let service = service(dir.path(), &clock);
        let caller = actor(&[]);
        let first = service
            .idempotency_begin(&caller, None, b"k", "fp")
            .expect("claim");
        let Begin::Run(stale) = first else {
            panic!("expected a claim")
        };
        let err = service
            .idempotency_begin(&caller, None, b"k", "fp")
            .expect_err("in progress");
        assert_eq!(err.code(), "idempotency_in_progress");
        clock.advance(IN_PROGRESS_LEASE - SignedDuration::from_millis(1));
        assert!(
            service
                .idempotency_begin(&caller, None, b"k", "fp")
                .is_err()
        );
        clock.advance(SignedDuration::from_millis(1));
        let Ok(Begin::Run(retry)) = service.idempotency_begin(&caller, None, b"k", "fp") else {
            panic!("a claim past its lease can be retried")
        };
        // The first attempt finishing late does not overwrite the retry's claim.
        service
            .idempotency_finish(&stale, created())
            .expect("finish");
        assert!(
            service
                .idempotency_begin(&caller, None, b"k", "fp")
                .is_err()
        );
        service
            .idempotency_finish(&retry, created())
            .expect("finish");
        assert!(matches!(
            service.idempotency_begin(&caller, None, b"k", "fp"),
            Ok(Begin::Replay(_))
        ));
    }

    #[test]
    fn a_claim_of_an_earlier_boot_is_not_in_progress() {
        let dir = tempfile::tempdir().expect("dir");
        let clock = ManualClock::new(epoch());
        let caller = actor(&[]);
        {
            let service = service(dir.path(), &clock);
            assert!(matches!(
                service.idempotency_begin(&caller, None, b"k", "fp"),
                Ok(Begin::Run(_))
            ));
            service.db.flush().expect("flush");
        }
        let service = service(dir.path(), &clock);
        assert!(matches!(
            service.idempotency_begin(&caller, None, b"k", "fp"),
            Ok(Begin::Run(_))
        ));
    }

    #[test]
    fn keys_belong_to_the_installation_and_need_the_route_scope() {
        let dir = tempfile::tempdir().expect("dir");
        let clock = ManualClock::new(epoch());
        let service = service(dir.path(), &clock);
        let writer = actor(&[Scope::CustomersWrite]);
        let Ok(Begin::Run(claim)) =
            service.idempotency_begin(&writer, Some(Scope::CustomersWrite), b"k", "fp")
        else {
            panic!("expected a claim")
        };
        service
            .idempotency_finish(&claim, created())
            .expect("finish");
        // The same store, another installation without the scope: refused before any lookup.
        let mut other = actor(&[]);
        other.store = writer.store.clone();
        let err = service
            .idempotency_begin(&other, Some(Scope::CustomersWrite), b"k", "fp")
            .expect_err("scope");
        assert_eq!(err.code(), "missing_scope");
        // With the scope, its own key space: a fresh claim, not the writer's response.
        other.scopes.insert(Scope::CustomersWrite);
        assert!(matches!(
            service.idempotency_begin(&other, Some(Scope::CustomersWrite), b"k", "fp"),
            Ok(Begin::Run(_))
        ));
    }
}
