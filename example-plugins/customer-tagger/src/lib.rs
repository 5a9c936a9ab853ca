//! On `order.paid`, tags the order through the inbound API: `repeat-customer` when its customer
//! has earlier orders in the store, `first-order` otherwise. Orders without a customer are left
//! alone.

use commerce_guest_sdk::orders::{self, OrderFilter};
use commerce_guest_sdk::{Event, PaidOrder, Plugin, Result, commerce_plugin, first_page, log};

/// The tag of a customer's first order.
const FIRST: &str = "first-order";
/// The tag of any later order.
const REPEAT: &str = "repeat-customer";

#[derive(Default)]
struct CustomerTagger;

impl Plugin for CustomerTagger {
    fn on_order_paid(&self, _event: &Event, paid: &PaidOrder) -> Result<()> {
        let order = orders::get(&paid.id)?;
        let Some(customer) = order.customer_id.clone() else {
            log::info(&format!("order {} has no customer: not tagged", order.id));
            return Ok(());
        };
        let filter = OrderFilter {
            customer_id: Some(customer.clone()),
            ..OrderFilter::all()
        };
        // Orders created before this one (RFC 3339 times in UTC compare as text); the filter's
        // bound is exclusive, so orders of the very same instant are compared here by id.
        let filter = OrderFilter {
            created_at_max: Some(order.created_at.clone()),
            ..filter
        };
        let before = orders::list(&filter, &first_page(1))?;
        let earlier = !before.data.is_empty() || same_instant_earlier(&order, &customer)?;
        let tag = if earlier { REPEAT } else { FIRST };
        orders::add_tags(&order.id, &[tag])?;
        log::info(&format!("order {} of {customer} tagged {tag}", order.id));
        Ok(())
    }
}

/// Whether the customer has another order created at the same instant with a smaller id: within
/// one instant ids give an arbitrary but stable order, so exactly one of them is the first.
fn same_instant_earlier(order: &commerce_guest_sdk::Order, customer: &str) -> Result<bool> {
    let filter = OrderFilter {
        customer_id: Some(customer.to_owned()),
        created_at_min: Some(order.created_at.clone()),
        ..OrderFilter::all()
    };
    let page = orders::list(&filter, &first_page(50))?;
    Ok(page
        .data
        .iter()
        .any(|o| o.created_at == order.created_at && o.id < order.id))
}

commerce_plugin!(CustomerTagger);
