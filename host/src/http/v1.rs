//! `/v1` routes that are about the caller itself.

use axum::Router;
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::extract::Caller;
use super::middleware::ErrorResponse;
use crate::model::error::Result;
use crate::model::event::StoreRef;
use crate::model::ids::InstallationId;
use crate::service::Scope;

/// Routes about the calling installation.
pub fn router() -> Router<AppState> {
    Router::new().route("/installation", get(current_installation))
}

/// The installation a project token belongs to.
#[derive(Debug, Serialize, ToSchema)]
pub struct CurrentInstallation {
    /// Installation id (`inst_…`).
    pub id: InstallationId,
    /// The store that installed the plugin.
    pub store: StoreRef,
    /// The plugin's name.
    pub plugin: String,
    /// The scopes the token carries.
    pub scopes: Vec<Scope>,
    /// The merchant's settings for the plugin.
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
}

/// Who am I: the token's installation, store, scopes and settings. Needs no scope.
#[utoipa::path(get, path = "/v1/installation", tag = "installation", security(("project_token" = [])),
    responses((status = 200, body = CurrentInstallation), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn current_installation(
    axum::extract::State(app): axum::extract::State<AppState>,
    Caller(actor): Caller,
) -> Result<super::extract::Json<CurrentInstallation>> {
    let settings = app.service.own_settings(&actor)?;
    Ok(super::extract::Json(CurrentInstallation {
        settings,
        id: actor.installation,
        store: actor.store,
        plugin: actor.plugin,
        scopes: actor.scopes.into_iter().collect(),
    }))
}
