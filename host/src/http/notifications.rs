//! `/v1/notifications`, and the operator's routes for what the outbound API produces: banners,
//! feed cards, messages and the outbox, senders, template overrides. Every rule is in
//! [`crate::service::notifications`].

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};

use super::AppState;
use super::extract::{Caller, Json, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::error::Result;
use crate::model::ids::{MessageId, StoreId};
use crate::model::message::{Banner, FeedCard};
use crate::model::message::{Message, MessageStatus, Notification, NotificationAccepted};
use crate::service::notifications::NotificationRequest;
use crate::service::notifications::dashboard::MessageFilter;
use crate::service::notifications::senders::{SenderSettings, SenderView, sender_channel};
use crate::service::notifications::templates::{TemplateView, Wording};
use crate::service::pagination::{Page, PageParams, PageRequest};

/// `/v1` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notifications", post(send_notification))
        .route("/notifications/{id}", get(get_notification))
}

/// Operator routes (merged under `/admin/v1`).
pub fn admin_router() -> Router<AppState> {
    Router::new()
        .route("/stores/{store_id}/banners", get(list_banners))
        .route(
            "/stores/{store_id}/banners/{id}/dismiss",
            post(dismiss_banner),
        )
        .route("/stores/{store_id}/feed", get(list_feed))
        .route("/stores/{store_id}/outbox", get(list_outbox))
        .route("/stores/{store_id}/notifications", get(list_messages))
        .route("/stores/{store_id}/notifications/{id}", get(get_message))
        .route("/stores/{store_id}/senders", get(list_senders))
        .route(
            "/stores/{store_id}/senders/{channel}",
            put(set_sender).delete(delete_sender),
        )
        .route(
            "/stores/{store_id}/templates/{plugin}/{key}",
            get(get_template)
                .put(set_template_override)
                .delete(delete_template_override),
        )
}

fn store_id(raw: &str) -> Result<StoreId> {
    path_id("store", raw)
}

/// Send a notification on one of six channels.
///
/// - `email`, `sms`, `whatsapp`, `push`: `{"channel", "to", "template", "data"}`. `to` is
///   `customer:<customer_id>` (the customer's email, phone, or id for push); `email` also takes an
///   email address, `sms` and `whatsapp` an E.164 phone. `template` is a key of the plugin's own
///   templates; `data` gives exactly its variables. The message is rendered now, counted against
///   the store's daily quota for the channel and queued for the merchant's sender (status
///   `queued`), or kept in the store's outbox when no sender is connected (status `outbox`).
///   Over quota: 429 `quota_exceeded` with `Retry-After` (seconds until midnight UTC); nothing is
///   queued.
/// - `banner`: `{"channel": "banner", "banner": {tone, title, body, ctas, ttl_hours}}`; at most
///   `banner_active` (20) showing per installation and `banner` (50) per store per UTC day
///   (429 `quota_exceeded` otherwise).
/// - `feed`: `{"channel": "feed", "card": {kind, title, body, primary: {label, href}}}`; one card
///   per plugin per store per 24 hours (429 `quota_exceeded` otherwise).
///
/// Needs no scope. Accepts `Idempotency-Key`: a retry returns the first answer and is not counted
/// twice.
#[utoipa::path(post, path = "/v1/notifications", tag = "notifications", request_body = NotificationRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    security(("project_token" = [])),
    responses((status = 202, description = "accepted", body = NotificationAccepted),
        (status = 400, description = "invalid; `field` names the input", body = ErrorResponse),
        (status = 401, body = ErrorResponse),
        (status = 429, description = "`quota_exceeded` (the message was not queued) or `rate_limited`; see `Retry-After`",
            body = ErrorResponse)))]
pub async fn send_notification(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<NotificationRequest>,
) -> Result<(StatusCode, Json<NotificationAccepted>)> {
    let accepted = blocking(move || app.service.send_notification(&actor, body)).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

/// Runs a call that renders templates on the blocking pool: a render may take milliseconds and
/// waits for a place in the render gate, which must not hold up an async worker.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| crate::Error::Internal(anyhow::anyhow!("rendering: {e}")))?
}

/// Read back one of the calling installation's notifications: its status (`queued` → `sent` or
/// `failed`; `outbox`; `shown`), attempts and last error.
#[utoipa::path(get, path = "/v1/notifications/{id}", tag = "notifications",
    params(("id" = String, Path, description = "Notification id (`msg_…`)")), security(("project_token" = [])),
    responses((status = 200, body = Notification), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn get_notification(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Notification>> {
    let id: MessageId = path_id("notification", &id)?;
    Ok(Json(app.service.notification(&actor, &id)?))
}

/// The banners showing on the store's dashboard (not expired, not dismissed), newest first,
/// each attributed to its plugin.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/banners", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), PageParams), security(("admin_token" = [])),
    responses((status = 200, body = Page<Banner>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_banners(
    State(app): State<AppState>,
    Path(store): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Banner>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.active_banners(&store_id(&store)?, &page)?))
}

/// The merchant dismisses a banner (again: no change).
#[utoipa::path(post, path = "/admin/v1/stores/{store_id}/banners/{id}/dismiss", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Banner id (`msg_…`)")),
    security(("admin_token" = [])),
    responses((status = 200, body = Banner), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn dismiss_banner(
    State(app): State<AppState>,
    Path((store, id)): Path<(String, String)>,
) -> Result<Json<Banner>> {
    let id: MessageId = path_id("banner", &id)?;
    Ok(Json(app.service.dismiss_banner(&store_id(&store)?, &id)?))
}

/// The store's decision feed, newest first, each card attributed to its plugin.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/feed", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), PageParams), security(("admin_token" = [])),
    responses((status = 200, body = Page<FeedCard>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_feed(
    State(app): State<AppState>,
    Path(store): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<FeedCard>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.feed(&store_id(&store)?, &page)?))
}

/// The store's outbox: messages accepted while no sender was connected for their channel, with
/// their address and rendered content, newest first.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/outbox", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), PageParams), security(("admin_token" = [])),
    responses((status = 200, body = Page<Message>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_outbox(
    State(app): State<AppState>,
    Path(store): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Message>>> {
    let filter = MessageFilter {
        status: Some(MessageStatus::Outbox),
        ..MessageFilter::default()
    };
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.messages(
        &store_id(&store)?,
        &filter,
        &page,
    )?))
}

/// Every notification of the store, newest first, with address, content and delivery state.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/notifications", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), MessageFilter), security(("admin_token" = [])),
    responses((status = 200, body = Page<Message>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_messages(
    State(app): State<AppState>,
    Path(store): Path<String>,
    Query(filter): Query<MessageFilter>,
) -> Result<Json<Page<Message>>> {
    let page = PageRequest::parse(&PageParams {
        limit: filter.limit.clone(),
        cursor: filter.cursor.clone(),
    })?;
    Ok(Json(app.service.messages(
        &store_id(&store)?,
        &filter,
        &page,
    )?))
}

/// One notification of the store.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/notifications/{id}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("id" = String, Path, description = "Notification id")),
    security(("admin_token" = [])),
    responses((status = 200, body = Message), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn get_message(
    State(app): State<AppState>,
    Path((store, id)): Path<(String, String)>,
) -> Result<Json<Message>> {
    let id: MessageId = path_id("notification", &id)?;
    Ok(Json(app.service.message(&store_id(&store)?, &id)?))
}

/// The store's connected senders (secrets are never shown).
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/senders", tag = "operator",
    params(("store_id" = String, Path, description = "Store id")), security(("admin_token" = [])),
    responses((status = 200, body = Vec<SenderView>), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn list_senders(
    State(app): State<AppState>,
    Path(store): Path<String>,
) -> Result<Json<Vec<SenderView>>> {
    Ok(Json(app.service.senders(&store_id(&store)?)?))
}

/// The channels that go out through a merchant's sender (banners and feed cards have none).
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[allow(dead_code)] // Named in the document only: the path is parsed by `sender_channel`.
pub enum SenderChannel {
    /// Email, over the merchant's SMTP server.
    #[schema(rename = "email")]
    Email,
    /// SMS, through the merchant's provider.
    #[schema(rename = "sms")]
    Sms,
    /// WhatsApp, through the merchant's provider.
    #[schema(rename = "whatsapp")]
    Whatsapp,
    /// Push, through the merchant's provider.
    #[schema(rename = "push")]
    Push,
}

/// Connect the merchant's sender for a channel: `email` takes `{"smtp": {host, port, username?,
/// password?, from, tls: none|starttls|tls}}`; `sms`, `whatsapp` and `push` take `{"url",
/// "auth_token"?}`, and the host then POSTs `{id, channel, to, body, title?, store}` there with
/// `Authorization: Bearer <auth_token>` and `Idempotency-Key: <id>`.
#[utoipa::path(put, path = "/admin/v1/stores/{store_id}/senders/{channel}", tag = "operator", request_body = SenderSettings,
    params(("store_id" = String, Path, description = "Store id"),
        ("channel" = SenderChannel, Path, description = "`email`, `sms`, `whatsapp` or `push`")),
    security(("admin_token" = [])),
    responses((status = 200, body = SenderView), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn set_sender(
    State(app): State<AppState>,
    Path((store, channel)): Path<(String, String)>,
    Json(body): Json<SenderSettings>,
) -> Result<Json<SenderView>> {
    let channel = sender_channel(&channel)?;
    Ok(Json(app.service.set_sender(
        &store_id(&store)?,
        channel,
        body,
    )?))
}

/// Disconnect a sender: the channel's messages land in the outbox from now on.
#[utoipa::path(delete, path = "/admin/v1/stores/{store_id}/senders/{channel}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("channel" = SenderChannel, Path, description = "`email`, `sms`, `whatsapp` or `push`")),
    security(("admin_token" = [])),
    responses((status = 204, description = "disconnected"), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn delete_sender(
    State(app): State<AppState>,
    Path((store, channel)): Path<(String, String)>,
) -> Result<StatusCode> {
    let channel = sender_channel(&channel)?;
    app.service.delete_sender(&store_id(&store)?, channel)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A template of a plugin installed in the store: the plugin's wording and the store's override.
#[utoipa::path(get, path = "/admin/v1/stores/{store_id}/templates/{plugin}/{key}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("plugin" = String, Path, description = "Plugin name"),
        ("key" = String, Path, description = "Template key")),
    security(("admin_token" = [])),
    responses((status = 200, body = TemplateView), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn get_template(
    State(app): State<AppState>,
    Path((store, plugin, key)): Path<(String, String, String)>,
) -> Result<Json<TemplateView>> {
    Ok(Json(app.service.template_view(
        &store_id(&store)?,
        &plugin,
        &key,
    )?))
}

/// The merchant rewords a template for the store. Only the template's channels, only its declared
/// variables (400 `validation_failed` on `email.body` and the like otherwise); the override wins
/// over the plugin's wording for the channels it covers.
#[utoipa::path(put, path = "/admin/v1/stores/{store_id}/templates/{plugin}/{key}", tag = "operator", request_body = Wording,
    params(("store_id" = String, Path, description = "Store id"), ("plugin" = String, Path, description = "Plugin name"),
        ("key" = String, Path, description = "Template key")),
    security(("admin_token" = [])),
    responses((status = 200, body = TemplateView), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn set_template_override(
    State(app): State<AppState>,
    Path((store, plugin, key)): Path<(String, String, String)>,
    Json(body): Json<Wording>,
) -> Result<Json<TemplateView>> {
    let store = store_id(&store)?;
    let view = blocking(move || {
        app.service
            .set_template_override(&store, &plugin, &key, body)
    })
    .await?;
    Ok(Json(view))
}

/// Remove the store's override: the plugin's wording applies again.
#[utoipa::path(delete, path = "/admin/v1/stores/{store_id}/templates/{plugin}/{key}", tag = "operator",
    params(("store_id" = String, Path, description = "Store id"), ("plugin" = String, Path, description = "Plugin name"),
        ("key" = String, Path, description = "Template key")),
    security(("admin_token" = [])),
    responses((status = 204, description = "removed"), (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn delete_template_override(
    State(app): State<AppState>,
    Path((store, plugin, key)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    app.service
        .delete_template_override(&store_id(&store)?, &plugin, &key)?;
    Ok(StatusCode::NO_CONTENT)
}
