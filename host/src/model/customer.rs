//! Customers: the record, its addresses, and the bodies of the customer operations.

use crate::model::ids::AddressId;
use crate::model::ids::CustomerId;
use crate::model::ids::StoreId;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use utoipa::IntoParams;
use utoipa::ToSchema;
/// A postal address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Address {
    /// Address id (`addr_…`).
    pub id: AddressId,
    /// First line.
    pub line1: String,
    /// Second line.
    pub line2: Option<String>,
    /// City.
    pub city: String,
    /// State, province or region.
    pub province: Option<String>,
    /// Postal code.
    pub postal_code: Option<String>,
    /// ISO 3166-1 alpha-2 country code (`FR`).
    pub country: String,
    /// Whether this is the default address (exactly one is, when there are any).
    pub default: bool,
}

/// An address in a request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddressInput {
    /// First line (required).
    pub line1: String,
    /// Second line.
    #[serde(default)]
    pub line2: Option<String>,
    /// City (required).
    pub city: String,
    /// State, province or region.
    #[serde(default)]
    pub province: Option<String>,
    /// Postal code.
    #[serde(default)]
    pub postal_code: Option<String>,
    /// ISO 3166-1 alpha-2 country code.
    pub country: String,
    /// Makes this the default address (the first one is the default otherwise).
    #[serde(default)]
    pub default: bool,
}

/// A customer of the store. To a token without `customers.read` (a `customers.write` token's own
/// writes), `email`, `phone`, `first_name`, `last_name` and `note` are null and `addresses` empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Customer {
    /// Customer id (`cus_…`).
    pub id: CustomerId,
    /// Email address, unique in the store.
    pub email: Option<String>,
    /// Phone number in E.164 form.
    pub phone: Option<String>,
    /// Given name.
    pub first_name: Option<String>,
    /// Family name.
    pub last_name: Option<String>,
    /// Whether the customer agreed to marketing messages.
    pub accepts_marketing: bool,
    /// Merchant's tags.
    pub tags: Vec<String>,
    /// Merchant's note.
    pub note: Option<String>,
    /// Postal addresses.
    pub addresses: Vec<Address>,
    /// When it was created.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
}

/// Prefix of every customer record's key.
pub const CUSTOMER_PREFIX: &str = "customer/";

impl Customer {
    /// Key of a customer record.
    pub fn key(store: &StoreId, id: &CustomerId) -> String {
        format!("{CUSTOMER_PREFIX}{store}/{id}")
    }

    pub fn email_key(store: &StoreId, email: &str) -> String {
        format!("customer-email/{store}/{}", email.to_ascii_lowercase())
    }
}

/// Body of `POST /v1/customers`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCustomer {
    /// Email address (an email or a phone is required).
    #[serde(default)]
    pub email: Option<String>,
    /// Phone number, E.164 (`+14155550123`).
    #[serde(default)]
    pub phone: Option<String>,
    /// Given name.
    #[serde(default)]
    pub first_name: Option<String>,
    /// Family name.
    #[serde(default)]
    pub last_name: Option<String>,
    /// Marketing consent (default false).
    #[serde(default)]
    pub accepts_marketing: bool,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Note.
    #[serde(default)]
    pub note: Option<String>,
    /// Addresses (at most 20).
    #[serde(default)]
    pub addresses: Vec<AddressInput>,
}

/// Body of `PATCH /v1/customers/{id}`: only fields present change; `addresses` replaces the list.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateCustomer {
    /// New email.
    #[serde(default)]
    pub email: Option<String>,
    /// New phone.
    #[serde(default)]
    pub phone: Option<String>,
    /// New given name.
    #[serde(default)]
    pub first_name: Option<String>,
    /// New family name.
    #[serde(default)]
    pub last_name: Option<String>,
    /// New consent.
    #[serde(default)]
    pub accepts_marketing: Option<bool>,
    /// Replaces the tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// New note.
    #[serde(default)]
    pub note: Option<String>,
    /// Replaces the addresses.
    #[serde(default)]
    pub addresses: Option<Vec<AddressInput>>,
}

/// Filters of `GET /v1/customers`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CustomerFilter {
    /// Only the customer with this email (case-insensitive).
    pub email: Option<String>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}
