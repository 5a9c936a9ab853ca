//! The delivery engine's records and their keys.
//!
//! - `dlv/{store}/{target}/{evt}`: one [`Delivery`] per (event, target), keyed by the event so a
//!   replay finds it directly and a listing is in event order.
//! - `work/{webhook|component}/{ms}/{store}/{target}/{evt}`: the delivery's entry in the work
//!   queue (`crate::model::work`) while it is pending, keyed by its due time.
//! - `att/{store}/{target}/{att}`: the attempt log.
//! - `exp/{ms}/{store}/{evt}`: when an event and everything about it is purged (30 days after it),
//!   with the other events of its fan-out's transaction that expire within a second ([`Expiry`]).

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::ids::{AttemptId, DeliveryId, EventId, InstallationId, StoreId, WebhookId};
use crate::model::scopes::EventType;

/// The retries after a failed attempt, each counted from the failure before it.
pub const RETRY_SCHEDULE: [SignedDuration; 6] = [
    SignedDuration::from_mins(1),
    SignedDuration::from_mins(5),
    SignedDuration::from_mins(30),
    SignedDuration::from_hours(2),
    SignedDuration::from_hours(6),
    SignedDuration::from_hours(24),
];

/// How much of a receiver's response body an attempt record keeps.
pub const RESPONSE_EXCERPT_BYTES: usize = 1024;

/// How long events, their deliveries and attempts are kept.
pub const RETENTION: SignedDuration =
    SignedDuration::from_hours(24 * crate::model::event::EVENT_RETENTION_DAYS);

/// Where a delivery goes: a webhook URL, or an installed component. The queue, retries,
/// pausing and replay are the same for both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetRef {
    /// A webhook subscription.
    Webhook(WebhookId),
    /// The component of an installation.
    Component(InstallationId),
}

impl TargetRef {
    /// The target's id as it appears in keys (ids carry their kind in their prefix).
    pub fn key(&self) -> &str {
        match self {
            TargetRef::Webhook(id) => id.as_str(),
            TargetRef::Component(id) => id.as_str(),
        }
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Queued for a first attempt or a retry.
    Pending,
    /// A receiver accepted it.
    Succeeded,
    /// The retries ran out, or the subscription was paused or removed; a replay re-queues it.
    Failed,
}

/// One event on its way to one target.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    /// Delivery id (`dlv_…`).
    pub id: DeliveryId,
    /// The store of the event.
    pub store_id: StoreId,
    /// Where it goes.
    pub target: TargetRef,
    /// The event (`evt_…`).
    pub event_id: EventId,
    /// The event's type.
    pub event_type: EventType,
    /// When the event happened.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub event_created_at: Timestamp,
    /// Pending, succeeded or failed.
    pub status: DeliveryStatus,
    /// Attempts made so far, replays included.
    pub attempts: u32,
    /// Retries used of the current schedule (0 to 6).
    pub retries: u32,
    /// When the next attempt is due, while pending.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub next_attempt_at: Option<Timestamp>,
    /// Why it failed, when it did.
    #[serde(default)]
    pub failure: Option<String>,
    /// How often it was replayed.
    #[serde(default)]
    pub replays: u32,
    /// The attempts, oldest first.
    #[serde(default)]
    pub attempt_ids: Vec<AttemptId>,
    /// How many component invocations deep the event's cause is (0: no component caused it);
    /// what a component's changes while handling it are marked with, plus one.
    #[serde(default)]
    pub cause_depth: u8,
    /// The W3C trace context (`traceparent`) of the span that emitted the event, when the host
    /// exports traces (`--otlp-endpoint`): every attempt's span is its child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// A test delivery (`POST /v1/webhooks/{id}/test`): a synthetic event sent to this
    /// subscription only, with `X-Service-Test: true`.
    #[serde(default)]
    pub test: bool,
    /// Where hosts share the database: the host that claimed the attempt in flight (internal:
    /// never shown by the API, see [`Delivery::public`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub claim: Option<crate::model::work::Claim>,
}

impl Delivery {
    /// The delivery as the API shows it: without the hosts' claim on it.
    pub fn public(mut self) -> Self {
        self.claim = None;
        self
    }

    /// A pending delivery of `event` to `target`, not yet queued.
    pub fn new(event: &crate::model::event::Event, target: &TargetRef, now: Timestamp) -> Self {
        Self {
            id: DeliveryId::generate(now),
            store_id: event.store.id.clone(),
            target: target.clone(),
            event_id: event.id.clone(),
            event_type: event.kind(),
            event_created_at: event.created_at,
            status: DeliveryStatus::Pending,
            attempts: 0,
            retries: 0,
            next_attempt_at: None,
            failure: None,
            replays: 0,
            attempt_ids: Vec::new(),
            cause_depth: 0,
            traceparent: None,
            test: false,
            claim: None,
        }
    }

    /// The delivery's key.
    pub fn key(&self) -> String {
        delivery_key(&self.store_id, &self.target, &self.event_id)
    }

    /// The key of its work queue entry when due at `at`.
    pub fn due_key(&self, at: Timestamp) -> String {
        self.work().key(at)
    }

    /// Its entry in the work queue.
    pub fn work(&self) -> crate::model::work::Work {
        crate::model::work::Work::Delivery(self.due_entry())
    }

    /// What its entry in the work queue names.
    pub fn due_entry(&self) -> DueEntry {
        DueEntry {
            store_id: self.store_id.clone(),
            target: self.target.clone(),
            event_id: self.event_id.clone(),
        }
    }
}

/// A delivery's work: which delivery is due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DueEntry {
    /// The store.
    pub store_id: StoreId,
    /// The target.
    pub target: TargetRef,
    /// The event.
    pub event_id: EventId,
}

/// One attempt, as its owner sees it in the attempt log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Attempt {
    /// Attempt id (`att_…`).
    pub id: AttemptId,
    /// The delivery it belongs to.
    pub delivery_id: DeliveryId,
    /// The event sent.
    pub event_id: EventId,
    /// The event's type.
    pub event_type: EventType,
    /// When the attempt started.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub attempted_at: Timestamp,
    /// 0 for the first attempt of a schedule, then 1 to 6 for the retries.
    pub retry: u32,
    /// Whether the receiver accepted it (a 2xx in time).
    pub succeeded: bool,
    /// The HTTP status the receiver answered, if it answered.
    pub status_code: Option<u16>,
    /// What went wrong without a status (timeout, connection refused, refused address).
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The start of the response body (at most 1 KiB, invalid UTF-8 replaced).
    pub response_body: Option<String>,
    /// For a component: the lines it logged during the attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<crate::model::log::LogLine>,
}

/// What is purged when an event expires: the record under the [`expiry_key`] of the event, at
/// its expiry; or, written for the events of one fan-out transaction that expire within
/// [`EXPIRY_GROUPED_WITHIN`] of each other, under the key of the first at the last one's expiry,
/// with the others in [`Expiry::also`] (one write for them all; each is kept at most that much
/// longer).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expiry {
    /// The store.
    pub store_id: StoreId,
    /// The event.
    pub event_id: EventId,
    /// The targets it was fanned out to.
    pub targets: Vec<TargetRef>,
    /// A test event (kept under [`test_event_key`], not in the store's event log).
    #[serde(default)]
    pub test: bool,
    /// The other events purged with it (see [`Expiry`]): one level, each written with no `also`
    /// of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Expiry>,
}

/// How far apart the expiries of events noted in one record may lie (see [`Expiry`]).
pub const EXPIRY_GROUPED_WITHIN: SignedDuration = SignedDuration::from_secs(1);

/// Key of a test event: kept apart from the store's events, so that it is neither in the
/// operator's event log nor fanned out.
pub fn test_event_key(store: &StoreId, event: &EventId) -> String {
    format!("evt-test/{store}/{event}")
}

/// Milliseconds since the epoch, as the queue keys hold them.
pub fn millis(at: Timestamp) -> u64 {
    u64::try_from(at.as_millisecond()).unwrap_or(0)
}

/// Key of a delivery.
pub fn delivery_key(store: &StoreId, target: &TargetRef, event: &EventId) -> String {
    [
        "dlv/",
        store.as_str(),
        "/",
        target.key(),
        "/",
        event.as_str(),
    ]
    .concat()
}

/// Prefix of a target's deliveries.
pub fn deliveries_prefix(store: &StoreId, target: &TargetRef) -> String {
    format!("dlv/{store}/{}/", target.key())
}

/// Key of an attempt.
pub fn attempt_key(store: &StoreId, target: &TargetRef, id: &AttemptId) -> String {
    ["att/", store.as_str(), "/", target.key(), "/", id.as_str()].concat()
}

/// Prefix of a target's attempts.
pub fn attempts_prefix(store: &StoreId, target: &TargetRef) -> String {
    format!("att/{store}/{}/", target.key())
}

/// Prefix of the expiry index.
pub const EXPIRY_PREFIX: &str = "exp/";

/// Key of an expiry entry.
pub fn expiry_key(at: Timestamp, store: &StoreId, event: &EventId) -> String {
    format!("{EXPIRY_PREFIX}{:020}/{store}/{event}", millis(at))
}

/// The expiry time (ms) of an expiry key.
pub fn expiry_ms_of(key: &str) -> Option<u64> {
    key.strip_prefix(EXPIRY_PREFIX)?.get(..20)?.parse().ok()
}

/// What one attempt came to.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// When it started (the injected clock).
    pub started: Timestamp,
    /// A 2xx within the timeout.
    pub succeeded: bool,
    /// The receiver's status, when it answered.
    pub status_code: Option<u16>,
    /// What went wrong without a status.
    pub error: Option<String>,
    /// Wall time taken, in milliseconds.
    pub duration_ms: u64,
    /// The start of the response body.
    pub response_body: Option<String>,
    /// For a component: the lines it logged.
    pub logs: Vec<crate::model::log::LogLine>,
    /// For a component: what it read from its store, kept for a replay.
    pub recording: Option<Box<crate::model::log::Recording>>,
}

impl Outcome {
    /// A failure before anything was sent.
    pub fn unsent(started: Timestamp, error: String) -> Self {
        Self {
            started,
            succeeded: false,
            status_code: None,
            error: Some(error),
            duration_ms: 0,
            response_body: None,
            logs: Vec::new(),
            recording: None,
        }
    }

    /// One line about it, for a pause reason.
    pub fn summary(&self) -> String {
        match (&self.status_code, &self.error) {
            (Some(code), _) => format!("HTTP {code}"),
            (None, Some(error)) => error.clone(),
            (None, None) => "no answer".to_owned(),
        }
    }
}
