//! `/v1/hosts`: list, and open / close (operators).

use axum::extract::State;
use axum::Json;
use xce_client::json::{ErrorJson, HostJson};
use xce_client::types::HostAction;

use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;
use crate::extract::Path;
use crate::shapes::ActionJson;

/// Every worker host and its load.
#[utoipa::path(
    get,
    path = "/v1/hosts",
    tag = "hosts",
    responses(
        (status = 200, body = Vec<HostJson>),
        (status = 401, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<HostJson>>, ApiError> {
    let Answer::Hosts(hosts) = state.call("listHosts", &caller, Call::ListHosts).await? else {
        return Err(ApiError::internal(
            "hosts: the backend answered something else",
        ));
    };
    Ok(Json(hosts.iter().map(HostJson::from).collect()))
}

/// Opens or closes a host to new jobs (operators and admins).
#[utoipa::path(
    post,
    path = "/v1/hosts/{name}/{action}",
    tag = "hosts",
    params(
        ("name" = String, Path, description = "The host", example = "w1"),
        ("action" = String, Path, pattern = "^(open|close)$", description = "open or close")
    ),
    responses(
        (status = 200, body = ActionJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson), (status = 404, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn control(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, action)): Path<(String, String)>,
) -> Result<Json<ActionJson>, ApiError> {
    let parsed: HostAction = action.parse().map_err(|_| {
        ApiError::not_found(format!("no action {action:?} on a host (open or close)"))
    })?;
    let call = Call::ControlHost {
        name: name.clone(),
        action: parsed,
    };
    state.call("hostControl", &caller, call).await?;
    Ok(Json(ActionJson {
        target: name,
        action,
    }))
}
