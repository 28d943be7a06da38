//! `/v1/history`: finished jobs that retired from the cluster's live state, with the filters
//! of `xce history`, a page at a time.

use axum::extract::State;
use axum::Json;
use xce_client::history::{id_bounds, HistoryFilter, TimeField};
use xce_client::json::{ErrorJson, JobJson};
use xce_client::types::{JobResult, JobState};
use xce_client::when;

use super::params::{cursor, names, time};
use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;
use crate::extract::Query;
use crate::shapes::{HistoryPageJson, HistoryQuery};

/// The most jobs one page holds.
const MAX_LIMIT: u32 = 1000;

/// The filter the query gives, or the parameter that does not read.
fn filter_of(q: HistoryQuery) -> Result<HistoryFilter, ApiError> {
    let (first_id, last_id) = match q.id.as_deref().filter(|s| !s.is_empty()) {
        None => (None, None),
        Some(text) => id_bounds(text).map_err(ApiError::invalid)?,
    };
    let time_of = match q.time_of.as_deref().filter(|s| !s.is_empty()) {
        None => TimeField::default(),
        Some(t) => TimeField::parse(t).ok_or_else(|| {
            ApiError::invalid(format!("time_of: {t:?} is none of submit, start, end"))
        })?,
    };
    let text = |v: Option<String>| v.filter(|s| !s.is_empty());
    Ok(HistoryFilter {
        states: names("state", q.state.as_deref(), |s| {
            s.parse::<JobState>().map_err(|e| e.to_string())
        })?,
        results: names("result", q.result.as_deref(), |s| {
            s.parse::<JobResult>().map_err(|e| e.to_string())
        })?,
        since_ms: time("since", q.since.as_deref(), when::TimeOfDay::Last)?,
        until_ms: time("until", q.until.as_deref(), when::TimeOfDay::Next)?,
        user: text(q.user),
        account: text(q.account),
        queue: text(q.queue),
        name: text(q.name),
        array: match q.array.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(a) => Some(
                a.parse::<u64>()
                    .ok()
                    .filter(|a| *a > 0)
                    .ok_or_else(|| ApiError::invalid(format!("array: {a:?} is no job id")))?,
            ),
        },
        first_id,
        last_id,
        time: time_of,
    })
}

/// Lists retired jobs in id order, a page at a time, from the answering controller's history.
#[utoipa::path(
    get,
    path = "/v1/history",
    tag = "history",
    params(HistoryQuery),
    responses(
        (status = 200, body = HistoryPageJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<HistoryPageJson>, ApiError> {
    let after = cursor(q.cursor.as_deref())?;
    let limit = q.limit.unwrap_or(0);
    if limit > MAX_LIMIT {
        return Err(ApiError::invalid(format!("limit: at most {MAX_LIMIT}")));
    }
    let filter = filter_of(q)?;
    let call = Call::ListHistory {
        filter,
        after,
        limit,
    };
    let Answer::History(page) = state.call("listHistory", &caller, call).await? else {
        return Err(ApiError::internal(
            "history: the backend answered something else",
        ));
    };
    Ok(Json(HistoryPageJson {
        jobs: page.jobs.iter().map(JobJson::from).collect(),
        next_cursor: (page.next > 0).then(|| page.next.to_string()),
        behind: page.behind,
        scanned: page.scanned,
    }))
}
