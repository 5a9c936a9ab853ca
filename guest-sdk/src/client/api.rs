//! One method per `/v1` endpoint. Each notes the scope it needs; a token without it gets
//! 403 `missing_scope`.

use futures::stream::BoxStream;

use super::{
    AdjustInventory, Client, CreateCustomer, CreateFulfillment, CreateOrder, CreateProduct,
    CreateRefund, Customer, CustomerFilter, Installation, InventoryLevel, NewVariant, NewWebhook,
    Notification, NotificationAccepted, Order, OrderFilter, Page, PageQuery, Product,
    ProductFilter, Replay, ReplayResult, Result, SendNotification, UpdateCustomer, UpdateOrder,
    UpdateProduct, Webhook, WebhookPatch,
};

/// An id as one path segment: anything but unreserved characters is percent-encoded, so an id
/// can never reach another route.
fn seg(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Body of `POST /v1/orders/{id}/cancel`.
#[derive(serde::Serialize)]
struct Cancel<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

impl Client {
    /// `GET /v1/installation`: the calling installation, its store, scopes and settings.
    pub async fn installation(&self) -> Result<Installation> {
        self.get("/installation").await
    }

    // Orders.

    /// `GET /v1/orders`: one page of orders, newest first (`orders.read`).
    pub async fn list_orders(&self, filter: &OrderFilter) -> Result<Page<Order>> {
        self.page("/orders", filter).await
    }

    /// Every order matching `filter`, newest first, following the pages (`orders.read`).
    /// `filter.limit` sets the page size.
    pub fn orders(&self, filter: OrderFilter) -> BoxStream<'static, Result<Order>> {
        self.paginate("/orders", &filter)
    }

    /// `GET /v1/orders/{id}` (`orders.read`).
    pub async fn get_order(&self, id: &str) -> Result<Order> {
        self.get(&format!("/orders/{}", seg(id))).await
    }

    /// `POST /v1/orders` (`orders.write`). Use [`idempotent`](Self::idempotent) to make a retry
    /// safe.
    pub async fn create_order(&self, body: &CreateOrder) -> Result<Order> {
        self.post("/orders", body).await
    }

    /// `POST /v1/orders` with `Idempotency-Key: key`.
    pub async fn create_order_idempotent(&self, key: &str, body: &CreateOrder) -> Result<Order> {
        self.idempotent(key).create_order(body).await
    }

    /// `PATCH /v1/orders/{id}`: tags, note and custom fields (`orders.write`).
    pub async fn update_order(&self, id: &str, body: &UpdateOrder) -> Result<Order> {
        self.patch(&format!("/orders/{}", seg(id)), body).await
    }

    /// `POST /v1/orders/{id}/fulfillments`: ships items; returns the order (`orders.write`).
    pub async fn fulfill_order(&self, id: &str, body: &CreateFulfillment) -> Result<Order> {
        self.post(&format!("/orders/{}/fulfillments", seg(id)), body)
            .await
    }

    /// `POST /v1/orders/{id}/refunds`: refunds money or items; returns the order
    /// (`orders.write`).
    pub async fn refund_order(&self, id: &str, body: &CreateRefund) -> Result<Order> {
        self.post(&format!("/orders/{}/refunds", seg(id)), body)
            .await
    }

    /// `POST /v1/orders/{id}/complete`: places a draft (`orders.write`).
    pub async fn complete_order(&self, id: &str) -> Result<Order> {
        self.post(
            &format!("/orders/{}/complete", seg(id)),
            &serde_json::json!({}),
        )
        .await
    }

    /// `POST /v1/orders/{id}/cancel`, with an optional reason (`orders.write`).
    pub async fn cancel_order(&self, id: &str, reason: Option<&str>) -> Result<Order> {
        self.post(&format!("/orders/{}/cancel", seg(id)), &Cancel { reason })
            .await
    }

    // Products and inventory.

    /// `GET /v1/products`: one page of products (`products.read`).
    pub async fn list_products(&self, filter: &ProductFilter) -> Result<Page<Product>> {
        self.page("/products", filter).await
    }

    /// Every product matching `filter`, following the pages (`products.read`).
    pub fn products(&self, filter: ProductFilter) -> BoxStream<'static, Result<Product>> {
        self.paginate("/products", &filter)
    }

    /// `GET /v1/products/{id}` (`products.read`).
    pub async fn get_product(&self, id: &str) -> Result<Product> {
        self.get(&format!("/products/{}", seg(id))).await
    }

    /// `POST /v1/products` (`products.write`).
    pub async fn create_product(&self, body: &CreateProduct) -> Result<Product> {
        self.post("/products", body).await
    }

    /// `PATCH /v1/products/{id}` (`products.write`).
    pub async fn update_product(&self, id: &str, body: &UpdateProduct) -> Result<Product> {
        self.patch(&format!("/products/{}", seg(id)), body).await
    }

    /// `POST /v1/products/{id}/variants`: adds a variant; returns the product
    /// (`products.write`).
    pub async fn add_variant(&self, product_id: &str, body: &NewVariant) -> Result<Product> {
        self.post(&format!("/products/{}/variants", seg(product_id)), body)
            .await
    }

    /// `POST /v1/inventory/adjust`: changes a variant's stock by `delta` or to `set`
    /// (`products.write`).
    pub async fn adjust_inventory(&self, body: &AdjustInventory) -> Result<InventoryLevel> {
        self.post("/inventory/adjust", body).await
    }

    // Customers.

    /// `GET /v1/customers`: one page of customers (`customers.read`).
    pub async fn list_customers(&self, filter: &CustomerFilter) -> Result<Page<Customer>> {
        self.page("/customers", filter).await
    }

    /// Every customer matching `filter`, following the pages (`customers.read`).
    pub fn customers(&self, filter: CustomerFilter) -> BoxStream<'static, Result<Customer>> {
        self.paginate("/customers", &filter)
    }

    /// `GET /v1/customers/{id}` (`customers.read`).
    pub async fn get_customer(&self, id: &str) -> Result<Customer> {
        self.get(&format!("/customers/{}", seg(id))).await
    }

    /// `POST /v1/customers` (`customers.write`).
    pub async fn create_customer(&self, body: &CreateCustomer) -> Result<Customer> {
        self.post("/customers", body).await
    }

    /// `PATCH /v1/customers/{id}` (`customers.write`).
    pub async fn update_customer(&self, id: &str, body: &UpdateCustomer) -> Result<Customer> {
        self.patch(&format!("/customers/{}", seg(id)), body).await
    }

    /// `DELETE /v1/customers/{id}`: a hard delete (`customers.write`).
    pub async fn delete_customer(&self, id: &str) -> Result<()> {
        self.delete(&format!("/customers/{}", seg(id))).await
    }

    // Webhook subscriptions (the installation's own; no scope to manage them, the read scope
    // of each subscribed event's resource).

    /// `POST /v1/webhooks`: subscribes `url` to `events`, signed with `secret`.
    pub async fn create_webhook(&self, body: &NewWebhook) -> Result<Webhook> {
        self.post("/webhooks", body).await
    }

    /// `GET /v1/webhooks`: one page of the installation's subscriptions.
    pub async fn list_webhooks(&self, query: &PageQuery) -> Result<Page<Webhook>> {
        self.page("/webhooks", query).await
    }

    /// Every subscription of the installation, following the pages.
    pub fn webhooks(&self, query: PageQuery) -> BoxStream<'static, Result<Webhook>> {
        self.paginate("/webhooks", &query)
    }

    /// `GET /v1/webhooks/{id}`.
    pub async fn get_webhook(&self, id: &str) -> Result<Webhook> {
        self.get(&format!("/webhooks/{}", seg(id))).await
    }

    /// `PATCH /v1/webhooks/{id}`: a new URL, events or secret.
    pub async fn update_webhook(&self, id: &str, body: &WebhookPatch) -> Result<Webhook> {
        self.patch(&format!("/webhooks/{}", seg(id)), body).await
    }

    /// `DELETE /v1/webhooks/{id}`.
    pub async fn delete_webhook(&self, id: &str) -> Result<()> {
        self.delete(&format!("/webhooks/{}", seg(id))).await
    }

    /// `POST /v1/webhooks/{id}/resume`: makes a paused subscription active again (it re-sends
    /// nothing by itself; see [`replay_webhook`](Self::replay_webhook)).
    pub async fn resume_webhook(&self, id: &str) -> Result<Webhook> {
        self.post(
            &format!("/webhooks/{}/resume", seg(id)),
            &serde_json::json!({}),
        )
        .await
    }

    /// `POST /v1/webhooks/{id}/replay`: attempts failed deliveries again.
    pub async fn replay_webhook(&self, id: &str, replay: &Replay) -> Result<ReplayResult> {
        self.post(&format!("/webhooks/{}/replay", seg(id)), replay)
            .await
    }

    // Notifications (no scope; messages count against the store's daily quotas).

    /// `POST /v1/notifications`: a message, banner or feed card.
    pub async fn send_notification(&self, body: &SendNotification) -> Result<NotificationAccepted> {
        self.post("/notifications", body).await
    }

    /// `GET /v1/notifications/{id}`: one of the installation's notifications, with its state.
    pub async fn get_notification(&self, id: &str) -> Result<Notification> {
        self.get(&format!("/notifications/{}", seg(id))).await
    }
}

#[cfg(test)]
mod tests {
    use super::seg;

    #[test]
    fn path_segments_cannot_escape_their_route() {
        assert_eq!(seg("ord_01abc"), "ord_01abc");
        assert_eq!(seg("../admin"), "..%2Fadmin");
        assert_eq!(seg("a b?c"), "a%20b%3Fc");
    }
}
