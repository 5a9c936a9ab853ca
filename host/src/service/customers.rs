//! Customers and their addresses.
//!
//! A customer has an email or a phone number (or both); emails are unique within a store. Any
//! change of the profile fires `customer.updated` (a request that changes nothing fires nothing).
//! `DELETE` is a hard delete: the record is gone and `customer.deleted` carries only its id.
//! Orders keep their own copy of the buyer's email.
//!
//! A customer's personal data (email, phone, names, note, addresses) is shown only to an actor
//! holding `customers.read`: a `customers.write` token gets back a redacted record (those fields
//! null or empty) from its own writes, so that `PATCH {}` is not a way to read a profile.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use super::Service;
use super::auth::Actor;
use super::pagination::{Listing, Page, PageRequest};
use super::scopes::{EventType, Scope};
use super::validate;
use crate::error::{Error, Result};
use crate::ids::{AddressId, CustomerId, StoreId};

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
    #[serde(with = "crate::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "crate::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
}

impl Customer {
    /// Key of a customer record.
    pub fn key(store: &StoreId, id: &CustomerId) -> String {
        format!("customer/{store}/{id}")
    }

    /// The customer as `actor` may see it: without `customers.read`, only the id, consent, tags
    /// and times; the personal fields are null and the addresses empty.
    pub fn for_actor(self, actor: &Actor) -> Customer {
        if actor.scopes.contains(&Scope::CustomersRead) {
            return self;
        }
        Customer {
            email: None,
            phone: None,
            first_name: None,
            last_name: None,
            note: None,
            addresses: Vec::new(),
            ..self
        }
    }

    fn email_key(store: &StoreId, email: &str) -> String {
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
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

fn build_addresses(inputs: &[AddressInput], now: Timestamp) -> Result<Vec<Address>> {
    if inputs.len() > 20 {
        return Err(Error::invalid("addresses", "at most 20 addresses"));
    }
    let explicit_default = inputs.iter().position(|a| a.default);
    if inputs.iter().filter(|a| a.default).count() > 1 {
        return Err(Error::invalid(
            "addresses",
            "only one address can be the default",
        ));
    }
    inputs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let f = |name: &str| format!("addresses[{i}].{name}");
            validate::text(&f("line1"), &a.line1, 1, 255)?;
            validate::opt_text(&f("line2"), a.line2.as_deref(), 255)?;
            validate::text(&f("city"), &a.city, 1, 255)?;
            validate::opt_text(&f("province"), a.province.as_deref(), 255)?;
            validate::opt_text(&f("postal_code"), a.postal_code.as_deref(), 32)?;
            if a.country.len() != 2 || !a.country.chars().all(|c| c.is_ascii_uppercase()) {
                return Err(Error::invalid(
                    f("country"),
                    "must be an ISO 3166-1 alpha-2 code such as `FR`",
                ));
            }
            Ok(Address {
                id: AddressId::generate(now),
                line1: a.line1.clone(),
                line2: a.line2.clone(),
                city: a.city.clone(),
                province: a.province.clone(),
                postal_code: a.postal_code.clone(),
                country: a.country.clone(),
                default: explicit_default.map_or(i == 0, |d| d == i),
            })
        })
        .collect()
}

fn validate_profile(
    email: Option<&str>,
    phone: Option<&str>,
    first: Option<&str>,
    last: Option<&str>,
    note: Option<&str>,
) -> Result<()> {
    if let Some(email) = email {
        validate::email("email", email)?;
    }
    if let Some(phone) = phone {
        validate::phone("phone", phone)?;
    }
    validate::opt_text("first_name", first, 255)?;
    validate::opt_text("last_name", last, 255)?;
    validate::opt_text("note", note, 5000)?;
    Ok(())
}

impl Service {
    /// Creates a customer; fires `customer.created`.
    pub fn create_customer(&self, actor: &Actor, input: CreateCustomer) -> Result<Customer> {
        actor.require(Scope::CustomersWrite)?;
        validate_profile(
            input.email.as_deref(),
            input.phone.as_deref(),
            input.first_name.as_deref(),
            input.last_name.as_deref(),
            input.note.as_deref(),
        )?;
        if input.email.is_none() && input.phone.is_none() {
            return Err(Error::invalid(
                "email",
                "a customer needs an email or a phone number",
            ));
        }
        validate::tags("tags", &input.tags)?;
        let now = self.now();
        let customer = Customer {
            id: CustomerId::generate(now),
            email: input.email.clone(),
            phone: input.phone,
            first_name: input.first_name,
            last_name: input.last_name,
            accepts_marketing: input.accepts_marketing,
            tags: input.tags,
            note: input.note,
            addresses: build_addresses(&input.addresses, now)?,
            created_at: now,
            updated_at: now,
        };
        let store = actor.store_id();
        self.db
            .tx(|tx| {
                if let Some(email) = &customer.email {
                    claim_email(tx, store, email, &customer.id)?;
                }
                tx.write(&Customer::key(store, &customer.id), &customer)?;
                tx.emit(
                    &actor.store,
                    EventType::CustomerCreated,
                    json!({ "customer": &customer }),
                    now,
                )?;
                Ok(customer.clone())
            })
            .map(|c| c.for_actor(actor))
    }

    /// A customer of the actor's store, with addresses.
    pub fn customer(&self, actor: &Actor, id: &CustomerId) -> Result<Customer> {
        actor.require(Scope::CustomersRead)?;
        self.customer_record(actor.store_id(), id)
    }

    /// A customer record, without a scope check: for rules that need the record but do not show
    /// it (resolving `customer:<id>` recipients, orders referring to customers).
    pub(crate) fn customer_record(&self, store: &StoreId, id: &CustomerId) -> Result<Customer> {
        self.db
            .read(&Customer::key(store, id))?
            .ok_or_else(|| Error::not_found("customer", id))
    }

    /// Customers, newest first.
    pub fn list_customers(
        &self,
        actor: &Actor,
        filter: &CustomerFilter,
        page: &PageRequest,
    ) -> Result<Page<Customer>> {
        actor.require(Scope::CustomersRead)?;
        let prefix = format!("customer/{}/", actor.store_id());
        let email = filter.email.as_deref().map(str::to_ascii_lowercase);
        let list_id = format!("{prefix}?email={email:?}");
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |c: &Customer| {
            email.as_deref().is_none_or(|e| {
                c.email.as_deref().map(str::to_ascii_lowercase).as_deref() == Some(e)
            })
        })
    }

    /// Changes a customer's profile; fires `customer.updated` when something changed.
    pub fn update_customer(
        &self,
        actor: &Actor,
        id: &CustomerId,
        patch: UpdateCustomer,
    ) -> Result<Customer> {
        actor.require(Scope::CustomersWrite)?;
        validate_profile(
            patch.email.as_deref(),
            patch.phone.as_deref(),
            patch.first_name.as_deref(),
            patch.last_name.as_deref(),
            patch.note.as_deref(),
        )?;
        if let Some(tags) = &patch.tags {
            validate::tags("tags", tags)?;
        }
        let now = self.now();
        let addresses = patch
            .addresses
            .as_deref()
            .map(|a| build_addresses(a, now))
            .transpose()?;
        let store = actor.store_id();
        self.db.tx(|tx| {
            let key = Customer::key(store, id);
            let mut customer: Customer = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("customer", id))?;
            let before = customer.clone();
            if let Some(email) = &patch.email
                && customer.email.as_deref().map(str::to_ascii_lowercase)
                    != Some(email.to_ascii_lowercase())
            {
                claim_email(tx, store, email, id)?;
                if let Some(old) = &customer.email {
                    tx.remove(&Customer::email_key(store, old))?;
                }
                customer.email = Some(email.clone());
            }
            if patch.phone.is_some() {
                customer.phone.clone_from(&patch.phone);
            }
            if patch.first_name.is_some() {
                customer.first_name.clone_from(&patch.first_name);
            }
            if patch.last_name.is_some() {
                customer.last_name.clone_from(&patch.last_name);
            }
            if let Some(v) = patch.accepts_marketing {
                customer.accepts_marketing = v;
            }
            if let Some(tags) = &patch.tags {
                customer.tags.clone_from(tags);
            }
            if patch.note.is_some() {
                customer.note.clone_from(&patch.note);
            }
            if let Some(addresses) = &addresses {
                let same = addresses.len() == customer.addresses.len()
                    && addresses.iter().zip(&customer.addresses).all(|(a, b)| {
                        Address {
                            id: b.id.clone(),
                            ..a.clone()
                        } == *b
                    });
                if !same {
                    customer.addresses.clone_from(addresses);
                }
            }
            if customer == before {
                return Ok(customer.for_actor(actor));
            }
            customer.updated_at = now;
            tx.write(&key, &customer)?;
            tx.emit(
                &actor.store,
                EventType::CustomerUpdated,
                json!({ "customer": &customer }),
                now,
            )?;
            Ok(customer.for_actor(actor))
        })
    }

    /// Hard-deletes a customer; fires `customer.deleted` with only the id.
    pub fn delete_customer(&self, actor: &Actor, id: &CustomerId) -> Result<()> {
        actor.require(Scope::CustomersWrite)?;
        let now = self.now();
        let store = actor.store_id();
        self.db.tx(|tx| {
            let key = Customer::key(store, id);
            let customer: Customer = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("customer", id))?;
            if let Some(email) = &customer.email {
                tx.remove(&Customer::email_key(store, email))?;
            }
            tx.remove(&key)?;
            tx.emit(
                &actor.store,
                EventType::CustomerDeleted,
                json!({ "customer": { "id": id } }),
                now,
            )?;
            Ok(())
        })
    }
}

fn claim_email(
    tx: &mut crate::storage::Tx<'_>,
    store: &StoreId,
    email: &str,
    id: &CustomerId,
) -> Result<()> {
    let key = Customer::email_key(store, email);
    if let Some(owner) = tx.read::<CustomerId>(&key)?
        && &owner != id
    {
        return Err(Error::Conflict {
            code: "email_taken",
            message: format!("another customer of this store has the email `{email}`"),
            field: Some("email".into()),
        });
    }
    tx.write(&key, id)
}
