//! `/v1/queues`: list, and open / close / activate / inactivate (operators).

use axum::extract::State;
use axum::Json;
use xce_client::json::{ErrorJson, QueueJson};
use xce_client::types::QueueAction;

use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;
use crate::extract::Path;
use crate::shapes::ActionJson;

/// Every queue, with its jobs pending and running.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "queues",
    responses(
        (status = 200, body = Vec<QueueJson>),
        (status = 401, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<QueueJson>>, ApiError> {
    let Answer::Queues(queues) = state.call("listQueues", &caller, Call::ListQueues).await? else {
        return Err(ApiError::internal(
            "queues: the backend answered something else",
        ));
    };
    Ok(Json(queues.iter().map(QueueJson::from).collect()))
}

/// Opens, closes, activates or inactivates a queue (operators and admins).
#[utoipa::path(
    post,
    path = "/v1/queues/{name}/{action}",
    tag = "queues",
    params(
        ("name" = String, Path, description = "The queue", example = "normal"),
        ("action" = String, Path, pattern = "^(open|close|activate|inactivate)$", description = "open, close, activate or inactivate")
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
    let parsed: QueueAction = action.parse().map_err(|_| {
        ApiError::not_found(format!(
            "no action {action:?} on a queue (open, close, activate or inactivate)"
        ))
    })?;
    let call = Call::ControlQueue {
        name: name.clone(),
        action: parsed,
    };
    state.call("queueControl", &caller, call).await?;
    Ok(Json(ActionJson {
        target: name,
        action,
    }))
}
