//! The OpenAPI 3.1 documents, generated from the handlers and types: the plugins' API (`/v1`,
//! with the probes) served at `/v1/openapi.json`, and the operator API (`/admin/v1`) at
//! `/admin/v1/openapi.json`. Both are public, like the API's own description in the README.
//!
//! Every operation documents the error statuses it can answer ([`Errors`]): the ones every
//! authenticated call may meet (401, 429; 403 on `/v1`), the ones of a body (400, 413, 415) and
//! of parameters (400; 404 for a path naming a record), added here once rather than on each
//! handler, so that no handler can forget one.

mod refine;

use std::sync::OnceLock;

use utoipa::openapi::path::Operation;
use utoipa::openapi::{RefOr, ResponseBuilder};

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    admin, customers, developer, health, middleware, notifications, orders, products, v1, webhooks,
};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "commerce-host",
        description = "Plugin platform API: inbound commerce REST, webhooks, notifications, and the operator API.\n\n\
Every error is `{\"error\": {\"code\", \"message\", \"field\", \"request_id\"}}`. Lists are cursor-paginated \
(`limit` 1..250, default 50). `/v1` calls carry `Authorization: Bearer <project token>`; `X-Service-Store` is optional \
and, when sent, must name the token's store (400 if malformed, 403 `store_mismatch` otherwise). Every authenticated \
`/v1` response carries `X-RateLimit-Remaining` (requests the store can still make right now) and `X-RateLimit-Reset` \
(seconds until the current minute window ends); a 429 carries `Retry-After` in seconds. Requests that fail \
authentication (no token, a malformed, unknown or revoked one) are limited per client address: 20 at once, refilling \
10 per second; past that, every request of the address that needs a token is 429 `rate_limited` until it refills. \
Request headers are limited to 32 KiB in at most 100 fields (431 `headers_too_large`). Every `/v1` POST accepts \
`Idempotency-Key`; keys belong to the calling installation and are checked after authentication and scope.\n\n\
Webhooks: every delivery is a POST of the event envelope (`Event`) with `Content-Type: application/json`, \
`X-Service-Timestamp` (Unix seconds), `X-Service-Signature` (lowercase hex HMAC-SHA256 keyed with the subscription's \
secret over `<timestamp>.<raw body>`), `X-Service-Event-Id` (the same on every attempt and replay: deduplicate on it) \
and `X-Service-Event-Type`. Success is a 2xx within 10 s; redirects are not followed. Failures are retried 1 min, \
5 min, 30 min, 2 h, 6 h and 24 h after each failure; when the sixth retry fails the subscription is paused and the \
plugin's `contact_email` is mailed. Delivery is at least once and unordered. Events, deliveries and attempts are \
kept 30 days from the event, then purged."
    ),
    paths(
        health::healthz, health::readyz, super::metrics::metrics,
        v1::current_installation,
        orders::list_orders, orders::get_order, orders::create_order, orders::update_order,
        orders::fulfill, orders::refund, orders::complete, orders::cancel,
        products::list_products, products::get_product, products::create_product, products::update_product,
        products::add_variant, products::adjust_inventory,
        customers::list_customers, customers::get_customer, customers::create_customer,
        customers::update_customer, customers::delete_customer,
        admin::confirm_payment, admin::list_events, admin::configure,
        admin::resume_component, admin::replay_component, admin::component_attempts,
        webhooks::create_webhook, webhooks::list_webhooks, webhooks::get_webhook,
        webhooks::update_webhook, webhooks::delete_webhook, webhooks::resume_webhook,
        webhooks::replay_webhook, webhooks::send_test_event, webhooks::resend_delivery,
        webhooks::rotate_secret, webhooks::list_attempts, webhooks::list_deliveries,
        admin::create_store, admin::list_stores, admin::get_store, admin::update_store,
        admin::publish_plugin, admin::list_plugins, admin::get_plugin,
        admin::install, admin::list_installations, admin::get_installation, admin::uninstall, admin::upgrade,
        admin::list_mail, admin::invite_owner, admin::invite_developer,
        developer::publish, developer::list, developer::invocation,
        notifications::send_notification, notifications::get_notification,
        notifications::list_banners, notifications::dismiss_banner, notifications::list_feed,
        notifications::list_outbox, notifications::list_messages, notifications::get_message,
        notifications::list_senders, notifications::set_sender, notifications::delete_sender,
        notifications::get_template, notifications::set_template_override,
        notifications::delete_template_override,
    ),
    components(schemas(middleware::ErrorResponse, middleware::ErrorObject,
        crate::model::event::Event, crate::model::scopes::EventType, notifications::SenderChannel)),
    modifiers(&Security, &Errors),
    tags(
        (name = "health", description = "Probes: `/healthz` (process up) and `/readyz` (storage answers, delivery engine runs), and `/metrics` (Prometheus text format). No token, no rate limit."),
        (name = "installation", description = "The calling installation"),
        (name = "orders", description = "Orders: `status` draft → open → cancelled; `financial_status` pending → paid → partially_refunded → refunded; `fulfillment_status` unfulfilled → partially_fulfilled → fulfilled. Illegal transitions are 409 with a code."),
        (name = "products", description = "Products, variants and stock. Prices are positive integers in minor units with an ISO 4217 currency."),
        (name = "customers", description = "Customers and addresses. DELETE is a hard delete."),
        (name = "webhooks", description = "Webhook subscriptions, replay and delivery logs"),
        (name = "notifications", description = "Outbound messages on six channels: `email`, `sms`, `whatsapp` and `push` render one of the plugin's templates for a recipient and go out through the merchant's connected sender, counted against the store's daily quota (email 200, sms 50, whatsapp 20, push 1000 by default; the day is the UTC calendar day); `banner` shows on the merchant dashboard, `feed` posts a card (one per plugin per store per rolling 24 hours). Over quota: 429 `quota_exceeded` with `Retry-After`, and nothing is queued. Sending needs no scope; the plugin never sees a customer's address."),
        (name = "operator", description = "Operator API, behind the admin token"),
        (name = "developer", description = "Developer API (`/dev/v1`), behind a developer's API key (`chk_…`, made in the developer console at `/developer`)"),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer =
            || SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        components.add_security_scheme("project_token", bearer());
        components.add_security_scheme("admin_token", bearer());
        components.add_security_scheme("developer_key", bearer());
    }
}

/// The error statuses of an operation, each answered with the error object.
struct Errors;

impl Modify for Errors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let plugin_api = path.starts_with("/v1/");
            let authenticated =
                plugin_api || path.starts_with("/admin/v1/") || path.starts_with("/dev/v1/");
            let names_a_record = path.contains('{');
            let operations = [
                (true, &mut item.get),
                (false, &mut item.put),
                (false, &mut item.post),
                (false, &mut item.delete),
                (false, &mut item.patch),
            ];
            for (is_get, operation) in operations {
                let Some(operation) = operation else {
                    continue;
                };
                let mut statuses: Vec<(&str, &str)> = Vec::new();
                let has_query = operation.parameters.as_ref().is_some_and(|p| {
                    p.iter().any(|p| {
                        matches!(p.parameter_in, utoipa::openapi::path::ParameterIn::Query)
                    })
                });
                if operation.request_body.is_some() {
                    statuses.push((
                        "400",
                        "The body is malformed or a field is invalid (`field` names it)",
                    ));
                    statuses.push(("413", "The body is larger than 16 MiB"));
                    statuses.push(("415", "The body is not `application/json`"));
                    if authenticated {
                        statuses.push((
                            "404",
                            "A record the path or the body names does not exist in this store",
                        ));
                    }
                } else if has_query || names_a_record {
                    statuses.push(("400", "A parameter is invalid (`field` names it)"));
                }
                if authenticated {
                    statuses.push(("401", "No token, or a malformed, unknown or revoked one"));
                    statuses.push((
                        "429",
                        "Too many requests (the store's rate limit, or failed authentications from this address); `Retry-After` says when to retry",
                    ));
                }
                if plugin_api {
                    statuses.push((
                        "403",
                        "The token's scopes do not allow it, or `X-Service-Store` names another store",
                    ));
                }
                if names_a_record {
                    statuses.push(("404", "No such record in this store"));
                }
                if authenticated && (operation.request_body.is_some() || !is_get) {
                    statuses.push((
                        "409",
                        "The record's state does not allow it (the `code` says why), or an `Idempotency-Key` was used for a different request",
                    ));
                }
                document(operation, &statuses);
            }
        }
    }
}

/// Adds each `(status, description)` not documented yet, answered with the error object.
fn document(operation: &mut Operation, statuses: &[(&str, &str)]) {
    for (status, description) in statuses {
        if operation.responses.responses.contains_key(*status) {
            continue;
        }
        let response = ResponseBuilder::new()
            .description(*description)
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                        "ErrorResponse",
                    ))))
                    .build(),
            )
            .build();
        operation
            .responses
            .responses
            .insert((*status).to_owned(), RefOr::T(response));
    }
}

/// The API a path belongs to, each with a document of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    /// `/v1`, the probes and `/metrics`.
    Plugins,
    /// `/admin/v1`.
    Operator,
    /// `/dev/v1`.
    Developer,
}

impl Api {
    fn of(path: &str) -> Self {
        if path.starts_with("/admin/v1/") {
            Self::Operator
        } else if path.starts_with("/dev/v1/") {
            Self::Developer
        } else {
            Self::Plugins
        }
    }
}

/// The three documents, built once: the plugins' API, the operator API, the developer API.
fn documents() -> &'static [serde_json::Value; 3] {
    static DOCUMENTS: OnceLock<[serde_json::Value; 3]> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let whole = ApiDoc::openapi();
        let part = |api: Api| {
            let mut doc = whole.clone();
            doc.paths.paths.retain(|path, _| Api::of(path) == api);
            let used: std::collections::BTreeSet<String> = doc
                .paths
                .paths
                .values()
                .flat_map(|item| {
                    [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                        .into_iter()
                        .flatten()
                        .flat_map(|op| op.tags.clone().unwrap_or_default())
                })
                .collect();
            if let Some(tags) = &mut doc.tags {
                tags.retain(|t| used.contains(&t.name));
            }
            match api {
                Api::Plugins => {}
                Api::Operator => {
                    doc.info.title = "commerce-host operator API".to_owned();
                    doc.info.description = Some(
                        "The operator's API, behind the admin token (`Authorization: Bearer <admin token>`): stores, plugins, installations, the store's events, payments, senders and templates, the host's mail, invitations. Errors, pagination and limits follow the conventions of the plugins' API (`/v1/openapi.json`).".to_owned(),
                    );
                }
                Api::Developer => {
                    doc.info.title = "commerce-host developer API".to_owned();
                    doc.info.description = Some(
                        "A plugin developer's API, behind their API key (`Authorization: Bearer chk_…`, made in the developer console at `/developer`): publishing their plugins, and the inputs of their components' invocations for `plugin run --replay`. Errors follow the conventions of the plugins' API (`/v1/openapi.json`).".to_owned(),
                    );
                }
            }
            let mut doc = serde_json::to_value(&doc).unwrap_or(serde_json::Value::Null);
            refine::refine(&mut doc);
            doc
        };
        [part(Api::Plugins), part(Api::Operator), part(Api::Developer)]
    })
}

/// The plugins' API document (`/v1`, the probes and `/metrics`).
pub fn plugin_api() -> &'static serde_json::Value {
    &documents()[0]
}

/// The operator API document (`/admin/v1`).
pub fn operator_api() -> &'static serde_json::Value {
    &documents()[1]
}

/// The developer API document (`/dev/v1`).
pub fn developer_api() -> &'static serde_json::Value {
    &documents()[2]
}

/// `GET /dev/v1/openapi.json` (no key needed).
pub async fn serve_developer() -> axum::Json<&'static serde_json::Value> {
    axum::Json(developer_api())
}

/// `GET /v1/openapi.json` (no token needed).
pub async fn serve() -> axum::Json<&'static serde_json::Value> {
    axum::Json(plugin_api())
}

/// `GET /admin/v1/openapi.json` (no token needed).
pub async fn serve_operator() -> axum::Json<&'static serde_json::Value> {
    axum::Json(operator_api())
}
