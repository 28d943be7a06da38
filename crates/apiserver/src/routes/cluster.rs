//! `/v1/cluster`: who is primary, the term, every controller and scheduler.

use axum::extract::State;
use axum::Json;
use xce_client::json::{ClusterJson, ErrorJson};

use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;

/// The cluster as the primary sees it.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    responses(
        (status = 200, body = ClusterJson),
        (status = 401, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ClusterJson>, ApiError> {
    let Answer::Cluster(info) = state.call("clusterInfo", &caller, Call::Cluster).await? else {
        return Err(ApiError::internal(
            "cluster: the backend answered something else",
        ));
    };
    Ok(Json(ClusterJson::from(&info)))
}
