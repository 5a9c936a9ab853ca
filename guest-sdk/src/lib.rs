//! Build plugins for commerce-host.
//!
//! A plugin is a WebAssembly component that the host runs in a sandbox: it receives the store's
//! events and calls the store's capabilities (orders, products, inventory, customers,
//! notifications) with exactly the scopes its manifest declares. This crate wraps the WIT contract
//! (`commerce:plugin@0.2.0`, see [`WIT_VERSION`]) so that a plugin crate needs no `wit_bindgen` code of its own.
//!
//! # A complete plugin
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "order-thanks"
//! version = "0.1.0"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! commerce-guest-sdk = { path = "../../guest-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```no_run
//! use commerce_guest_sdk::{Event, PaidOrder, Plugin, Result, commerce_plugin, log, notify, orders};
//!
//! #[derive(Default)]
//! struct Thanks;
//!
//! impl Plugin for Thanks {
//!     fn on_order_paid(&self, _event: &Event, paid: &PaidOrder) -> Result<()> {
//!         let order = orders::get(&paid.id)?; // needs the `orders.read` scope
//!         let Some(customer) = order.customer_id else {
//!             log::info("the order has no customer; nothing to send");
//!             return Ok(());
//!         };
//!         let data = serde_json::json!({ "order_id": order.id, "total": paid.total });
//!         notify::email(&format!("customer:{customer}"), "order-thanks", &data)?;
//!         Ok(())
//!     }
//! }
//!
//! commerce_plugin!(Thanks);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`: the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component the host installs. Its manifest
//! (`plugin.toml`) names the events it receives and the scopes it needs.
//!
//! # How a plugin runs
//!
//! Every event goes to a fresh instance: nothing survives between events, so keep state in the
//! store (custom fields, tags) or in the plugin's settings. An instance has limits on memory, CPU,
//! time (10 s), host calls and log bytes; a plugin that breaks one is stopped and its delivery
//! attempt fails. A handler that returns an error fails the attempt too; failed attempts are
//! retried after 1 m, 5 m, 30 m, 2 h, 6 h and 24 h, with the same event id.
//!
//! # External plugins
//!
//! A plugin can also live outside the host as a plain HTTP service, in any language; in Rust,
//! this crate gives it two things (native builds):
//!
//! - [`webhook::verify`]: the check every delivery must pass before its body is trusted;
//! - `client` (feature `client`): a typed async client of the `/v1` REST API with the
//!   installation's project token: typed records and bodies, typed errors (`ApiError` with
//!   `status`, `code`, `message`, `field`, `request_id`), lists as one page or as a stream of
//!   every item, 429s retried after `Retry-After`, and `Idempotency-Key` on `POST`s.
//!
//! The operator publishes the plugin's manifest (no component, no `events`) and installs it into
//! a store, which prints the project token. The plugin then subscribes itself to the events it
//! wants with `POST /v1/webhooks`. `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! commerce-guest-sdk = { path = "../../guest-sdk", features = ["client"] }
//! axum = "0.8"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "net"] }
//! serde_json = "1"
//! ```
//!
//! A complete plugin that tags every new order (the full version, with deduplication, is
//! `example-plugins/external-tagger`):
//!
//! ```no_run
//! # #[cfg(feature = "client")]
//! # mod plugin {
//! use std::sync::Arc;
//!
//! use axum::{Router, body::Bytes, extract::State, http::{HeaderMap, StatusCode}, routing::post};
//! use commerce_guest_sdk::client::{Client, NewWebhook, UpdateOrder};
//! use commerce_guest_sdk::webhook;
//!
//! struct App { client: Client, secret: String }
//!
//! pub async fn run() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = Client::new(std::env::var("COMMERCE_HOST_URL")?, std::env::var("COMMERCE_TOKEN")?)?;
//!     let secret = std::env::var("WEBHOOK_SECRET")?; // 16 to 256 bytes, chosen by the plugin
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     client
//!         .create_webhook(&NewWebhook {
//!             url: "http://127.0.0.1:3000/webhooks".into(),
//!             events: vec!["order.created".into()],
//!             secret: secret.clone(),
//!         })
//!         .await?;
//!     let app = Arc::new(App { client, secret });
//!     let router = Router::new().route("/webhooks", post(receive)).with_state(app);
//!     axum::serve(listener, router).await?;
//!     Ok(())
//! }
//!
//! async fn receive(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> StatusCode {
//!     let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
//!     let now = std::time::SystemTime::now()
//!         .duration_since(std::time::UNIX_EPOCH)
//!         .map_or(0, |d| d.as_secs() as i64);
//!     // Verify the raw bytes before parsing them.
//!     if webhook::verify(&app.secret, header(webhook::TIMESTAMP_HEADER),
//!         header(webhook::SIGNATURE_HEADER), &body, now).is_err()
//!     {
//!         return StatusCode::UNAUTHORIZED;
//!     }
//!     let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
//!         return StatusCode::BAD_REQUEST;
//!     };
//!     let Some(id) = event["data"]["order"]["id"].as_str() else { return StatusCode::NO_CONTENT };
//!     let Ok(order) = app.client.get_order(id).await else {
//!         return StatusCode::INTERNAL_SERVER_ERROR; // the host retries
//!     };
//!     let mut tags = order.tags;
//!     tags.push("seen".into());
//!     let patch = UpdateOrder { tags: Some(tags), ..UpdateOrder::default() };
//!     match app.client.update_order(id, &patch).await {
//!         Ok(_) => StatusCode::OK,
//!         Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
//!     }
//! }
//! # }
//! ```
//!
//! Host calls return [`Result`]: a refusal is an [`Error`] carrying the host's typed
//! [`HostError`] (`Forbidden` for a scope the plugin lacks, `Invalid` with the field, `QuotaExceeded`
//! and `RateLimited` with the seconds to wait, …). A refused call has had no effect.

#![warn(missing_docs)]

mod error;
mod plugin;

#[cfg(all(feature = "client", not(target_arch = "wasm32")))]
pub mod client;
pub mod customers;
pub mod inventory;
pub mod log;
pub mod notify;
pub mod orders;
pub mod products;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
pub mod webhook;

pub use error::{Error, Result};
pub use notify::AddButton;
pub use plugin::Plugin;

// The generated bindings stay behind this hidden module: plugin authors see only the curated
// names re-exported below, so a change of wit-bindgen does not ripple into every plugin's source.
#[doc(hidden)]
#[allow(clippy::all, clippy::pedantic, missing_docs, unsafe_code)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "../wit/0.2.0",
        world: "commerce:plugin/plugin@0.2.0",
        // The export macro is called from the plugin crate and must find the generated types
        // here, not in the plugin crate.
        pub_export_macro: true,
        export_macro_name: "__export_commerce_plugin",
        default_bindings_module: "::commerce_guest_sdk::__bindings",
    });
}

pub use __bindings::commerce::plugin::events::{
    Event, EventData, Installation, InventoryChange, OrderRefund, PaidOrder, StoreRef,
};
pub use __bindings::commerce::plugin::types::{
    Address, CustomField, Customer, FieldError, FinancialStatus, Fulfillment, FulfillmentStatus,
    HostError, LineItem, LineQuantity, Media, Order, OrderStatus, PageInfo, PageRequest, Product,
    ProductStatus, Refund, RuleError, Variant,
};

/// The merchant's settings for this installation, decoded from JSON into `T`.
///
/// Settings are `{}` until the merchant configures the plugin; give `T` defaults
/// (`#[serde(default)]`) so that an unconfigured plugin still works.
pub fn settings<T: serde::de::DeserializeOwned>() -> Result<T> {
    let raw = __bindings::commerce::plugin::settings::get()?;
    serde_json::from_str(&raw).map_err(|e| {
        Error::new(format!(
            "the plugin's settings do not match their type: {e}"
        ))
    })
}

// One literal for the version, usable in `concat!`.
macro_rules! wit_version {
    () => {
        "0.2.0"
    };
}

/// The version of the WIT contract, `commerce:plugin@<version>`, that this SDK builds plugins
/// against. The host runs components of every version it supports (see the README's "Plugin
/// contract versions"); [`commerce_plugin!`] records this version and the SDK's in the component.
pub const WIT_VERSION: &str = wit_version!();

/// This SDK's version, recorded in every component built with it.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Registers a [`Plugin`] type as the component's event handler. Use it once, at the root of the
/// plugin crate.
///
/// Besides the export, it records in the component which WIT version and which SDK version it
/// was built with (a custom section named `commerce-plugin`, holding
/// `{"wit":"<version>","sdk":"<version>"}`), so that a host can refuse a component it cannot run
/// with a message that says why, and tools can show what a component was built with.
#[macro_export]
macro_rules! commerce_plugin {
    ($plugin:ty) => {
        // The generated export macro takes a path, not a generic type, hence the alias.
        #[doc(hidden)]
        type __CommercePluginExport = $crate::__private::Adapter<$plugin>;
        $crate::__bindings::__export_commerce_plugin!(__CommercePluginExport with_types_in $crate::__bindings);

        // Emitted from the plugin's own crate, whose object file is always linked, so the
        // section survives into the component.
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        #[used]
        #[unsafe(link_section = "commerce-plugin")]
        static __COMMERCE_PLUGIN_SECTION: [u8; $crate::__private::SECTION.len()] =
            $crate::__private::section();
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::plugin::Adapter;

    /// The content of the `commerce-plugin` custom section.
    pub const SECTION: &str = concat!(
        "{\"wit\":\"",
        wit_version!(),
        "\",\"sdk\":\"",
        env!("CARGO_PKG_VERSION"),
        "\"}"
    );

    /// [`SECTION`] as an array, the form a `link_section` static needs.
    pub const fn section<const N: usize>() -> [u8; N] {
        let bytes = SECTION.as_bytes();
        let mut out = [0u8; N];
        let mut i = 0;
        while i < N {
            out[i] = bytes[i];
            i += 1;
        }
        out
    }
}

/// A first page request of `limit` items (1 to 250).
pub fn first_page(limit: u32) -> PageRequest {
    PageRequest {
        cursor: None,
        limit: Some(limit),
    }
}

impl PageInfo {
    /// The request for the page after this one, or `None` on the last page.
    pub fn next(&self, limit: u32) -> Option<PageRequest> {
        self.next_cursor.as_ref().map(|c| PageRequest {
            cursor: Some(c.clone()),
            limit: Some(limit),
        })
    }
}
