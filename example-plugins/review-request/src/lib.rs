//! On `order.fulfilled`, posts a `suggestion` card on the merchant's feed: "Ask <customer> for a
//! review", with the order as its main action.

use commerce_guest_sdk::notify::FeedCard;
use commerce_guest_sdk::{Event, Order, Plugin, Result, commerce_plugin, customers, log};

#[derive(Default)]
struct ReviewRequest;

impl Plugin for ReviewRequest {
    fn on_order_fulfilled(&self, _event: &Event, order: &Order) -> Result<()> {
        let who = match &order.customer_id {
            Some(id) => {
                let customer = customers::get(id)?;
                customer
                    .first_name
                    .clone()
                    .or(customer.email.clone())
                    .unwrap_or_else(|| id.clone())
            }
            None => order
                .email
                .clone()
                .unwrap_or_else(|| "the customer".to_owned()),
        };
        let receipt = FeedCard::suggestion(
            &format!("Ask {who} for a review"),
            &format!(
                "Order {} has shipped. A short note asking for a review now, while the parcel is fresh, gets the most answers.",
                order.id
            ),
            "Open the order",
            &format!("/orders/{}", order.id),
        )
        .post()?;
        log::info(&format!(
            "review card for {} posted as {}",
            order.id, receipt.id
        ));
        Ok(())
    }
}

commerce_plugin!(ReviewRequest);
