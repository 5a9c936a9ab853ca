//! `GET /healthz` and `GET /readyz`: probes for load balancers and orchestrators. Both need no
//! token and are outside the `/v1` and `/admin/v1` rate limits (they are not behind their
//! authentication layers).

use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;

/// The health routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// `GET /healthz`: the process is up.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// What `GET /readyz` checked: each is `ok` or `failing`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessChecks {
    /// A storage read succeeds.
    #[schema(example = "ok")]
    pub storage: &'static str,
    /// The delivery engine's task is running.
    #[schema(example = "ok")]
    pub engine: &'static str,
}

/// `GET /readyz`: `ready` when every check is `ok`, else `not_ready`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// Each check, `ok` or `failing`.
    pub checks: ReadinessChecks,
}

/// Liveness: 200 `{"status":"ok"}` while the process serves HTTP. No token, no rate limit.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = Health)))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

/// Readiness: 200 `{"status":"ready","checks":{"storage":"ok","engine":"ok"}}` when storage
/// answers a read and the delivery engine runs; otherwise 503 with `"status":"not_ready"` and the
/// failing check(s) as `"failing"`. No token, no rate limit.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = Readiness),
        (status = 503, description = "a check is `failing`", body = Readiness)))]
pub async fn readyz(State(app): State<AppState>) -> (StatusCode, axum::Json<Readiness>) {
    let service = app.service.clone();
    let storage_ok = tokio::task::spawn_blocking(move || service.check_storage().is_ok())
        .await
        .unwrap_or(false);
    let engine_ok = app.engine_alive.load(Ordering::SeqCst);
    readiness(storage_ok, engine_ok)
}

fn readiness(storage_ok: bool, engine_ok: bool) -> (StatusCode, axum::Json<Readiness>) {
    let word = |ok: bool| if ok { "ok" } else { "failing" };
    let ready = storage_ok && engine_ok;
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        axum::Json(Readiness {
            status: if ready { "ready" } else { "not_ready" },
            checks: ReadinessChecks {
                storage: word(storage_ok),
                engine: word(engine_ok),
            },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::readiness;
    use axum::http::StatusCode;

    #[test]
    fn readiness_names_the_failing_check_with_a_503() {
        let (status, body) = readiness(true, true);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            serde_json::to_value(&body.0).expect("json"),
            serde_json::json!({"status": "ready", "checks": {"storage": "ok", "engine": "ok"}})
        );
        let (status, body) = readiness(true, false);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            serde_json::to_value(&body.0).expect("json"),
            serde_json::json!({"status": "not_ready", "checks": {"storage": "ok", "engine": "failing"}})
        );
        let (status, body) = readiness(false, true);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body.0.checks.storage, "failing");
    }
}
