//! The operator API (`/admin/v1`): stores, plugins, installations.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use serde::Deserialize;
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Json, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::error::Result;
use std::collections::BTreeMap;

use crate::model::event::Event;
use crate::model::ids::{InstallationId, OrderId, StoreId};
use crate::model::mail::MailRecord;
use crate::model::order::{ConfirmPayment, Order};
use crate::model::plugin::{Manifest, Plugin};
use crate::model::scopes::EventType;
use crate::model::store::{Installation, NewInstallation, Store, UpdateStore};
use crate::service::notifications::templates::TemplateSource;
use crate::service::pagination::{Page, PageParams, PageRequest};
use utoipa::IntoParams;

/// The operator routes (behind the admin token).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/stores", post(create_store).get(list_stores))
        .route("/stores/{store_id}", get(get_store).patch(update_store))
        .route("/plugins", post(publish_plugin).get(list_plugins))
        .route("/plugins/{name}", get(get_plugin))
        .route(
            "/stores/{store_id}/installations",
            post(install).get(list_installations),
        )
        .route(
            "/stores/{store_id}/installations/{id}",
            delete(uninstall).get(get_installation),
        )
        .route(
            "/stores/{store_id}/installations/{id}/upgrade",
            post(upgrade),
        )
        .route(
            "/stores/{store_id}/installations/{id}/settings",
            axum::routing::put(configure),
        )
        .route(
            "/stores/{store_id}/orders/{id}/payments",
            post(confirm_payment),
        )
        .route("/stores/{store_id}/events", get(list_events))
        .route("/mail", get(list_mail))
        .route("/stores/{store_id}/invitations", post(invite_owner))
        .route("/developer-invitations", post(invite_developer))
        .route(
            "/stores/{store_id}/installations/{id}/resume",
            post(resume_component),
        )
        .route(
            "/stores/{store_id}/installations/{id}/replay",
            post(replay_component),
        )
        .route(
            "/stores/{store_id}/installations/{id}/attempts",
            get(component_attempts),
        )
}

use crate::model::account::{Invitation, Inviter, Role};
use crate::service::accounts::InvitationBody;

/// Body of `POST /admin/v1/stores`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateStore {
    /// The store's domain, e.g. `acme.example`; unique on this host.
    pub domain: String,
}

/// Body of `POST /admin/v1/plugins`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishPlugin {
    /// The plugin's manifest.
    pub manifest: Manifest,
    /// The version's message templates by key (the files of the package's `templates/`).
    #[serde(default)]
    pub templates: BTreeMap<String, TemplateSource>,
    /// The plugin's WebAssembly component (a `wasm32-wasip2` build targeting the
    /// `commerce:plugin/plugin` world of a version the host runs, `0.1.0` or `0.2.0`), base64;
    /// absent for an external HTTP plugin.
    #[serde(default)]
    pub component: Option<String>,
}

impl PublishPlugin {
    /// The component's bytes, or 400 on `component` when it is not base64.
    pub fn decoded_component(&self) -> Result<Option<Vec<u8>>> {
        use base64::Engine as _;
        self.component
            .as_ref()
            .map(|b64| {
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| crate::Error::invalid("component", format!("not base64: {e}")))
            })
            .transpose()
    }
}

/// Body of `POST /admin/v1/stores/{store_id}/installations`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallPlugin {
    /// Name of a published plugin; its current version is installed.
    pub plugin: String,
}

/// Create a store.
#[utoipa::path(post, path = "/admin/v1/stores", tag = "operator", request_body = CreateStore,
    security(("admin_token" = [])),
    responses((status = 201, body = Store), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 409, description = "domain taken", body = ErrorResponse)))]
pub async fn create_store(
    State(app): State<AppState>,
    Json(body): Json<CreateStore>,
) -> Result<(StatusCode, Json<Store>)> {
    let store = app.service.create_store(&body.domain)?;
    Ok((StatusCode::CREATED, Json(store)))
}

/// List stores, oldest first.
#[utoipa::path(get, path = "/admin/v1/stores", tag = "operator", params(PageParams),
    security(("admin_token" = [])),
    responses((status = 200, body = Page<Store>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse)))]
pub async fn list_stores(
    State(app): State<AppState>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Store>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.list_stores(&page)?))
}

/// Get a store.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id")), security(("admin_token" = [])),
    responses((status = 200, body = Store), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn get_store(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
) -> Result<Json<Store>> {
    let id: StoreId = path_id("store", &store_id)?;
    Ok(Json(app.service.store(&id)?))
}

/// Change a store's settings: its inbound rate limits and its daily outbound quotas, together or
/// not at all (an invalid part is 400 on its field, and the store stays as it was).
#[utoipa::path(patch, path = "/admin/v1/stores/{store_id}", tag = "operator", request_body = UpdateStore,
    params(("store_id" = String, Path, description = "Store id")), security(("admin_token" = [])),
    responses((status = 200, body = Store), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn update_store(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    Json(body): Json<UpdateStore>,
) -> Result<Json<Store>> {
    let id: StoreId = path_id("store", &store_id)?;
    Ok(Json(app.service.update_store(&id, &body)?))
}

/// Publish a plugin (or a new version of one): its manifest, its message templates and, for a
/// plugin that runs in the host, its component, validated and compiled once. A component that is
/// not a `commerce:plugin` component is 400 on `component`; a template whose wording does not
/// compile, or uses a variable it does not declare, is 400 on `templates.<key>.<channel>.<part>`.
#[utoipa::path(post, path = "/admin/v1/plugins", tag = "operator", request_body = PublishPlugin,
    security(("admin_token" = [])),
    responses((status = 201, body = Plugin), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 409, description = "version not newer", body = ErrorResponse)))]
pub async fn publish_plugin(
    State(app): State<AppState>,
    Json(body): Json<PublishPlugin>,
) -> Result<(StatusCode, Json<Plugin>)> {
    publish_as(&app, None, body).await
}

/// Publishes `body` as the operator (`None`) or a developer, on a blocking thread (compiling a
/// component takes about a second): `POST /admin/v1/plugins` and `POST /dev/v1/plugins`.
pub async fn publish_as(
    app: &AppState,
    developer: Option<crate::model::ids::AccountId>,
    body: PublishPlugin,
) -> Result<(StatusCode, Json<Plugin>)> {
    let component = body.decoded_component()?;
    let (service, plugins) = (app.service.clone(), app.plugins.clone());
    let plugin = tokio::task::spawn_blocking(move || {
        plugins.publish_as(
            &service,
            developer.as_ref(),
            body.manifest,
            &body.templates,
            component.as_deref(),
        )
    })
    .await
    .map_err(|e| crate::Error::Internal(anyhow::anyhow!("publishing: {e}")))??;
    Ok((StatusCode::CREATED, Json(plugin)))
}

/// List published plugins, by name.
#[utoipa::path(get, path = "/admin/v1/plugins", tag = "operator", params(PageParams),
    security(("admin_token" = [])),
    responses((status = 200, body = Page<Plugin>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse)))]
pub async fn list_plugins(
    State(app): State<AppState>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Plugin>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.list_plugins(&page)?))
}

/// Get a published plugin.
#[utoipa::path(get, path = "/admin/v1/plugins/{name}", tag = "operator",
    params(("name" = String, Path, description = "Plugin name")), security(("admin_token" = [])),
    responses((status = 200, body = Plugin), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn get_plugin(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Plugin>> {
    Ok(Json(app.service.plugin(&name)?))
}

/// Install a plugin into a store. The response carries the project token, shown only this once.
/// The manifest's `webhooks` are subscribed for the new installation; a URL that resolves to a
/// non-public address the operator did not allow is 400 on `manifest.webhooks[i].url`.
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/installations", tag = "operator",
    request_body = InstallPlugin, params(("store_id" = String, Path, description = "Store id")),
    security(("admin_token" = [])),
    responses((status = 201, body = NewInstallation), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "already installed", body = ErrorResponse)))]
pub async fn install(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    Json(body): Json<InstallPlugin>,
) -> Result<(StatusCode, Json<NewInstallation>)> {
    let id: StoreId = path_id("store", &store_id)?;
    let service = app.service.clone();
    let installed = tokio::task::spawn_blocking(move || service.install(&id, &body.plugin))
        .await
        .map_err(|e| crate::Error::Internal(anyhow::anyhow!("installing: {e}")))??;
    Ok((StatusCode::CREATED, Json(installed)))
}

/// List a store's installations (active and uninstalled), oldest first.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/installations", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), PageParams), security(("admin_token" = [])),
    responses((status = 200, body = Page<Installation>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_installations(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Installation>>> {
    let id: StoreId = path_id("store", &store_id)?;
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.list_installations(&id, &page)?))
}

/// Get an installation.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/installations/{id}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Installation), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn get_installation(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
) -> Result<Json<Installation>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    Ok(Json(app.service.installation(&store, &id)?))
}

/// Uninstall: the token is revoked at once and `plugin.uninstalled` fires.
#[utoipa::path(delete, path = "/admin/v1/stores/{store_id}/installations/{id}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 204, description = "uninstalled"), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn uninstall(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    app.service.uninstall(&store, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Move an installation to its plugin's current version: its scopes and component events become
/// the new version's; its token, settings and webhook subscriptions stay. Already current: the
/// installation unchanged. A version whose manifest `webhooks` differ is 409 `webhooks_changed`
/// (uninstall and install it).
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/installations/{id}/upgrade", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Installation), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 409, description = "the new version's manifest webhooks differ", body = ErrorResponse)))]
pub async fn upgrade(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
) -> Result<Json<Installation>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    Ok(Json(app.service.upgrade(&store, &id)?))
}

/// Invite the owner of a store: the invitation mail, with a one-time link to choose a password
/// (valid 7 days), goes through the host's mail (the operator's outbox, `GET /admin/v1/mail`,
/// without an SMTP server). The link's token is only in the mail. An owner invites the store's
/// staff from its pages.
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/invitations", tag = "operator",
    params(("store_id" = String, Path, description = "Store id")),
    request_body = InvitationBody, security(("admin_token" = [])),
    responses((status = 201, body = Invitation), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, description = "no such store", body = ErrorResponse),
        (status = 409, description = "the address has an account", body = ErrorResponse)))]
pub async fn invite_owner(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    Json(body): Json<InvitationBody>,
) -> Result<(StatusCode, Json<Invitation>)> {
    let store: StoreId = path_id("store", &store_id)?;
    let invitation =
        app.service
            .invite(&Inviter::Operator, &body.email, Role::Owner, Some(&store))?;
    Ok((StatusCode::CREATED, Json(invitation)))
}

/// Invite a plugin developer, as for an owner (the link by mail, valid 7 days).
#[utoipa::path(post, path = "/admin/v1/developer-invitations", tag = "operator",
    request_body = InvitationBody, security(("admin_token" = [])),
    responses((status = 201, body = Invitation), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse),
        (status = 409, description = "the address has an account", body = ErrorResponse)))]
pub async fn invite_developer(
    State(app): State<AppState>,
    Json(body): Json<InvitationBody>,
) -> Result<(StatusCode, Json<Invitation>)> {
    let invitation = app
        .service
        .invite(&Inviter::Operator, &body.email, Role::Developer, None)?;
    Ok((StatusCode::CREATED, Json(invitation)))
}

/// Confirm a payment, as the payment gateway does: the open order becomes `paid` and `order.paid`
/// fires with `data.order {id, total, currency}`. The amount must be the order's total.
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/orders/{id}/payments", tag = "operator",
    request_body = ConfirmPayment,
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Order id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 409, description = "draft, cancelled or already paid", body = ErrorResponse)))]
pub async fn confirm_payment(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    Json(body): Json<ConfirmPayment>,
) -> Result<Json<Order>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: OrderId = path_id("order", &id)?;
    let store = app.service.store(&store)?.reference();
    Ok(Json(app.service.confirm_payment(&store, &id, &body)?))
}

/// Filters of the event log.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    /// Only events of this type.
    #[serde(rename = "type")]
    pub kind: Option<EventType>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A store's events, newest first (kept 30 days).
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/events", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), EventFilter), security(("admin_token" = [])),
    responses((status = 200, body = Page<Event>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse)))]
pub async fn list_events(
    State(app): State<AppState>,
    Path(store_id): Path<String>,
    Query(filter): Query<EventFilter>,
) -> Result<Json<Page<Event>>> {
    let store: StoreId = path_id("store", &store_id)?;
    let page = PageRequest::parse(&PageParams {
        limit: filter.limit,
        cursor: filter.cursor,
    })?;
    Ok(Json(app.service.list_events(&store, filter.kind, &page)?))
}

/// Body of `PUT /admin/v1/stores/{store_id}/installations/{id}/settings`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Configure {
    /// The plugin's settings, a JSON object (at most 64 KiB); replaces the previous ones.
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
}

/// Set the merchant's settings of an installation; `plugin.configured` fires when they change.
#[utoipa::path(put, path = "/admin/v1/stores/{store_id}/installations/{id}/settings", tag = "operator",
    request_body = Configure,
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Installation), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse)))]
pub async fn configure(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    Json(body): Json<Configure>,
) -> Result<Json<Installation>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    Ok(Json(app.service.configure(&store, &id, body.settings)?))
}

/// The host's own mail (webhook pause notices), newest first, with what became of each: `sent`
/// through SMTP, `failed` (with the error), or `outbox` when no SMTP server is configured
/// (`COMMERCE_HOST_SMTP_URL`) and the operator forwards it.
#[utoipa::path(get, path = "/admin/v1/mail", tag = "operator", params(PageParams),
    security(("admin_token" = [])),
    responses((status = 200, body = Page<MailRecord>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse)))]
pub async fn list_mail(
    State(app): State<AppState>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<MailRecord>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.mail(&page)?))
}

/// Resume deliveries to an installation's component after its retries ran out and it was
/// paused; a no-op when active. Missed events are re-sent with a replay.
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/installations/{id}/resume", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Installation), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "the plugin has no component", body = ErrorResponse)))]
pub async fn resume_component(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
) -> Result<Json<Installation>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    Ok(Json(app.service.resume_component(&store, &id)?))
}

/// Re-send failed events to an installation's component: one (`event_id`) or every failed one
/// since a time (`since`); 202 with how many were queued again.
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/installations/{id}/replay", tag = "operator",
    request_body = crate::model::webhook::ReplayRequest,
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id")),
    security(("admin_token" = [])),
    responses((status = 202, body = crate::model::webhook::ReplayResult), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "paused, no component, or the delivery has not failed", body = ErrorResponse)))]
pub async fn replay_component(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    Json(body): Json<crate::model::webhook::ReplayRequest>,
) -> Result<(StatusCode, Json<crate::model::webhook::ReplayResult>)> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(app.service.replay_component(&store, &id, &body)?),
    ))
}

/// The attempts of deliveries to an installation's component, newest first, each with the lines
/// the plugin logged and why it failed (handler error, or the limit that stopped it).
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/installations/{id}/attempts", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Installation id"), PageParams),
    security(("admin_token" = [])),
    responses((status = 200, body = Page<crate::model::delivery::Attempt>), (status = 400, body = ErrorResponse),
        (status = 409, description = "the installation's plugin has no component (`no_component`)", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn component_attempts(
    State(app): State<AppState>,
    Path((store_id, id)): Path<(String, String)>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<crate::model::delivery::Attempt>>> {
    let store: StoreId = path_id("store", &store_id)?;
    let id: InstallationId = path_id("installation", &id)?;
    let page = PageRequest::parse(&params)?;
    Ok(Json(
        app.service.list_component_attempts(&store, &id, &page)?,
    ))
}
