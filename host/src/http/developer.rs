//! The developer API (`/dev/v1`), authenticated with a developer's API key (`chk_…`, made in the
//! developer console): publishing their plugins and listing them. `commerce-host login` stores a
//! key for `plugin publish`.

use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::admin::PublishPlugin;
use super::extract::Json;
use crate::model::account::Account;
use crate::model::error::Result;
use crate::model::plugin::Plugin;

/// The developer API's routes (behind [`super::middleware::developer_auth`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/plugins", post(publish).get(list))
        .route("/invocations/{id}", get(invocation))
}

/// The developer's plugins.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeveloperPlugins {
    /// The current version of each plugin the developer publishes, by name.
    pub data: Vec<Plugin>,
}

/// Publish a plugin, or a new version of one's own, as `POST /admin/v1/plugins` does; a new
/// plugin becomes the developer's. Another developer's plugin, or one the operator published,
/// is 403 `not_your_plugin`.
#[utoipa::path(post, path = "/dev/v1/plugins", tag = "developer", request_body = PublishPlugin,
    security(("developer_key" = [])),
    responses((status = 201, body = Plugin), (status = 400, body = super::middleware::ErrorResponse),
        (status = 401, body = super::middleware::ErrorResponse),
        (status = 403, description = "not the developer's plugin", body = super::middleware::ErrorResponse),
        (status = 409, description = "the version is not newer", body = super::middleware::ErrorResponse)))]
pub async fn publish(
    State(app): State<AppState>,
    Extension(developer): Extension<Account>,
    Json(body): Json<PublishPlugin>,
) -> Result<(StatusCode, Json<Plugin>)> {
    super::admin::publish_as(&app, Some(developer.id), body).await
}

/// The developer's plugins, by name.
#[utoipa::path(get, path = "/dev/v1/plugins", tag = "developer", security(("developer_key" = [])),
    responses((status = 200, body = DeveloperPlugins), (status = 401, body = super::middleware::ErrorResponse)))]
pub async fn list(
    State(app): State<AppState>,
    Extension(developer): Extension<Account>,
) -> Result<Json<DeveloperPlugins>> {
    Ok(Json(DeveloperPlugins {
        data: app.service.developer_plugins(&developer.id)?,
    }))
}

/// The exact inputs of one invocation of the developer's component (`att_…`, the attempt id the
/// console and `plugin logs` show): the event as the component got it, the records it read and
/// its settings. `commerce-host plugin run --replay` runs a local build on them. Another
/// developer's invocation, or one whose event has expired, is 404.
#[utoipa::path(get, path = "/dev/v1/invocations/{id}", tag = "developer",
    security(("developer_key" = [])),
    params(("id" = String, Path, description = "The invocation's attempt id (`att_…`)")),
    responses((status = 200, body = crate::service::developer::InvocationReplay),
        (status = 401, body = super::middleware::ErrorResponse),
        (status = 404, body = super::middleware::ErrorResponse)))]
pub async fn invocation(
    State(app): State<AppState>,
    Extension(developer): Extension<Account>,
    Path(id): Path<String>,
) -> Result<Json<crate::service::developer::InvocationReplay>> {
    let service = app.service.clone();
    let replay =
        tokio::task::spawn_blocking(move || service.developer_invocation(&developer.id, &id))
            .await
            .map_err(|e| {
                crate::Error::Internal(anyhow::anyhow!("reading the invocation: {e}"))
            })??;
    Ok(Json(replay))
}
