//! Older versions of the plugin contract, adapted to the latest at the boundary, the way Zed
//! keeps its extensions working: a component built against `commerce:plugin@0.1.0` is linked to
//! these shims, which convert its arguments to the 0.2.0 records, call the one implementation
//! (`plugins/host.rs`) and convert the answer back. Records that did not change between versions
//! (the whole `types` interface) are shared by the bindings and pass through untouched; the rest
//! convert field by field through serde (both bindings derive it), which fails loudly, as a
//! trap, if the two ever stop matching. What a version changed is handled by name here:
//!
//! - 0.2.0 made the feed card's `kind` an enum; 0.1.0 passes its string on to the service
//!   function, which checks it as it does over HTTP.

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasmtime::component::Linker;

use super::bindings::v0_1::commerce::plugin as old;
use super::bindings::v0_2::commerce::plugin as new;
use super::host::{LogData, StoreCallsData};
use super::state::{Invocation, LogSink, StoreCalls};
use new::types::{HostError, PageRequest};

type Call<T> = wasmtime::Result<Result<T, HostError>>;

/// The same value as the other version's type (records, variants and enums of the same shape).
fn adapt<A: Serialize, B: DeserializeOwned>(value: A) -> wasmtime::Result<B> {
    let json = serde_json::to_value(value)?;
    Ok(serde_json::from_value(json)?)
}

/// The event for a 0.1.0 component.
pub fn event_v0_1(event: &new::events::Event) -> wasmtime::Result<old::events::Event> {
    adapt(event)
}

impl old::orders::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        filter: old::orders::OrderFilter,
        p: PageRequest,
    ) -> Call<old::orders::OrderPage> {
        adapt(new::orders::Host::list(self, adapt(filter)?, p)?)
    }
    fn get(&mut self, id: String) -> Call<new::types::Order> {
        new::orders::Host::get(self, id)
    }
    fn create(&mut self, order: old::orders::NewOrder) -> Call<new::types::Order> {
        new::orders::Host::create(self, adapt(order)?)
    }
    fn update(&mut self, id: String, patch: old::orders::OrderPatch) -> Call<new::types::Order> {
        new::orders::Host::update(self, id, adapt(patch)?)
    }
    fn fulfill(&mut self, id: String, f: old::orders::NewFulfillment) -> Call<new::types::Order> {
        new::orders::Host::fulfill(self, id, adapt(f)?)
    }
    fn refund(&mut self, id: String, r: old::orders::NewRefund) -> Call<new::types::Order> {
        new::orders::Host::refund(self, id, adapt(r)?)
    }
    fn complete(&mut self, id: String) -> Call<new::types::Order> {
        new::orders::Host::complete(self, id)
    }
    fn cancel(&mut self, id: String, reason: Option<String>) -> Call<new::types::Order> {
        new::orders::Host::cancel(self, id, reason)
    }
}

impl old::products::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        status: Option<new::types::ProductStatus>,
        p: PageRequest,
    ) -> Call<old::products::ProductPage> {
        adapt(new::products::Host::list(self, status, p)?)
    }
    fn get(&mut self, id: String) -> Call<new::types::Product> {
        new::products::Host::get(self, id)
    }
    fn create(&mut self, product: old::products::NewProduct) -> Call<new::types::Product> {
        new::products::Host::create(self, adapt(product)?)
    }
    fn update(
        &mut self,
        id: String,
        patch: old::products::ProductPatch,
    ) -> Call<new::types::Product> {
        new::products::Host::update(self, id, adapt(patch)?)
    }
    fn add_variant(
        &mut self,
        id: String,
        v: old::products::NewVariant,
    ) -> Call<new::types::Product> {
        new::products::Host::add_variant(self, id, adapt(v)?)
    }
}

impl old::inventory::Host for StoreCalls<'_> {
    fn adjust(
        &mut self,
        variant_id: String,
        change: old::inventory::Change,
        reason: Option<String>,
    ) -> Call<old::inventory::Level> {
        adapt(new::inventory::Host::adjust(
            self,
            variant_id,
            adapt(change)?,
            reason,
        )?)
    }
}

impl old::customers::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        email: Option<String>,
        p: PageRequest,
    ) -> Call<old::customers::CustomerPage> {
        adapt(new::customers::Host::list(self, email, p)?)
    }
    fn get(&mut self, id: String) -> Call<new::types::Customer> {
        new::customers::Host::get(self, id)
    }
    fn create(&mut self, customer: old::customers::NewCustomer) -> Call<new::types::Customer> {
        new::customers::Host::create(self, adapt(customer)?)
    }
    fn update(
        &mut self,
        id: String,
        patch: old::customers::CustomerPatch,
    ) -> Call<new::types::Customer> {
        new::customers::Host::update(self, id, adapt(patch)?)
    }
    fn delete(&mut self, id: String) -> Call<()> {
        new::customers::Host::delete(self, id)
    }
}

impl old::notifications::Host for StoreCalls<'_> {
    fn send(&mut self, message: old::notifications::Message) -> Call<old::notifications::Receipt> {
        adapt(new::notifications::Host::send(self, adapt(message)?)?)
    }
    fn show_banner(
        &mut self,
        banner: old::notifications::Banner,
    ) -> Call<old::notifications::Receipt> {
        adapt(new::notifications::Host::show_banner(self, adapt(banner)?)?)
    }
    fn post_feed_card(
        &mut self,
        card: old::notifications::FeedCard,
    ) -> Call<old::notifications::Receipt> {
        let args = self.args(|| format!("{card:?}"));
        let primary = new::notifications::Link {
            label: card.primary.label,
            href: card.primary.href,
        };
        adapt(self.post_card(args, card.kind, card.title, card.body, primary)?)
    }
}

impl old::settings::Host for StoreCalls<'_> {
    fn get(&mut self) -> Call<String> {
        new::settings::Host::get(self)
    }
}

impl old::log::Host for LogSink<'_> {
    fn write(&mut self, level: old::log::Level, message: String) -> wasmtime::Result<()> {
        new::log::Host::write(self, adapt(level)?, message)
    }
}

/// Adds every `commerce:plugin@0.1.0` import to the linker.
pub fn add_to_linker(linker: &mut Linker<Invocation>) -> wasmtime::Result<()> {
    let calls: fn(&mut Invocation) -> StoreCalls<'_> = Invocation::store_calls;
    // `types` holds no functions; its records are the 0.2.0 ones.
    linker.instance("commerce:plugin/types@0.1.0")?;
    old::orders::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    old::products::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    old::inventory::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    old::customers::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    old::notifications::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    old::settings::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    let logs: fn(&mut Invocation) -> LogSink<'_> = Invocation::log_sink;
    old::log::add_to_linker::<_, LogData>(linker, logs)?;
    Ok(())
}
