//! Liveness (`/healthz`), readiness (`/readyz`, with why not), `/metrics` and
//! `/openapi.json`: none of them needs a token, and none calls the cluster.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;

use super::AppState;
use crate::shapes::{HealthJson, ReadyJson};

/// The warning `/readyz` and the web view give while authentication is off.
pub const AUTH_OFF: &str = "authentication is off: anyone who reaches this apiserver acts as an operator (run the cluster with TLS to require user tokens)";

/// The process is alive. Says nothing of the cluster: see `/readyz`.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = HealthJson)))]
pub async fn healthz() -> Json<HealthJson> {
    Json(HealthJson {
        status: "ok".into(),
    })
}

/// Whether requests can be served now, and why not.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready", body = ReadyJson),
        (status = 503, description = "Not ready; `reason` says why", body = ReadyJson)
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let health = state.backend.health();
    let reason = if let Some(left) = health.degraded_for {
        Some(format!(
            "degraded: the last request found no primary; requests answer 503 for another {} ms unless a health check finds one first",
            left.as_millis()
        ))
    } else if !health.serving {
        Some("no primary answered the last health check".to_string())
    } else if health.rejoin_due {
        // A failover or an outage alike: which one, the next probe tells.
        Some(
            "the connection to the primary was lost: finding the primary and joining it"
                .to_string(),
        )
    } else {
        None
    };
    let body = ReadyJson {
        ready: reason.is_none(),
        reason,
        authentication: health.authentication,
        connected_to: health.connected_to,
        controllers: health.controllers,
        warning: (!health.authentication).then(|| AUTH_OFF.to_string()),
    };
    if body.ready {
        return (StatusCode::OK, Json(body)).into_response();
    }
    let retry = health.degraded_for.unwrap_or(Duration::from_secs(1));
    let secs = retry.as_secs_f64().ceil().max(1.0) as u64;
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, secs.to_string())],
        Json(body),
    )
        .into_response()
}

/// Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text exposition", content_type = "application/openmetrics-text")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// The OpenAPI document, generated from the routes.
pub async fn openapi_json(State(state): State<AppState>) -> Response {
    Json(&*state.openapi).into_response()
}
