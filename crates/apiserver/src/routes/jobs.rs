//! `/v1/jobs`: submit (with `Idempotency-Key`), list (filters and a cursor), get, and
//! kill / suspend / resume / requeue.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use xce_client::array::JobRef;
use xce_client::json::{ErrorJson, JobJson};
use xce_client::types::{
    Job, JobAction, JobChanges, JobFilter, JobResult, JobSpec, JobState, Limits, RequestToken,
    Resources, TaskOp,
};
use xce_client::when::{self, now_ms};

use super::params::{cursor, names, time};
use super::AppState;
use crate::backend::{Answer, Call, Caller};
use crate::error::ApiError;
use crate::extract::{Body, Path, Query};
use crate::shapes::{
    ActionJson, JobPageJson, ListJobsQuery, ScriptJson, SignalRequest, SubmitRequest,
    SubmitResponse, UpdateRequest, MAX_LIMIT,
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
    let blank_program = req.command.first().is_some_and(|p| p.trim().is_empty());
    if blank_program || (req.script.is_none() && req.command.is_empty()) {
        return Err(ApiError::invalid(
            "command: the program (its first element) must be given and not blank, or a script",
        ));
    }
    let script: Option<std::sync::Arc<[u8]>> = req.script.as_deref().map(|s| s.as_bytes().into());
    if let Some(body) = &script {
        xce_client::script::check(body, usize::MAX)
            .map_err(|e| ApiError::invalid(format!("script: {e}")))?;
    }
    let mut spec = spec_of(req)?;
    spec.script = script.as_deref().map(xce_client::script::ScriptId::of);
    let call = Call::Submit {
        token,
        spec: Box::new(spec),
        script,
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
        // Taken apart by the caller: its bytes and id.
        script: _,
        stdout,
        stderr,
        open_mode,
        hold,
        begin_time,
        signal,
        requeue,
        dependency,
        kill_on_invalid_dep,
        array,
        account,
    } = req;
    let array = array
        .as_deref()
        .map(|a| {
            a.parse::<xce_client::array::ArraySpec>()
                .map_err(|e| ApiError::invalid(format!("array: {e}")))
        })
        .transpose()?;
    let dependency = dependency
        .as_deref()
        .map(|d| {
            d.parse::<xce_client::dependency::Expr>()
                .map_err(|e| ApiError::invalid(e.to_string()))
        })
        .transpose()?;
    for (field, pattern) in [("stdout", &stdout), ("stderr", &stderr)] {
        if let Some(pattern) = pattern {
            xce_client::output_path::check(pattern)
                .map_err(|e| ApiError::invalid(format!("{field}: {e}")))?;
        }
    }
    let open_mode = open_mode
        .map(|m| {
            m.parse::<xce_client::types::OpenMode>().map_err(|_| {
                ApiError::invalid(format!("open_mode: {m:?} is not append or truncate"))
            })
        })
        .transpose()?;
    let begin_time_ms = begin_time.as_deref().map(begin_time_of).transpose()?;
    let warn_signal = signal
        .as_deref()
        .map(|s| {
            xce_client::signals::parse_warning(s)
                .map_err(|e| ApiError::invalid(format!("signal: {e}")))
        })
        .transpose()?;
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
        script: None,
        stdout,
        stderr,
        open_mode,
        hold: hold.unwrap_or(false),
        begin_time_ms,
        warn_signal,
        no_requeue: requeue == Some(false),
        dependency,
        kill_on_invalid_dep,
        array,
        account: account.unwrap_or_default(),
    })
}

/// A begin time as the HTTP API takes it (any form `xce submit --begin` takes, RFC 3339 and
/// `now+N` among them); a time past is now.
fn begin_time_of(text: &str) -> Result<u64, ApiError> {
    let now = now_ms();
    if text.is_empty() {
        return Ok(now);
    }
    when::parse_begin(text, now).map_err(|e| ApiError::invalid(format!("begin_time: {e}")))
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
    let states = names("state", q.state.as_deref(), |s| {
        s.parse::<JobState>().map_err(|e| e.to_string())
    })?;
    let after = cursor(q.cursor.as_deref())?;
    let limit = q.limit.unwrap_or(0);
    if limit > MAX_LIMIT {
        return Err(ApiError::invalid(format!("limit: at most {MAX_LIMIT}")));
    }
    let results = names("result", q.result.as_deref(), |s| {
        s.parse::<JobResult>().map_err(|e| e.to_string())
    })?;
    let since = time("since", q.since.as_deref(), when::TimeOfDay::Last)?;
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
    params(("id" = String, Path, pattern = r"^[0-9]{1,19}(_([0-9]{1,10}|\[[0-9][0-9,:-]{0,200}\]))?$", description = "The job id, or an array's task (ID_IDX)", example = "1")),
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
    Path(id): Path<String>,
) -> Result<Json<JobJson>, ApiError> {
    let job = job_of(&state, &caller, &target(&id)?, "get").await?;
    Ok(Json(JobJson::from(&job)))
}

/// The job or tasks a path names: `42`, `42_7`, `42_[1-5]`.
fn target(id: &str) -> Result<JobRef, ApiError> {
    id.parse::<JobRef>()
        .map_err(|e| ApiError::invalid(format!("id: {e}")))
}

/// The job a target names: a job, one task (its own record once it started, else its
/// array's, in which it waits), or the array whose tasks a range names.
async fn job_of(
    state: &AppState,
    caller: &Caller,
    target: &JobRef,
    what: &str,
) -> Result<Job, ApiError> {
    let (method, call) = match &target.tasks {
        Some(tasks) if tasks.len() == 1 => (
            "getTask",
            Call::GetTask {
                array: target.id,
                index: tasks.first().unwrap_or(0),
            },
        ),
        _ => ("jobInfo", Call::GetJob(target.id)),
    };
    let Answer::Job(job) = state.call(method, caller, call).await? else {
        return Err(ApiError::internal(format!(
            "{what}: the backend answered something else"
        )));
    };
    Ok(job)
}

/// `op` on the tasks `target` names, when it names tasks; `call` (the same on a whole job,
/// which an array's own record passes on to its tasks) otherwise.
async fn act(
    state: &AppState,
    caller: &Caller,
    target: &JobRef,
    (method, call): (&'static str, Call),
    op: TaskOp,
) -> Result<(), ApiError> {
    let (method, call) = match &target.tasks {
        Some(tasks) => (
            "controlTasks",
            Call::ControlTasks {
                array: target.id,
                tasks: Some(tasks.clone()),
                op,
            },
        ),
        None => (method, call),
    };
    state.call(method, caller, call).await?;
    Ok(())
}

/// Kills, suspends, resumes, requeues, holds or releases a job. A user may act only on their
/// own jobs.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/{action}",
    tag = "jobs",
    params(
        ("id" = String, Path, pattern = r"^[0-9]{1,19}(_([0-9]{1,10}|\[[0-9][0-9,:-]{0,200}\]))?$", description = "The job id; an array's task (ID_IDX) or tasks (ID_[A-B,...])", example = "1"),
        ("action" = String, Path, pattern = "^(kill|suspend|resume|requeue|hold|release)$", description = "kill, suspend, resume, requeue, hold or release")
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
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<ActionJson>, ApiError> {
    let target = target(&id)?;
    let hold = |hold| JobChanges {
        hold: Some(hold),
        ..JobChanges::default()
    };
    let update = |changes: JobChanges| {
        let call = Call::UpdateJob {
            id: target.id,
            changes: changes.clone(),
        };
        let op = TaskOp::Update {
            changes,
            throttle: None,
        };
        (("updateJob", call), op)
    };
    let (call, op) = match action.as_str() {
        "hold" => update(hold(true)),
        "release" => update(hold(false)),
        other => {
            let parsed: JobAction = other.parse().map_err(|_| {
                ApiError::not_found(format!(
                    "no action {action:?} on a job (kill, suspend, resume, requeue, hold or release)"
                ))
            })?;
            let call = Call::ControlJob {
                id: target.id,
                action: parsed,
            };
            (("jobControl", call), TaskOp::Control { action: parsed })
        }
    };
    act(&state, &caller, &target, call, op).await?;
    Ok(Json(ActionJson {
        target: target.to_string(),
        action,
    }))
}

/// Changes a job: a pending one's name, priority, queue, cpus, memory, time limit, hold or
/// begin time; a running one's time limit (which its worker applies without restarting it).
/// A user changes their own jobs and may only lower priority and time.
#[utoipa::path(
    patch,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, pattern = r"^[0-9]{1,19}(_([0-9]{1,10}|\[[0-9][0-9,:-]{0,200}\]))?$", description = "The job id; an array's task (ID_IDX) or tasks (ID_[A-B,...])", example = "1")),
    request_body = UpdateRequest,
    responses(
        (status = 200, body = JobJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson), (status = 404, body = ErrorJson),
        (status = 409, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<UpdateRequest>,
) -> Result<Json<JobJson>, ApiError> {
    let target = target(&id)?;
    let UpdateRequest {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s,
        hold,
        begin_time,
        throttle,
    } = req;
    let changes = JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s,
        hold,
        begin_time_ms: begin_time.as_deref().map(begin_time_of).transpose()?,
    };
    if let Some(throttle) = throttle {
        // An array's own: on the whole array, with the other changes in one request.
        if target.tasks.is_some() {
            return Err(ApiError::invalid(format!(
                "throttle: an array's own, not its tasks' (give {} alone)",
                target.id
            )));
        }
        let call = Call::ControlTasks {
            array: target.id,
            tasks: None,
            op: TaskOp::Update {
                changes,
                throttle: Some(throttle),
            },
        };
        state.call("controlTasks", &caller, call).await?;
    } else if changes != JobChanges::default() {
        // An empty patch changes nothing, and answers the job as it is.
        let call = Call::UpdateJob {
            id: target.id,
            changes: changes.clone(),
        };
        let op = TaskOp::Update {
            changes,
            throttle: None,
        };
        act(&state, &caller, &target, ("updateJob", call), op).await?;
    }
    let job = job_of(&state, &caller, &target, "update").await?;
    Ok(Json(JobJson::from(&job)))
}

/// Sends a signal to a running job's processes (its whole process group, or its leading
/// process alone). A user signals their own jobs.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/signal",
    tag = "jobs",
    params(("id" = String, Path, pattern = r"^[0-9]{1,19}(_([0-9]{1,10}|\[[0-9][0-9,:-]{0,200}\]))?$", description = "The job id; an array (every running task), an array's task (ID_IDX) or tasks (ID_[A-B,...])", example = "1")),
    request_body = SignalRequest,
    responses(
        (status = 200, body = ActionJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson), (status = 404, body = ErrorJson),
        (status = 409, body = ErrorJson), (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn signal(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<SignalRequest>,
) -> Result<Json<ActionJson>, ApiError> {
    let target = target(&id)?;
    let signal = xce_client::signals::parse(&req.signal)
        .map_err(|e| ApiError::invalid(format!("signal: {e}")))?;
    let call = Call::SignalJob {
        id: target.id,
        signal,
        leader_only: req.leader_only,
    };
    let op = TaskOp::Signal {
        signal,
        leader_only: req.leader_only,
    };
    act(&state, &caller, &target, ("signalJob", call), op).await?;
    Ok(Json(ActionJson {
        target: target.to_string(),
        action: format!("signal {}", xce_client::signals::name(signal)),
    }))
}

/// A job's script, as submitted: its owner's, or any job's for an operator.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/script",
    tag = "jobs",
    params(("id" = String, Path, pattern = r"^[0-9]{1,19}(_([0-9]{1,10}|\[[0-9][0-9,:-]{0,200}\]))?$", description = "The job id, or an array's task (ID_IDX)", example = "1")),
    responses(
        (status = 200, body = ScriptJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 403, body = ErrorJson), (status = 404, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn script(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScriptJson>, ApiError> {
    let target = target(&id)?;
    let id = match &target.tasks {
        None => target.id,
        Some(_) => job_of(&state, &caller, &target, "script").await?.id,
    };
    let Answer::Script(body) = state
        .call("jobScript", &caller, Call::GetScript(id))
        .await?
    else {
        return Err(ApiError::internal(
            "script: the backend answered something else",
        ));
    };
    Ok(Json(ScriptJson {
        id,
        script: String::from_utf8_lossy(&body).into_owned(),
    }))
}
