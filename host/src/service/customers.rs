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

use crate::model::customer::Address;
use crate::model::customer::AddressInput;
use crate::model::customer::CreateCustomer;
use crate::model::customer::Customer;
use crate::model::customer::CustomerFilter;
use crate::model::customer::UpdateCustomer;
use crate::model::event::data::{
    CustomerCreated, CustomerDeleted, CustomerUpdated, DeletedCustomer,
};
use jiff::Timestamp;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::ids::{AddressId, CustomerId, StoreId};
use crate::model::scopes::Scope;
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::service::validate;

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
                    CustomerCreated {
                        customer: customer.clone(),
                    },
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

    /// [`Service::customer`] as the JSON `GET /v1/customers/{id}` answers, kept for the next
    /// request while no customer changes (see [`answers`](super::answers)).
    pub fn customer_answer(
        &self,
        actor: &Actor,
        id: &CustomerId,
    ) -> Result<super::answers::Answer> {
        actor.require(Scope::CustomersRead)?;
        let key = Customer::key(actor.store_id(), id);
        self.record_answer(&self.answers.customers, key, "", |c: Customer| c)?
            .ok_or_else(|| Error::not_found("customer", id))
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
                CustomerUpdated {
                    customer: customer.clone(),
                },
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
                CustomerDeleted {
                    customer: DeletedCustomer { id: id.clone() },
                },
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

/// What a caller may see of a customer: a rule of the service layer, next to the scopes it reads.
impl Customer {
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

    /// The customer as a replay of `actor`'s invocation keeps it when the invocation addressed a
    /// message to them (`customer:{id}`): as `actor` may see it, and, where that hides the
    /// contact, placeholders (`{id}@replay.invalid`, `+15555550100`) so that the replayed message
    /// still reaches a customer. A developer never sees personal data their plugin could not read.
    pub fn replay_stand_in(self, actor: &Actor) -> Customer {
        if actor.scopes.contains(&Scope::CustomersRead) {
            return self;
        }
        let email = format!("{}@replay.invalid", self.id);
        Customer {
            email: Some(email),
            phone: Some("+15555550100".to_owned()),
            ..self.for_actor(actor)
        }
    }
}
