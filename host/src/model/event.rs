//! Events: the envelope every receiver gets, the outbox entry that queues it for fan-out, and its cause.

pub mod data;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use crate::model::ids::EventId;
use crate::model::ids::InstallationId;
use crate::model::ids::StoreId;
use crate::model::scopes::EventType;
use crate::model::scopes::Scope;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use utoipa::ToSchema;

pub use data::EventData;

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
///
/// Serialized as `{"id", "type", "created_at", "store", "data"}`, `type` being the type of
/// `data`; read back by dispatching `data` on `type`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event identifier (`evt_…`).
    pub id: EventId,
    /// When it happened.
    pub created_at: Timestamp,
    /// The store it happened in.
    pub store: StoreRef,
    /// What happened: its variant is the event's type.
    pub data: EventData,
}

impl Event {
    /// A new event in `store` at `now`, with a fresh id.
    pub fn new(store: &StoreRef, data: impl Into<EventData>, now: Timestamp) -> Self {
        Self {
            id: EventId::generate(now),
            // As it is stored: the event its transaction keeps for the fan-out
            // (`storage::fresh`) is the one a read gives back.
            created_at: crate::model::clock::to_millisecond(now),
            store: store.clone(),
            data: data.into(),
        }
    }

    /// The event's type, e.g. `order.paid`.
    pub fn kind(&self) -> EventType {
        self.data.kind()
    }

    /// The event as a receiver holding `scopes` may see it, by the rule responses follow: a
    /// buyer's email is customer data, shown only with `customers.read` (`Order::for_actor`).
    /// Order events of a receiver without it carry `"email": null`; the stored event is unchanged,
    /// so a receiver that gains the scope sees the email on the next attempt or replay.
    pub fn for_scopes(&self, scopes: &BTreeSet<Scope>) -> Cow<'_, Event> {
        let has_email = self.data.buyer_email().is_some_and(Option::is_some);
        if scopes.contains(&Scope::CustomersRead) || !has_email {
            return Cow::Borrowed(self);
        }
        let mut event = self.clone();
        if let Some(email) = event.data.buyer_email_mut() {
            *email = None;
        }
        Cow::Owned(event)
    }
}

/// A timestamp in the API's format, for the envelope's hand-written (de)serialization.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct ApiTs(#[serde(with = "crate::model::clock::api_ts")] Timestamp);

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Event", 5)?;
        s.serialize_field("id", &self.id)?;
        s.serialize_field("type", &self.kind())?;
        s.serialize_field("created_at", &ApiTs(self.created_at))?;
        s.serialize_field("store", &self.store)?;
        s.serialize_field("data", &self.data)?;
        s.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const FIELDS: &[&str] = &["id", "type", "created_at", "store", "data"];
        deserializer.deserialize_struct("Event", FIELDS, EventVisitor)
    }
}

/// The fields of an envelope.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Id,
    Type,
    CreatedAt,
    Store,
    Data,
    #[serde(other)]
    Other,
}

/// Reads an envelope; `data` is read straight into the type `type` names, or, in an envelope
/// that gives `data` first (the host never writes one), kept as JSON until `type` is known.
struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event envelope")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let mut id = None;
        let mut kind: Option<EventType> = None;
        let mut created_at = None;
        let mut store = None;
        let mut data = None;
        let mut early_data: Option<serde_json::Value> = None;
        while let Some(key) = map.next_key::<Field>()? {
            match key {
                Field::Id => id = Some(map.next_value()?),
                Field::Type => kind = Some(map.next_value()?),
                Field::CreatedAt => created_at = Some(map.next_value::<ApiTs>()?.0),
                Field::Store => store = Some(map.next_value()?),
                Field::Data => match kind {
                    Some(kind) => data = Some(map.next_value_seed(data::DataOf(kind))?),
                    None => early_data = Some(map.next_value()?),
                },
                Field::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        let data = match (data, early_data) {
            (Some(data), _) => data,
            (None, Some(value)) => EventData::from_json(kind, value).map_err(de::Error::custom)?,
            (None, None) => return Err(de::Error::missing_field("data")),
        };
        Ok(Event {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            created_at: created_at.ok_or_else(|| de::Error::missing_field("created_at"))?,
            store: store.ok_or_else(|| de::Error::missing_field("store"))?,
            data,
        })
    }
}

// The envelope as the OpenAPI document describes it (`data` per type is in the API guide); its
// doc comment is the schema's description.
/// The event envelope: the JSON body of every webhook delivery and what a component receives.
#[derive(Serialize, ToSchema)]
#[schema(as = Event)]
#[allow(dead_code)] // only its schema is used
struct EventSchema {
    /// Event identifier (`evt_…`).
    id: EventId,
    /// Event name, e.g. `order.paid`.
    #[serde(rename = "type")]
    kind: EventType,
    /// When it happened: ISO 8601 UTC with milliseconds.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String, example = "2026-11-22T10:15:30.123Z")]
    created_at: Timestamp,
    /// The store it happened in.
    store: StoreRef,
    /// Event content (see the API docs for each type).
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

impl utoipa::PartialSchema for Event {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        EventSchema::schema()
    }
}

impl ToSchema for Event {
    fn name() -> Cow<'static, str> {
        EventSchema::name()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        EventSchema::schemas(schemas);
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
    /// The W3C `traceparent` of the span that emitted the event, when traces are exported
    /// (see [`crate::telemetry`]): its deliveries' spans are its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
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
    ["evt/", store.as_str(), "/", id.as_str()].concat()
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

/// A key at or after every outbox entry that a fan-out kept for first attempts made from memory
/// (see `service::deliveries::queue::FirstAttempts`): an entry after it was never fanned out.
pub const OUTBOX_KEPT_MARK: &str = "outbox-kept";

/// How far [`kept_mark_for`] sets the mark ahead of the entry kept: the fan-out writes it about
/// once a second, not with every transaction.
pub const KEPT_MARK_AHEAD_MS: u64 = 1000;

/// The mark ([`OUTBOX_KEPT_MARK`]) for the kept outbox entry `key`: the last key an event made
/// [`KEPT_MARK_AHEAD_MS`] after it could have (`key` itself when its id tells no time).
pub fn kept_mark_for(key: &str) -> String {
    let made = key
        .strip_prefix(OUTBOX_PREFIX)
        .and_then(crate::model::ids::created_ms);
    match made {
        Some(ms) => {
            let ahead = ulid::Ulid::from_parts(ms.saturating_add(KEPT_MARK_AHEAD_MS), u128::MAX);
            let id = ahead.to_string().to_ascii_lowercase();
            format!("{OUTBOX_PREFIX}{}_{id}", crate::model::ids::EventId::PREFIX)
        }
        None => key.to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
