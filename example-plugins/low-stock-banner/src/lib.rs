//! On `product.inventory.updated`, when a variant's stock falls to its low-stock threshold or to
//! zero, shows the merchant a `warn` banner with a link to the product and a dismiss button.
//! Rising stock (`direction = "up"`) shows nothing.

use commerce_guest_sdk::notify::{Banner, Tone};
use commerce_guest_sdk::{AddButton, Event, InventoryChange, Plugin, Result, commerce_plugin, log};

#[derive(Default)]
struct LowStockBanner;

impl Plugin for LowStockBanner {
    fn on_inventory_updated(&self, _event: &Event, change: &InventoryChange) -> Result<()> {
        let level = &change.inventory;
        // One event can cross both thresholds (10 → 0 past a threshold of 3): out of stock wins.
        let Some(worst) = level
            .crossed
            .iter()
            .filter(|c| c.direction == "down")
            .map(|c| c.threshold.as_str())
            .max_by_key(|t| severity(t))
        else {
            log::info("stock rose; nothing to warn about");
            return Ok(());
        };
        let product = &change.product;
        let (title, body) = if worst == "out_of_stock" {
            (
                format!("{} is out of stock", product.title),
                format!(
                    "{} has no stock left; customers cannot buy it.",
                    product.title
                ),
            )
        } else {
            (
                format!("{} is running low", product.title),
                format!(
                    "Only {} left of {}.",
                    level.inventory_quantity, product.title
                ),
            )
        };
        let receipt = Banner::new(Tone::Warn, &title, &body)
            .link("Restock", &format!("/products/{}", product.id))
            .dismiss("Dismiss")
            .show()?;
        log::info(&format!(
            "{worst} banner for {} shown as {}",
            product.id, receipt.id
        ));
        Ok(())
    }
}

fn severity(threshold: &str) -> u8 {
    match threshold {
        "out_of_stock" => 2,
        "low_stock" => 1,
        _ => 0,
    }
}

commerce_plugin!(LowStockBanner);
