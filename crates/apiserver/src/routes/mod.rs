//! The routes of DESIGN §6, one file per resource, collected with their OpenAPI operations
//! (`utoipa_axum::routes!`), so `/openapi.json` is generated from the very handlers that
//! serve. Every route but the event stream has a deadline; every request is counted in
//! `/metrics`.

mod cluster;
mod events;
mod health;
mod history;
mod hosts;
mod jobs;
mod params;
mod queues;
mod web;

pub use health::AUTH_OFF;
pub use jobs::idempotent_token;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::backend::{Answer, Backend, Call, Caller};
use crate::error::ApiError;
use crate::hub::Hub;
use crate::metrics::Metrics;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub hub: Hub,
    pub metrics: Arc<Metrics>,
    /// Every request's deadline (not the event stream's).
    pub request_timeout: Duration,
    /// The generated OpenAPI document, served at `/openapi.json`.
    pub openapi: Arc<utoipa::openapi::OpenApi>,
}

impl AppState {
    /// Makes `call` for `caller`, counting it by `name` and outcome.
    pub async fn call(
        &self,
        name: &'static str,
        caller: &Caller,
        call: Call,
    ) -> Result<Answer, ApiError> {
        let result = self.backend.call(caller, call).await;
        self.metrics.call(
            name,
            match &result {
                Ok(_) => "ok",
                Err(e) => e.code(),
            },
        );
        Ok(result?)
    }
}

/// The document's frame: title, and the bearer scheme every `/v1` route takes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "xce HTTP API",
        description = "The xce batch cluster over HTTP: jobs, queues, hosts, the cluster, and its events. Every /v1 route takes a user token (Authorization: Bearer) when authentication is on."
    ),
    modifiers(&BearerScheme),
    tags(
        (name = "jobs"), (name = "history"), (name = "queues"), (name = "hosts"), (name = "cluster"),
        (name = "events"), (name = "health")
    )
)]
struct ApiDoc;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A user token: xce token create --user NAME"))
                    .build(),
            ),
        );
    }
}

/// The routes with their OpenAPI operations: (those with a deadline, the event stream).
fn api() -> (OpenApiRouter<AppState>, OpenApiRouter<AppState>) {
    let bounded = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(jobs::submit, jobs::list))
        .routes(routes!(jobs::get, jobs::update))
        .routes(routes!(jobs::control))
        .routes(routes!(jobs::signal))
        .routes(routes!(jobs::script))
        .routes(routes!(history::list))
        .routes(routes!(queues::list))
        .routes(routes!(queues::control))
        .routes(routes!(hosts::list))
        .routes(routes!(hosts::control))
        .routes(routes!(cluster::get))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics));
    let streams = OpenApiRouter::new().routes(routes!(events::stream));
    (bounded, streams)
}

/// The OpenAPI document of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (bounded, streams) = api();
    let (_, mut doc) = bounded.split_for_parts();
    let (_, events) = streams.split_for_parts();
    doc.merge(events);
    // A submit holds a script or a command: said beside the request's derived schema.
    if let Some(components) = doc.components.as_mut() {
        if let Some(own) = components.schemas.remove("SubmitRequest") {
            let both = utoipa::openapi::schema::AllOfBuilder::new()
                .item(own)
                .item(crate::shapes::submit_needs())
                .build();
            components.schemas.insert(
                "SubmitRequest".to_string(),
                utoipa::openapi::RefOr::T(utoipa::openapi::schema::Schema::AllOf(both)),
            );
        }
    }
    doc
}

/// The whole application.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let (bounded, streams) = api();
    let (bounded, _) = bounded.split_for_parts();
    let (streams, _) = streams.split_for_parts();
    let bounded = bounded.layer(middleware::from_fn_with_state(state.clone(), deadline));
    bounded
        .merge(streams)
        .route("/", axum::routing::get(web::index))
        .route("/openapi.json", axum::routing::get(health::openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

/// Every request ends by its deadline: a backend that cannot answer in time is a 503.
async fn deadline(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => past_deadline(state.request_timeout).into_response(),
    }
}

/// The 503 of a request the cluster did not answer within `timeout`.
fn past_deadline(timeout: Duration) -> ApiError {
    ApiError::unavailable(
        format!("no answer from the cluster within the request deadline ({timeout:?})"),
        Duration::from_secs(1),
    )
}

/// Counts the request by its route's template, method and status, with its latency.
async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let method = req.method().as_str().to_string();
    let started = Instant::now();
    let response = next.run(req).await;
    state.metrics.request(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
