//! The WIT host functions: thin adapters that charge the invocation's meter, count the call
//! against the store's rate limit, then call the same service functions as the REST API with the
//! installation as actor. Outer `wasmtime::Result` = trap (a broken limit); inner `Result` = typed
//! error for the plugin.

use wasmtime::component::{HasData, Linker};

use super::bindings::commerce::plugin::{
    customers, inventory, log, notifications, orders, products, settings, types,
};
use super::convert as c;
use super::state::{HostCall, Invocation, LogSink, MAX_ARGS_SUMMARY, StoreCalls};
use crate::model::customer::CustomerFilter;
use crate::model::error::Error;
use crate::model::ids::path_id;
use crate::model::log::LogLine;
use crate::model::message::{Channel, Cta, Link, Tone};
use crate::model::order::{CancelOrder, OrderFilter};
use crate::model::product::{AdjustInventory, ProductFilter};
use crate::service::notifications::request::{BannerInput, FeedCardInput, NotificationRequest};
use crate::service::pagination::PageRequest;

use crate::model::log::RecordKind;

type HostError = types::HostError;
type Call<T> = wasmtime::Result<Result<T, HostError>>;

impl StoreCalls<'_> {
    /// Every store capability goes through here: the host-call budget (a trap when spent), the
    /// installation still installed and the store's rate limit (shared with its HTTP calls), then
    /// the service call.
    ///
    /// Each call is recorded (`function`, its error if any, and `args` when the invocation is
    /// traced) for the invocation's outcome.
    fn call<T>(
        &mut self,
        function: &'static str,
        args: Option<String>,
        f: impl FnOnce(&mut StoreCalls<'_>) -> Result<T, Error>,
    ) -> Call<T> {
        self.meter.charge_call()?;
        let result = match self.service.admit(self.actor) {
            Err((e, _)) => Err(c::host_error(e)),
            Ok(_) => f(self).map_err(c::host_error),
        };
        self.calls.push(HostCall {
            function,
            args,
            error: result.as_ref().err().cloned(),
        });
        Ok(result)
    }

    /// A summary of a call's arguments, only when the invocation is traced (`plugin run`), cut to
    /// [`MAX_ARGS_SUMMARY`] bytes.
    pub(super) fn args(&self, summary: impl FnOnce() -> String) -> Option<String> {
        if !self.trace {
            return None;
        }
        let mut text = summary();
        if text.len() > MAX_ARGS_SUMMARY {
            let mut end = MAX_ARGS_SUMMARY;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        Some(text)
    }
}

fn page(p: &types::PageRequest) -> Result<PageRequest, Error> {
    PageRequest::parse(&c::page_params(p))
}

impl types::Host for StoreCalls<'_> {}

impl orders::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        filter: orders::OrderFilter,
        p: types::PageRequest,
    ) -> Call<orders::OrderPage> {
        let args = self.args(|| format!("{filter:?}, {p:?}"));
        self.call("orders.list", args, |s| {
            let filter = OrderFilter {
                status: filter.status.map(c::order_status_in),
                financial_status: filter.financial_status.map(c::financial_status_in),
                fulfillment_status: filter.fulfillment_status.map(c::fulfillment_status_in),
                customer_id: filter
                    .customer_id
                    .map(|id| path_id("customer", &id))
                    .transpose()?,
                created_at_min: filter.created_at_min,
                created_at_max: filter.created_at_max,
                limit: None,
                cursor: None,
            };
            let got = s.service.list_orders(s.actor, &filter, &page(&p)?)?;
            for o in &got.data {
                s.recording.saw(RecordKind::Order, &o.id.to_string(), o);
            }
            Ok(orders::OrderPage {
                data: got.data.into_iter().map(c::order).collect(),
                page: c::page_info(got.page),
            })
        })
    }

    fn get(&mut self, id: String) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}"));
        self.call("orders.get", args, |s| {
            let order = s.service.order(s.actor, &path_id("order", &id)?)?;
            s.recording.saw(RecordKind::Order, &id, &order);
            Ok(c::order(order))
        })
    }

    fn create(&mut self, order: orders::NewOrder) -> Call<types::Order> {
        let args = self.args(|| format!("{order:?}"));
        self.call("orders.create", args, |s| {
            Ok(c::order(
                s.service.create_order(s.actor, c::new_order(order)?)?,
            ))
        })
    }

    fn update(&mut self, id: String, patch: orders::OrderPatch) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}, {patch:?}"));
        self.call("orders.update", args, |s| {
            Ok(c::order(s.service.update_order(
                s.actor,
                &path_id("order", &id)?,
                c::order_patch(patch),
            )?))
        })
    }

    fn fulfill(&mut self, id: String, f: orders::NewFulfillment) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}, {f:?}"));
        self.call("orders.fulfill", args, |s| {
            let (order, _) = s.service.fulfill_order(
                s.actor,
                &path_id("order", &id)?,
                c::new_fulfillment(f)?,
            )?;
            Ok(c::order(order))
        })
    }

    fn refund(&mut self, id: String, r: orders::NewRefund) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}, {r:?}"));
        self.call("orders.refund", args, |s| {
            let (order, _) =
                s.service
                    .refund_order(s.actor, &path_id("order", &id)?, c::new_refund(r)?)?;
            Ok(c::order(order))
        })
    }

    fn complete(&mut self, id: String) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}"));
        self.call("orders.complete", args, |s| {
            Ok(c::order(
                s.service.complete_order(s.actor, &path_id("order", &id)?)?,
            ))
        })
    }

    fn cancel(&mut self, id: String, reason: Option<String>) -> Call<types::Order> {
        let args = self.args(|| format!("{id:?}, {reason:?}"));
        self.call("orders.cancel", args, |s| {
            Ok(c::order(s.service.cancel_order(
                s.actor,
                &path_id("order", &id)?,
                CancelOrder { reason },
            )?))
        })
    }
}

impl products::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        status: Option<types::ProductStatus>,
        p: types::PageRequest,
    ) -> Call<products::ProductPage> {
        let args = self.args(|| format!("{status:?}, {p:?}"));
        self.call("products.list", args, |s| {
            let filter = ProductFilter {
                status: status.map(c::product_status_in),
                limit: None,
                cursor: None,
            };
            let got = s.service.list_products(s.actor, &filter, &page(&p)?)?;
            for product in &got.data {
                s.recording
                    .saw(RecordKind::Product, &product.id.to_string(), product);
            }
            Ok(products::ProductPage {
                data: got.data.into_iter().map(c::product).collect(),
                page: c::page_info(got.page),
            })
        })
    }

    fn get(&mut self, id: String) -> Call<types::Product> {
        let args = self.args(|| format!("{id:?}"));
        self.call("products.get", args, |s| {
            let product = s.service.product(s.actor, &path_id("product", &id)?)?;
            s.recording.saw(RecordKind::Product, &id, &product);
            Ok(c::product(product))
        })
    }

    fn create(&mut self, product: products::NewProduct) -> Call<types::Product> {
        let args = self.args(|| format!("{product:?}"));
        self.call("products.create", args, |s| {
            Ok(c::product(
                s.service.create_product(s.actor, c::new_product(product))?,
            ))
        })
    }

    fn update(&mut self, id: String, patch: products::ProductPatch) -> Call<types::Product> {
        let args = self.args(|| format!("{id:?}, {patch:?}"));
        self.call("products.update", args, |s| {
            Ok(c::product(s.service.update_product(
                s.actor,
                &path_id("product", &id)?,
                c::product_patch(patch)?,
            )?))
        })
    }

    fn add_variant(&mut self, id: String, v: products::NewVariant) -> Call<types::Product> {
        let args = self.args(|| format!("{id:?}, {v:?}"));
        self.call("products.add-variant", args, |s| {
            Ok(c::product(s.service.add_variant(
                s.actor,
                &path_id("product", &id)?,
                c::new_variant(v),
            )?))
        })
    }
}

impl inventory::Host for StoreCalls<'_> {
    fn adjust(
        &mut self,
        variant_id: String,
        change: inventory::Change,
        reason: Option<String>,
    ) -> Call<inventory::Level> {
        let args = self.args(|| format!("{variant_id:?}, {change:?}, {reason:?}"));
        self.call("inventory.adjust", args, |s| {
            let (delta, set) = match change {
                inventory::Change::Delta(d) => (Some(d), None),
                inventory::Change::Set(v) => (None, Some(v)),
            };
            let input = AdjustInventory {
                variant_id: path_id("variant", &variant_id)?,
                delta,
                set,
                reason,
            };
            Ok(c::level(s.service.adjust_inventory(s.actor, input)?))
        })
    }
}

impl customers::Host for StoreCalls<'_> {
    fn list(
        &mut self,
        email: Option<String>,
        p: types::PageRequest,
    ) -> Call<customers::CustomerPage> {
        let args = self.args(|| format!("{email:?}, {p:?}"));
        self.call("customers.list", args, |s| {
            let filter = CustomerFilter {
                email,
                limit: None,
                cursor: None,
            };
            let got = s.service.list_customers(s.actor, &filter, &page(&p)?)?;
            for customer in &got.data {
                s.recording
                    .saw(RecordKind::Customer, &customer.id.to_string(), customer);
            }
            Ok(customers::CustomerPage {
                data: got.data.into_iter().map(c::customer).collect(),
                page: c::page_info(got.page),
            })
        })
    }

    fn get(&mut self, id: String) -> Call<types::Customer> {
        let args = self.args(|| format!("{id:?}"));
        self.call("customers.get", args, |s| {
            let customer = s.service.customer(s.actor, &path_id("customer", &id)?)?;
            s.recording.saw(RecordKind::Customer, &id, &customer);
            Ok(c::customer(customer))
        })
    }

    fn create(&mut self, customer: customers::NewCustomer) -> Call<types::Customer> {
        let args = self.args(|| format!("{customer:?}"));
        self.call("customers.create", args, |s| {
            Ok(c::customer(
                s.service
                    .create_customer(s.actor, c::new_customer(customer))?,
            ))
        })
    }

    fn update(&mut self, id: String, patch: customers::CustomerPatch) -> Call<types::Customer> {
        let args = self.args(|| format!("{id:?}, {patch:?}"));
        self.call("customers.update", args, |s| {
            Ok(c::customer(s.service.update_customer(
                s.actor,
                &path_id("customer", &id)?,
                c::customer_patch(patch),
            )?))
        })
    }

    fn delete(&mut self, id: String) -> Call<()> {
        let args = self.args(|| format!("{id:?}"));
        self.call("customers.delete", args, |s| {
            s.service
                .delete_customer(s.actor, &path_id("customer", &id)?)
        })
    }
}

/// A message, banner or card for the same service function as `POST /v1/notifications`, so every
/// rule (templates, quotas, the feed's one card a day) is the one HTTP plugins meet.
fn send(s: &StoreCalls<'_>, request: NotificationRequest) -> Result<notifications::Receipt, Error> {
    let accepted = s.service.send_notification(s.actor, request)?;
    let status = serde_json::to_value(accepted.notification.status)?;
    Ok(notifications::Receipt {
        id: accepted.notification.id.to_string(),
        status: status.as_str().unwrap_or_default().to_owned(),
    })
}

/// A message to `customer:{id}` makes the host read the customer for the plugin: the recording
/// keeps them (as [`crate::model::customer::Customer::replay_stand_in`] says) so that a replay
/// resolves the same recipient.
fn saw_recipient(s: &mut StoreCalls<'_>, to: &str) {
    let Some(id) = to.strip_prefix("customer:") else {
        return;
    };
    let Ok(id) = id.parse::<crate::model::ids::CustomerId>() else {
        return;
    };
    let key = crate::model::customer::Customer::key(s.actor.store_id(), &id);
    if let Ok(Some(customer)) = s.service.db.read::<crate::model::customer::Customer>(&key) {
        let kept = customer.replay_stand_in(s.actor);
        s.recording
            .saw(RecordKind::Customer, &kept.id.to_string(), &kept);
    }
}

fn empty_request(channel: Channel) -> NotificationRequest {
    NotificationRequest {
        channel: Some(channel),
        to: None,
        template: None,
        data: None,
        banner: None,
        card: None,
    }
}

impl notifications::Host for StoreCalls<'_> {
    fn send(&mut self, message: notifications::Message) -> Call<notifications::Receipt> {
        let args = self.args(|| format!("{message:?}"));
        self.call("notifications.send", args, |s| {
            let data =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&message.data)
                    .map_err(|e| Error::invalid("data", format!("must be a JSON object: {e}")))?;
            let channel = match message.channel {
                notifications::Channel::Email => Channel::Email,
                notifications::Channel::Sms => Channel::Sms,
                notifications::Channel::Whatsapp => Channel::Whatsapp,
                notifications::Channel::Push => Channel::Push,
            };
            saw_recipient(s, &message.to);
            send(
                s,
                NotificationRequest {
                    to: Some(message.to),
                    template: Some(message.template),
                    data: Some(data),
                    ..empty_request(channel)
                },
            )
        })
    }

    fn show_banner(&mut self, banner: notifications::Banner) -> Call<notifications::Receipt> {
        let args = self.args(|| format!("{banner:?}"));
        self.call("notifications.show-banner", args, |s| {
            let tone = match banner.tone {
                notifications::Tone::Info => Tone::Info,
                notifications::Tone::Warn => Tone::Warn,
                notifications::Tone::Success => Tone::Success,
            };
            let ctas = banner
                .ctas
                .into_iter()
                .map(|cta| match cta.action {
                    notifications::CtaAction::Href(href) => Cta {
                        label: cta.label,
                        href: Some(href),
                        dismiss: None,
                    },
                    notifications::CtaAction::Dismiss => Cta {
                        label: cta.label,
                        href: None,
                        dismiss: Some(true),
                    },
                })
                .collect();
            let banner = BannerInput {
                tone,
                title: banner.title,
                body: banner.body,
                ctas,
                ttl_hours: Some(banner.ttl_hours),
            };
            send(
                s,
                NotificationRequest {
                    banner: Some(banner),
                    ..empty_request(Channel::Banner)
                },
            )
        })
    }

    fn post_feed_card(&mut self, card: notifications::FeedCard) -> Call<notifications::Receipt> {
        let args = self.args(|| format!("{card:?}"));
        let kind = match card.kind {
            notifications::CardKind::Suggestion => "suggestion",
        };
        self.post_card(args, kind.to_owned(), card.title, card.body, card.primary)
    }
}

impl StoreCalls<'_> {
    /// `notifications.post-feed-card` of every version: the kind as text (a `card-kind` since
    /// 0.2.0; any string in 0.1.0, checked by the service function, as over HTTP).
    pub(super) fn post_card(
        &mut self,
        args: Option<String>,
        kind: String,
        title: String,
        body: String,
        primary: notifications::Link,
    ) -> Call<notifications::Receipt> {
        self.call("notifications.post-feed-card", args, |s| {
            let card = FeedCardInput {
                kind,
                title,
                body,
                primary: Link {
                    label: primary.label,
                    href: primary.href,
                },
            };
            send(
                s,
                NotificationRequest {
                    card: Some(card),
                    ..empty_request(Channel::Feed)
                },
            )
        })
    }
}

impl settings::Host for StoreCalls<'_> {
    fn get(&mut self) -> Call<String> {
        self.call("settings.get", None, |s| {
            let settings = s.service.own_settings(s.actor)?;
            s.recording.saw_settings(&settings);
            Ok(settings.to_string())
        })
    }
}

impl log::Host for LogSink<'_> {
    fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        self.meter.charge_call()?;
        self.meter.charge_log(message.len())?;
        let level = match level {
            log::Level::Trace => "trace",
            log::Level::Debug => "debug",
            log::Level::Info => "info",
            log::Level::Warn => "warn",
            log::Level::Error => "error",
        };
        self.lines.push(LogLine {
            level: level.to_owned(),
            message,
        });
        Ok(())
    }
}

/// Which view of [`Invocation`] the store capabilities get.
pub(super) struct StoreCallsData;
impl HasData for StoreCallsData {
    type Data<'a> = StoreCalls<'a>;
}

/// Which view the `log` interface gets.
pub(super) struct LogData;
impl HasData for LogData {
    type Data<'a> = LogSink<'a>;
}

/// Adds every `commerce:plugin@0.2.0` import to the linker, each with its narrow view.
pub fn add_to_linker(linker: &mut Linker<Invocation>) -> wasmtime::Result<()> {
    let calls: fn(&mut Invocation) -> StoreCalls<'_> = Invocation::store_calls;
    types::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    orders::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    products::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    inventory::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    customers::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    notifications::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    settings::add_to_linker::<_, StoreCallsData>(linker, calls)?;
    let logs: fn(&mut Invocation) -> LogSink<'_> = Invocation::log_sink;
    log::add_to_linker::<_, LogData>(linker, logs)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::model::plugin::Manifest;
    use crate::plugins::Limits;
    use crate::plugins::bindings::v0_1::commerce::plugin::notifications as old;
    use crate::plugins::state::Invocation;
    use crate::service::{Actor, Service};
    use crate::storage::Db;

    /// A service with one store and one installed external plugin, and the plugin's actor as
    /// its token authenticates it.
    fn installed(dir: &std::path::Path) -> (Service, Actor) {
        let db = Db::open_sled(dir, false).expect("db");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("time"));
        let service =
            Service::new(db, Arc::new(clock), "admin-token-for-host-tests").expect("service");
        let store = service.create_store("cards.example").expect("store");
        let manifest = Manifest {
            name: "carder".into(),
            version: "1.0.0".into(),
            description: None,
            scopes: Vec::new(),
            contact_email: "dev@carder.example".into(),
            webhooks: Vec::new(),
            events: Vec::new(),
            limits: None,
        };
        service
            .publish_plugin(manifest, &BTreeMap::new(), None)
            .expect("published");
        let installed = service.install(&store.id, "carder").expect("installed");
        let actor = service.authenticate(&installed.token).expect("actor");
        (service, actor)
    }

    #[test]
    fn a_feed_card_of_an_unknown_kind_from_a_0_1_component_meets_the_same_refusal_as_over_http() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (service, actor) = installed(dir.path());

        let over_http: NotificationRequest = serde_json::from_value(serde_json::json!({
            "channel": "feed",
            "card": {"kind": "ad", "title": "t", "body": "b", "primary": {"label": "l", "href": "/x"}},
        }))
        .expect("the body parses: the kind is the service's to check");
        let Err(Error::Validation { field, message }) =
            service.send_notification(&actor, over_http)
        else {
            panic!("an unknown kind is a validation error");
        };
        assert_eq!(field, "card.kind");

        // `commerce:plugin@0.1.0` takes the kind as a string (0.2.0 makes it an enum).
        let mut invocation = Invocation::new(actor, service.clone(), &Limits::default());
        let from_component = old::Host::post_feed_card(
            &mut invocation.store_calls(),
            old::FeedCard {
                kind: "ad".into(),
                title: "t".into(),
                body: "b".into(),
                primary: old::Link {
                    label: "l".into(),
                    href: "/x".into(),
                },
            },
        )
        .expect("a refusal, not a trap");
        match from_component {
            Err(HostError::Invalid(e)) => {
                assert_eq!((e.field, e.message), (field, message), "the same error");
            }
            other => panic!("expected the validation error, got {other:?}"),
        }
    }
}
