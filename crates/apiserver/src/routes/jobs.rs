//! `/v1/jobs`: submit (with `Idempotency-Key`), list (filters and a cursor), get, and
//! kill / suspend / resume / requeue.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use xce_client::json::{ErrorJson, JobJson};
use xce_client::types::{
    JobAction, JobFilter, JobResult, JobSpec, JobState, Limits, RequestToken, Resources,
};
use xce_client::when::{self, now_ms};

use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;
use crate::extract::{Body, Path, Query};
use crate::shapes::{
    ActionJson, JobPageJson, ListJobsQuery, SubmitRequest, SubmitResponse, MAX_LIMIT,
};

/// The header that makes a submit idempotent.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Submits a job. With an `Idempotency-Key`, a repeat of the same key by the same caller
/// (even through another apiserver, or after a restart) is the same job: 200 with it,
/// instead of 201 with a new one.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    request_body = SubmitRequest,
    params(("Idempotency-Key" = Option<String>, Header, pattern = r"^[!-~]{1,255}$", description = "1 to 255 visible ASCII characters; the same key from the same caller submits once")),
    responses(
        (status = 201, description = "Submitted", body = SubmitResponse),
        (status = 200, description = "The job an earlier request with this Idempotency-Key made", body = SubmitResponse),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson),
        (status = 404, description = "No such queue", body = ErrorJson),
        (status = 409, body = ErrorJson), (status = 413, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let token = match headers.get(IDEMPOTENCY_KEY) {
        Some(key) => idempotent_token(&caller, key.as_bytes())?,
        None => RequestToken::random(),
    };
    if let Some(user) = req.user.as_deref() {
        check_user(user)?;
    }
    if req.command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(ApiError::invalid(
            "command: the program (its first element) must be given and not blank",
        ));
    }
    let call = Call::Submit {
        token,
        spec: spec_of(req)?,
    };
    let Answer::Submitted(done) = state.call("submit", &caller, call).await? else {
        return Err(ApiError::internal(
            "submit: the backend answered something else",
        ));
    };
    let status = if done.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let body = SubmitResponse {
        id: done.id,
        job: done.job.as_ref().map(JobJson::from),
    };
    Ok((status, Json(body)))
}

/// The request token of a submit with an `Idempotency-Key`: derived from the caller and the
/// key, so the key holds across apiservers and restarts, and one caller's key never names
/// another's job.
pub fn idempotent_token(caller: &Caller, key: &[u8]) -> Result<RequestToken, ApiError> {
    let visible = key.iter().all(|b| (0x21..=0x7e).contains(b));
    if key.is_empty() || key.len() > 255 || !visible {
        return Err(ApiError::invalid(
            "Idempotency-Key: 1 to 255 visible ASCII characters",
        ));
    }
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"xce idempotency key\0");
    ctx.update(caller.key().as_bytes());
    ctx.update(b"\0");
    ctx.update(key);
    let digest = ctx.finish();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    Ok(RequestToken(u128::from_be_bytes(bytes)))
}

/// A user name as the HTTP API takes it (the schema's pattern): refused even with
/// authentication on, where the field is ignored, rather than silently dropped.
fn check_user(user: &str) -> Result<(), ApiError> {
    let valid = (1..=64).contains(&user.len())
        && !user.starts_with('-')
        && xce_client::types::name_chars_ok(user);
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "user: 1 to 64 letters, digits, '.', '_' or '-', not starting with '-'",
        ))
    }
}

/// The job a request asks for; a negative count is refused naming its field.
fn spec_of(req: SubmitRequest) -> Result<JobSpec, ApiError> {
    let SubmitRequest {
        command,
        name,
        queue,
        cpus,
        mem_mb,
        priority,
        env,
        cwd,
        user,
        time_limit_s,
    } = req;
    let negative = |field: &str, got: i64| {
        ApiError::invalid(format!("{field}: must not be negative (got {got})"))
    };
    let cpus = cpus.unwrap_or(0);
    let mem_mb = mem_mb.unwrap_or(0);
    Ok(JobSpec {
        name: name.unwrap_or_default(),
        user: user.unwrap_or_default(),
        queue: queue.unwrap_or_default(),
        command,
        env: env.unwrap_or_default().into_iter().collect(),
        cwd: cwd.unwrap_or_default(),
        resources: Resources::new(
            u32::try_from(cpus).map_err(|_| negative("cpus", cpus.into()))?,
            u64::try_from(mem_mb).map_err(|_| negative("mem_mb", mem_mb))?,
        ),
        priority: priority.unwrap_or(0),
        // 0 is no limit, as for `--time 0`.
        limits: Limits {
            time_limit_s: time_limit_s.filter(|s| *s > 0),
        },
        // Not taken over HTTP yet (issue 33's next steps).
        script: None,
        stdout: None,
        stderr: None,
        open_mode: None,
        hold: false,
        begin_time_ms: None,
        warn_signal: None,
        no_requeue: false,
    })
}

/// Lists jobs in id order, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(ListJobsQuery),
    responses(
        (status = 200, body = JobPageJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListJobsQuery>,
) -> Result<Json<JobPageJson>, ApiError> {
    // An empty parameter is one not given.
    let states = match q.state.as_deref().filter(|s| !s.is_empty()) {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| s.trim().parse::<JobState>())
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::invalid(format!("state: {e}")))?,
    };
    let after = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => c
            .parse::<u64>()
            .ok()
            .filter(|_| c.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ApiError::invalid("cursor: not one this API gave"))?,
    };
    let limit = q.limit.unwrap_or(0);
    if limit > MAX_LIMIT {
        return Err(ApiError::invalid(format!("limit: at most {MAX_LIMIT}")));
    }
    let results = match q.result.as_deref().filter(|s| !s.is_empty()) {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| s.trim().parse::<JobResult>())
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::invalid(format!("result: {e}")))?,
    };
    let since = match q.since.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(
            when::parse(text, now_ms(), when::TimeOfDay::Last)
                .map_err(|e| ApiError::invalid(format!("since: {e}")))?,
        ),
    };
    let filter = JobFilter {
        queue: q.queue.filter(|s| !s.is_empty()),
        states,
        user: q.user.filter(|s| !s.is_empty()),
        name: q.name.filter(|s| !s.is_empty()),
        results,
        submitted_since_ms: since,
    };
    let call = Call::ListJobs {
        filter,
        after,
        limit,
    };
    let Answer::Jobs(page) = state.call("listJobs", &caller, call).await? else {
        return Err(ApiError::internal(
            "list: the backend answered something else",
        ));
    };
    Ok(Json(JobPageJson {
        jobs: page.jobs.iter().map(JobJson::from).collect(),
        next_cursor: page.next.map(|n| n.to_string()),
    }))
}

/// One job.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = u64, Path, description = "The job id")),
    responses(
        (status = 200, body = JobJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 404, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<u64>,
) -> Result<Json<JobJson>, ApiError> {
    let Answer::Job(job) = state.call("jobInfo", &caller, Call::GetJob(id)).await? else {
        return Err(ApiError::internal(
            "get: the backend answered something else",
        ));
    };
    Ok(Json(JobJson::from(&job)))
}

/// Kills, suspends, resumes or requeues a job. A user may act only on their own jobs.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/{action}",
    tag = "jobs",
    params(
        ("id" = u64, Path, description = "The job id", example = 1),
        ("action" = String, Path, pattern = "^(kill|suspend|resume|requeue)$", description = "kill, suspend, resume or requeue")
    ),
    responses(
        (status = 200, body = ActionJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson), (status = 404, body = ErrorJson),
        (status = 409, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn control(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, action)): Path<(u64, String)>,
) -> Result<Json<ActionJson>, ApiError> {
    let parsed: JobAction = action.parse().map_err(|_| {
        ApiError::not_found(format!(
            "no action {action:?} on a job (kill, suspend, resume or requeue)"
        ))
    })?;
    let call = Call::ControlJob { id, action: parsed };
    state.call("jobControl", &caller, call).await?;
    Ok(Json(ActionJson {
        target: id.to_string(),
        action,
    }))
}
