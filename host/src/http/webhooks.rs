//! `/v1/webhooks`: subscriptions, resume, replay, and the delivery and attempt logs.
//!
//! Managing one's own subscriptions needs only a valid project token; subscribing to an event
//! needs the read scope of its resource (`order.*`: `orders.read`, `customer.*`:
//! `customers.read`, `product.*`: `products.read`; `plugin.*`: none).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};

use super::AppState;
use super::extract::{Caller, Json, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::delivery::{Attempt, Delivery};
use crate::model::error::Result;
use crate::model::ids::WebhookId;
use crate::model::webhook::{
    DeliveryFilter, NewWebhook, ReplayRequest, ReplayResult, RotateSecret, SecretRotated,
    TestEventRequest, Webhook, WebhookPatch,
};
use crate::service::pagination::{Page, PageParams, PageRequest};

/// The webhook routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/webhooks", post(create_webhook).get(list_webhooks))
        .route(
            "/webhooks/{id}",
            get(get_webhook)
                .patch(update_webhook)
                .delete(delete_webhook),
        )
        .route("/webhooks/{id}/resume", post(resume_webhook))
        .route("/webhooks/{id}/replay", post(replay_webhook))
        .route("/webhooks/{id}/test", post(send_test_event))
        .route(
            "/webhooks/{id}/deliveries/{event_id}/resend",
            post(resend_delivery),
        )
        .route("/webhooks/{id}/rotate-secret", post(rotate_secret))
        .route("/webhooks/{id}/attempts", get(list_attempts))
        .route("/webhooks/{id}/deliveries", get(list_deliveries))
}

fn webhook_id(raw: &str) -> Result<WebhookId> {
    path_id("webhook", raw)
}

/// Subscribe to store events. Each event needs the read scope of its resource (403
/// `missing_scope` otherwise). The URL must be http(s) and resolve to public addresses (or to a
/// network the operator allowed); the secret is 16 to 256 bytes and is never returned.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", request_body = NewWebhook,
    security(("project_token" = [])),
    responses((status = 201, body = Webhook),
        (status = 400, description = "`validation_failed` on `url`, `events[i]` or `secret`", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 403, description = "`missing_scope`", body = ErrorResponse),
        (status = 409, description = "`too_many_webhooks` (50 per installation)", body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn create_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<NewWebhook>,
) -> Result<(StatusCode, Json<Webhook>)> {
    let webhook = app.service.create_webhook(&actor, body).await?;
    Ok((StatusCode::CREATED, Json(webhook)))
}

/// The caller's subscriptions (API and manifest ones), oldest first.
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", params(PageParams),
    security(("project_token" = [])),
    responses((status = 200, body = Page<Webhook>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_webhooks(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Webhook>>> {
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.list_webhooks(&actor, &page)?))
}

/// One of the caller's subscriptions; another installation's is 404.
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 200, body = Webhook), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn get_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Webhook>> {
    let id = webhook_id(&id)?;
    Ok(Json(app.service.own_subscription(&actor, &id)?.view()))
}

/// Change the URL, the events or the secret (fields left out stay); the same rules as creation.
#[utoipa::path(patch, path = "/v1/webhooks/{id}", tag = "webhooks", request_body = WebhookPatch,
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 200, body = Webhook), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn update_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<WebhookPatch>,
) -> Result<Json<Webhook>> {
    let id = webhook_id(&id)?;
    Ok(Json(app.service.update_webhook(&actor, &id, body).await?))
}

/// Delete a subscription; its queued deliveries are dropped.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn delete_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    let id = webhook_id(&id)?;
    app.service.delete_webhook(&actor, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resume a paused subscription: new events are delivered again. Events that failed while it
/// was paused stay failed until replayed. Resuming an active subscription is a no-op (200).
#[utoipa::path(post, path = "/v1/webhooks/{id}/resume", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 200, body = Webhook), (status = 401, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn resume_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Webhook>> {
    let id = webhook_id(&id)?;
    Ok(Json(app.service.resume_webhook(&actor, &id)?))
}

/// Re-send failed and pending events (kept 30 days): `{"event_id": "evt_…"}` for one, or
/// `{"since": "<RFC 3339>"}` for every failed or pending event since then. Each is attempted at
/// once with a fresh retry schedule; a pending one (waiting for a retry) is moved to now, not
/// duplicated; succeeded ones are left alone. 202 with the number queued; 404 when the event has
/// no delivery to this subscription (or expired); 409 `delivery_not_failed` when that delivery
/// succeeded (use `…/deliveries/{event_id}/resend`); 409 `webhook_paused` while the subscription
/// is paused (resume it first).
#[utoipa::path(post, path = "/v1/webhooks/{id}/replay", tag = "webhooks", request_body = ReplayRequest,
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 202, body = ReplayResult), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn replay_webhook(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<ReplayRequest>,
) -> Result<(StatusCode, Json<ReplayResult>)> {
    let id = webhook_id(&id)?;
    let result = app.service.replay(&actor, &id, &body)?;
    Ok((StatusCode::ACCEPTED, Json(result)))
}

/// Send a test event to this subscription only: a synthetic event (`evt_…` id, example `data` in
/// the documented shape of its type) of `event_type` (default: the subscription's first event;
/// 400 on `event_type` if it does not receive it), through the delivery engine (signed, retried,
/// in the attempt log), with the header `X-Service-Test: true`. It reaches no other subscription
/// or component and is not in the store's event log. 202 with the delivery (`"test": true`);
/// 409 `webhook_paused` while paused. The body may be empty.
#[utoipa::path(post, path = "/v1/webhooks/{id}/test", tag = "webhooks", request_body = TestEventRequest,
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 202, body = Delivery),
        (status = 400, description = "`validation_failed` on `event_type`", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "`webhook_paused`", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn send_test_event(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    // The body is optional: empty means the subscription's first event.
    super::extract::OptionalJson(body): super::extract::OptionalJson<TestEventRequest>,
) -> Result<(StatusCode, Json<Delivery>)> {
    let id = webhook_id(&id)?;
    let delivery = app.service.send_test_event(&actor, &id, &body)?;
    Ok((StatusCode::ACCEPTED, Json(delivery.public())))
}

/// Resend one delivery now, named by its event (`evt_…`; one delivery per event and
/// subscription): attempted at once with a fresh retry schedule, whatever its status. A failed
/// or succeeded delivery is queued again (receivers deduplicate on `X-Service-Event-Id`); a
/// pending one waiting for a retry is moved to now, not duplicated. 202 with the delivery; 404
/// when the event has no delivery to this subscription (or expired); 409 `webhook_paused` while
/// paused.
#[utoipa::path(post, path = "/v1/webhooks/{id}/deliveries/{event_id}/resend", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)"),
        ("event_id" = String, Path, description = "The delivery's event (`evt_…`)")),
    security(("project_token" = [])),
    responses((status = 202, body = Delivery),
        (status = 400, description = "`validation_failed` on `event_id`", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "`webhook_paused`", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn resend_delivery(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path((id, event_id)): Path<(String, String)>,
) -> Result<(StatusCode, Json<Delivery>)> {
    let id = webhook_id(&id)?;
    let delivery = app.service.resend(&actor, &id, &event_id)?;
    Ok((StatusCode::ACCEPTED, Json(delivery.public())))
}

/// Rotate the signing secret with a 24-hour overlap: from now on deliveries are signed with the
/// new secret in `X-Service-Signature`, and until `previous_secret_expires_at` (24 h) also with
/// the replaced secret in `X-Service-Signature-Previous` (same format). A second rotation within
/// the overlap drops the oldest secret. 400 on `secret` (16 to 256 bytes, not the current one).
#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate-secret", tag = "webhooks", request_body = RotateSecret,
    params(("id" = String, Path, description = "Subscription id (`wh_…`)")), security(("project_token" = [])),
    responses((status = 200, body = SecretRotated),
        (status = 400, description = "`validation_failed` on `secret`", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn rotate_secret(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<RotateSecret>,
) -> Result<Json<SecretRotated>> {
    let id = webhook_id(&id)?;
    Ok(Json(app.service.rotate_secret(&actor, &id, &body)?))
}

/// The attempt log: every attempt (time, status code or error, duration, the first KiB of the
/// response), newest first. Kept 30 days with its event.
#[utoipa::path(get, path = "/v1/webhooks/{id}/attempts", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)"), PageParams),
    security(("project_token" = [])),
    responses((status = 200, body = Page<Attempt>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_attempts(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Page<Attempt>>> {
    let id = webhook_id(&id)?;
    let page = PageRequest::parse(&params)?;
    Ok(Json(app.service.list_attempts(&actor, &id, &page)?))
}

/// The deliveries (one per event), newest event first, optionally only `pending`, `succeeded`
/// or `failed` ones: what a replay can re-send.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id (`wh_…`)"), DeliveryFilter),
    security(("project_token" = [])),
    responses((status = 200, body = Page<Delivery>), (status = 400, body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_deliveries(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Query(filter): Query<DeliveryFilter>,
) -> Result<Json<Page<Delivery>>> {
    let id = webhook_id(&id)?;
    let mut page = app.service.list_deliveries(&actor, &id, &filter)?;
    page.data = page.data.into_iter().map(Delivery::public).collect();
    Ok(Json(page))
}
