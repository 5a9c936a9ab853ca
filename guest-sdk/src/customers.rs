//! Customers of the store (scopes `customers.read` and `customers.write`), with the same rules as
//! `/v1/customers`.

use crate::__bindings::commerce::plugin::customers as wit;
use crate::{Customer, PageRequest, Result};

pub use wit::{AddressInput, CustomerPage, CustomerPatch, NewCustomer};

/// Lists customers, newest first; with `email`, only the one with that email (`customers.read`).
pub fn list(email: Option<&str>, page: &PageRequest) -> Result<CustomerPage> {
    Ok(wit::list(email, page)?)
}

/// Fetches one customer with addresses (`customers.read`).
pub fn get(id: &str) -> Result<Customer> {
    Ok(wit::get(id)?)
}

/// Creates a customer (`customers.write`).
pub fn create(customer: &NewCustomer) -> Result<Customer> {
    Ok(wit::create(customer)?)
}

/// Changes a customer's profile (`customers.write`).
pub fn update(id: &str, patch: &CustomerPatch) -> Result<Customer> {
    Ok(wit::update(id, patch)?)
}

/// Hard-deletes a customer (`customers.write`).
pub fn delete(id: &str) -> Result<()> {
    Ok(wit::delete(id)?)
}
