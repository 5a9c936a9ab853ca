//! Events: the envelope every receiver gets, the outbox entry that queues it for fan-out, and its cause.

use crate::model::ids::EventId;
use crate::model::ids::InstallationId;
use crate::model::ids::StoreId;
use crate::model::scopes::EventType;
use crate::model::scopes::Scope;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use utoipa::ToSchema;
/// How long events are kept.
pub const EVENT_RETENTION_DAYS: i64 = 30;

/// The store an event happened in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StoreRef {
    /// The store's id (`store_…`).
    pub id: StoreId,
    /// The store's domain.
    pub domain: String,
}

/// The event envelope: the JSON body of every webhook delivery and what a component receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// Event identifier (`evt_…`).
    pub id: EventId,
    /// Event name, e.g. `order.paid`.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// When it happened: ISO 8601 UTC with milliseconds.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String, example = "2026-11-22T10:15:30.123Z")]
    pub created_at: Timestamp,
    /// The store it happened in.
    pub store: StoreRef,
    /// Event content (see the API docs for each type).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

impl Event {
    /// The event as a receiver holding `scopes` may see it, by the rule responses follow: a
    /// buyer's email is customer data, shown only with `customers.read` (`Order::for_actor`).
    /// Order events of a receiver without it carry `"email": null`; the stored event is unchanged,
    /// so a receiver that gains the scope sees the email on the next attempt or replay.
    pub fn for_scopes(
        &self,
        scopes: &std::collections::BTreeSet<Scope>,
    ) -> std::borrow::Cow<'_, Event> {
        let has_email = self.data["order"]
            .get("email")
            .is_some_and(|email| !email.is_null());
        if scopes.contains(&Scope::CustomersRead) || !has_email {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut event = self.clone();
        event.data["order"]["email"] = serde_json::Value::Null;
        std::borrow::Cow::Owned(event)
    }
}

/// An entry of the outbox: an event the delivery engine has yet to fan out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// The event's store.
    pub store_id: StoreId,
    /// The event.
    pub event_id: EventId,
    /// The component invocation whose host call made the change, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// How many component invocations deep a chain of events may go: an event caused by a component
/// that handled an event caused by a component (and so on) reaches no further component once
/// `depth` is this. Webhooks still receive it.
pub const MAX_COMPONENT_CHAIN: u8 = 4;

/// The component invocation behind a change: loop protection for events that components cause.
///
/// A component is never delivered an event its own host calls caused (it would re-trigger itself
/// without end), and chains through several components stop at [`MAX_COMPONENT_CHAIN`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// The installation whose component made the change.
    pub installation: InstallationId,
    /// 1 for a change made while handling an event no component caused; one more for each
    /// component in the chain before it.
    pub depth: u8,
}

impl Cause {
    /// Whether an event with this cause may be delivered to the component of `installation`.
    pub fn reaches_component(cause: Option<&Cause>, installation: &InstallationId) -> bool {
        cause.is_none_or(|c| &c.installation != installation && c.depth < MAX_COMPONENT_CHAIN)
    }
}

/// Key of an event record.
pub fn event_key(store: &StoreId, id: &EventId) -> String {
    format!("evt/{store}/{id}")
}

/// Key prefix of a store's events.
pub fn events_prefix(store: &StoreId) -> String {
    format!("evt/{store}/")
}

/// Key of an outbox entry.
pub fn outbox_key(id: &EventId) -> String {
    format!("outbox/{id}")
}

/// Prefix of the outbox.
pub const OUTBOX_PREFIX: &str = "outbox/";
