//! On `order.paid`, emails the customer a thank-you through the `order-thanks` template this
//! plugin ships in `templates/`.

use commerce_guest_sdk::{Event, PaidOrder, Plugin, Result, commerce_plugin, log, notify, orders};

#[derive(Default)]
struct OrderThanks;

impl Plugin for OrderThanks {
    fn on_order_paid(&self, event: &Event, paid: &PaidOrder) -> Result<()> {
        // `order.paid` carries the id, total and currency; the customer is on the order.
        let order = orders::get(&paid.id)?;
        let Some(customer) = order.customer_id else {
            log::info(&format!(
                "order {} has no customer: no thank-you to send",
                order.id
            ));
            return Ok(());
        };
        let data = serde_json::json!({
            "order_id": order.id,
            "total": format_money(paid.total, &paid.currency),
            "store": event.store.domain,
        });
        let receipt = notify::email(&format!("customer:{customer}"), "order-thanks", &data)?;
        log::info(&format!(
            "thank-you for {} queued as {}",
            order.id, receipt.id
        ));
        Ok(())
    }
}

/// `1250, "EUR"` → `12.50 EUR` (two decimals; enough for a thank-you note).
fn format_money(minor: i64, currency: &str) -> String {
    format!("{}.{:02} {currency}", minor / 100, (minor % 100).abs())
}

commerce_plugin!(OrderThanks);
