//! The service layer: every rule of the platform, once.
//!
//! HTTP handlers and WIT host functions are thin adapters over these functions. Each operation
//! takes an [`Actor`] (the store, installation and scopes of the caller) and checks scope,
//! validation and state rules before it has any effect.

pub mod accounts;
pub mod answers;
pub mod auth;
pub mod auth_cache;
pub mod components;
pub mod customers;
pub mod deliveries;
pub mod developer;
pub mod events;
pub mod idempotency;
pub mod limits;
pub mod mail;
pub mod maintenance;
pub mod network;
pub mod notifications;
pub mod orders;
pub mod pagination;
pub mod plugins;
pub mod products;
pub mod ratelimit;
pub mod stores;
pub mod validate;
pub mod webhooks;

use std::ops::Deref;
use std::sync::Arc;

use rand::RngCore;

use crate::model::clock::SharedClock;
use crate::model::error::Result;
use crate::storage::Db;
use network::NetworkPolicy;

pub use crate::model::scopes::{EventType, Scope};
pub use auth::Actor;
pub use pagination::{Page, PageInfo, PageParams, PageRequest};

/// The service layer: cheap to clone, shared by the HTTP server, the delivery engine and the
/// plugin runtime.
#[derive(Clone, Debug)]
pub struct Service {
    inner: Arc<Inner>,
}

/// What the service holds.
#[derive(Debug)]
pub struct Inner {
    /// Records and the event outbox.
    pub db: Db,
    /// The time source for every rule that depends on time.
    pub clock: SharedClock,
    /// Per-store request rate limiter.
    pub limiter: ratelimit::RateLimiter,
    /// Per-address limiter of failed authentication.
    pub auth_limiter: ratelimit::AuthFailureLimiter,
    /// Authenticated tokens and installed installations, current while their records are
    /// unchanged.
    pub auth_cache: auth_cache::AuthCache,
    /// Each store's targets (subscriptions, installations, their plugin versions), current while
    /// their records are unchanged.
    pub targets: deliveries::index::TargetIndex,
    /// Id of this boot of the host (its start, then random: later boots sort after earlier
    /// ones): an idempotency claim of an earlier boot was cut short by the restart.
    pub boot_id: String,
    /// This host in this boot, as it claims work where hosts share the database.
    pub holder: crate::storage::queue::Holder,
    /// The hosts sharing the database, which divide the delivery work between them.
    pub peers: deliveries::peers::Peers,
    /// How long a claim on work holds for another host (see [`Options::claim_lease`]).
    pub claim_lease: std::time::Duration,
    /// Signs pagination cursors.
    pub cursors: pagination::Cursors,
    /// Which addresses webhooks may go to.
    pub network: NetworkPolicy,
    /// The operator's defaults and maxima of components' per-invocation limits.
    pub limit_policy: limits::LimitPolicy,
    /// SHA-256 of the operator's admin token.
    admin_token_hash: [u8; 32],
    /// How the host sends its own mail.
    pub mail_route: mail::MailRoute,
    /// The host's address as people reach it (links in invitation mails), without a trailing `/`.
    pub public_url: String,
    /// This host's metrics registry (`GET /metrics`).
    pub metrics: crate::metrics::Metrics,
    /// Answers of the `GET`s of one order, product or customer, as sent (see [`answers`]).
    pub answers: answers::RecordAnswers,
}

/// Settings of the service beyond storage and time.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Non-public networks webhooks may go to.
    pub allow_networks: Vec<ipnet::IpNet>,
    /// Components' per-invocation limits: the defaults and the most a manifest may ask for.
    pub plugin_limits: limits::LimitPolicy,
    /// How the host sends its own mail (over SMTP when the operator configured a server).
    pub mail_route: mail::MailRoute,
    /// How many failed authentications a client address may make.
    pub auth_failures: ratelimit::AuthFailureLimits,
    /// The host's address as people reach it (`https://shop-host.example`); links in mails
    /// start with it. Empty: `http://127.0.0.1:8080`.
    pub public_url: String,
    /// The id of this host, the same across its restarts (kept in its data folder), which names
    /// its claims on work where hosts share a database. Empty: a random one (a restart then
    /// waits out the claims of the boot before).
    pub host_id: String,
    /// How long a host's claim on a delivery or mail holds before another host may take the
    /// work over (the claiming host died). Zero:
    /// [`CLAIM_LEASE`](deliveries::queue::CLAIM_LEASE).
    pub claim_lease: std::time::Duration,
}

impl Deref for Service {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

const CURSOR_SECRET_KEY: &str = "meta/cursor-secret";

impl Service {
    /// Builds the service over `db` with default options, creating the host secrets on first
    /// start.
    pub fn new(db: Db, clock: SharedClock, admin_token: &str) -> Result<Self> {
        Self::with_options(db, clock, admin_token, Options::default())
    }

    /// Builds the service over `db`, creating the host secrets on first start and moving the
    /// entries of earlier versions' queues into the work queue.
    pub fn with_options(
        db: Db,
        clock: SharedClock,
        admin_token: &str,
        options: Options,
    ) -> Result<Self> {
        let secret = db.tx(|tx| {
            if let Some(secret) = tx.read::<String>(CURSOR_SECRET_KEY)? {
                return Ok(secret);
            }
            let mut bytes = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut bytes);
            let secret = hex::encode(bytes);
            tx.write(CURSOR_SECRET_KEY, &secret)?;
            Ok(secret)
        })?;
        let migrated = crate::storage::queue::migrate_legacy(&db)?;
        if migrated > 0 {
            tracing::info!(
                migrated,
                "moved queued work of an earlier version into the work queue"
            );
        }
        let mut key = [0u8; 32];
        hex::decode_to_slice(&secret, &mut key)
            .map_err(|e| anyhow::anyhow!("the stored cursor secret is corrupt: {e}"))?;
        let auth_changes = db.watch(&auth_cache::WATCHED);
        let target_changes = db.watch(&deliveries::index::WATCHED);
        let answers = answers::RecordAnswers::new(&db);
        let limiter = ratelimit::RateLimiter::new(db.is_shared().then(|| db.clone()));
        // Time-ordered (the start in µs, then random), so a host's later boot sorts after its
        // earlier ones.
        let boot_id = {
            let mut bytes = [0u8; 8];
            rand::thread_rng().fill_bytes(&mut bytes);
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            format!("{started:016x}{}", hex::encode(bytes))
        };
        let holder = crate::storage::queue::Holder {
            host: if options.host_id.is_empty() {
                boot_id.clone()
            } else {
                options.host_id.clone()
            },
            boot: boot_id.clone(),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                network: NetworkPolicy::new(options.allow_networks),
                limit_policy: options.plugin_limits,
                db,
                clock,
                limiter,
                auth_limiter: ratelimit::AuthFailureLimiter::new(options.auth_failures),
                auth_cache: auth_cache::AuthCache::new(auth_changes, auth_cache::CAPACITY),
                targets: deliveries::index::TargetIndex::new(
                    target_changes,
                    deliveries::index::CAPACITY,
                ),
                boot_id,
                peers: deliveries::peers::Peers::new(&holder),
                holder,
                claim_lease: if options.claim_lease.is_zero() {
                    deliveries::queue::CLAIM_LEASE
                } else {
                    options.claim_lease
                },
                cursors: pagination::Cursors::new(key),
                admin_token_hash: auth::hash_token(admin_token),
                mail_route: options.mail_route,
                public_url: if options.public_url.is_empty() {
                    "http://127.0.0.1:8080".to_owned()
                } else {
                    options.public_url.trim_end_matches('/').to_owned()
                },
                metrics: crate::metrics::Metrics::new(),
                answers,
            }),
        })
    }

    /// The current time from the injected clock.
    pub fn now(&self) -> jiff::Timestamp {
        self.clock.now()
    }
}
