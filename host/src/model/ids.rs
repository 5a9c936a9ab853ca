//! Prefixed, typed identifiers: `store_…`, `inst_…`, `ord_…`. An id is a prefix plus a ULID in
//! lower case, so ids sort by creation time and a listing in key order is a listing by age.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use std::sync::Mutex;

/// The error returned when a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected an id starting with `{prefix}_`")]
pub struct BadId {
    /// The prefix that was expected.
    pub prefix: &'static str,
}

/// Makes the time-plus-random body of a new id. Within one process ids are strictly increasing,
/// even within one millisecond (or under a stopped test clock), so key order is creation order.
pub fn new_id_body(now: Timestamp) -> String {
    static GENERATOR: Mutex<Option<ulid::Generator>> = Mutex::new(None);
    let ms = u64::try_from(now.as_millisecond()).unwrap_or(0);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let mut generator = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let id = generator
        .get_or_insert_with(ulid::Generator::new)
        .generate_from_datetime(at)
        // The random part overflowed within one millisecond (2^80 ids): start afresh.
        .unwrap_or_else(|_| ulid::Ulid::from_datetime(at));
    id.to_string().to_ascii_lowercase()
}

/// When the id `id` (`{prefix}_{ulid}`) was made, in milliseconds since the Unix epoch.
pub fn created_ms(id: &str) -> Option<u64> {
    let (_, body) = id.split_once('_')?;
    ulid::Ulid::from_string(&body.to_ascii_uppercase())
        .ok()
        .map(|u| u.timestamp_ms())
}

macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with, without the underscore.
            pub const PREFIX: &'static str = $prefix;

            /// A new, unique id whose order follows `now`.
            pub fn generate(now: jiff::Timestamp) -> Self {
                Self(format!(concat!($prefix, "_{}"), $crate::model::ids::new_id_body(now)))
            }

            /// The id as text, prefix included.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = BadId;
            fn from_str(s: &str) -> Result<Self, BadId> {
                let body = s
                    .strip_prefix(concat!($prefix, "_"))
                    .ok_or(BadId { prefix: $prefix })?;
                let ok = !body.is_empty()
                    && body.len() <= 64
                    && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if ok { Ok(Self(s.to_owned())) } else { Err(BadId { prefix: $prefix }) }
            }
        }

        impl TryFrom<String> for $name {
            type Error = BadId;
            fn try_from(s: String) -> Result<Self, BadId> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(concat!("^", $prefix, "_[0-9a-z_-]+$")))
                    .examples([serde_json::json!(concat!($prefix, "_01jd4z7k8m3n5p6q7r8s9t0v1w"))])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

prefixed_id!(
    /// A merchant store.
    StoreId, "store"
);
prefixed_id!(
    /// A plugin installed into a store.
    InstallationId, "inst"
);
prefixed_id!(
    /// Someone who signs in: a store's owner or staff member, or a plugin developer.
    AccountId, "acct"
);
prefixed_id!(
    /// A developer's API key (the key itself is a secret; this names it).
    ApiKeyId, "key"
);
prefixed_id!(
    /// One HTTP request (or one host-function call), for support and logs.
    RequestId, "req"
);
prefixed_id!(
    /// A store event.
    EventId, "evt"
);
prefixed_id!(
    /// An order.
    OrderId, "ord"
);
prefixed_id!(
    /// A line item of an order.
    LineItemId, "li"
);
prefixed_id!(
    /// A fulfilment (a shipment of some line items).
    FulfillmentId, "ful"
);
prefixed_id!(
    /// A refund.
    RefundId, "ref"
);
prefixed_id!(
    /// A product.
    ProductId, "prod"
);
prefixed_id!(
    /// A variant of a product (what is priced and stocked).
    VariantId, "var"
);
prefixed_id!(
    /// A customer.
    CustomerId, "cus"
);
prefixed_id!(
    /// A postal address of a customer.
    AddressId, "addr"
);
prefixed_id!(
    /// A webhook subscription.
    WebhookId, "wh"
);
prefixed_id!(
    /// One delivery of one event to one subscription.
    DeliveryId, "dlv"
);
prefixed_id!(
    /// An outbound message (notification).
    MessageId, "msg"
);
prefixed_id!(
    /// One attempt to deliver an event to a webhook.
    AttemptId, "att"
);
prefixed_id!(
    /// An email the host sent (or queued for the operator) itself.
    MailId, "mail"
);

/// Parses a path id of type `T`; a malformed id is simply not found.
pub fn path_id<T: std::str::FromStr>(
    resource: &'static str,
    raw: &str,
) -> Result<T, crate::model::error::Error> {
    raw.parse()
        .map_err(|_| crate::model::error::Error::not_found(resource, raw))
}
