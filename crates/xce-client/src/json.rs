//! The JSON shapes of DESIGN §3, shared by `xce -o json` and the HTTP API: typed views of the
//! domain types (each built `From` its domain value), so a field added to a domain type never
//! changes what either prints, and the apiserver's OpenAPI document is generated from these
//! very types (feature `openapi`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{
    ClusterInfo, Host, Job, JobSpec, Limits, Member, Queue, Resources, SchedulerInfo,
};

/// Derives the OpenAPI schema of a shape when the `openapi` feature is on.
macro_rules! shape {
    ($(#[$meta:meta])* pub struct $name:ident $body:tt) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name $body
    };
}

shape! {
    /// A job.
    pub struct JobJson {
        pub id: u64,
        pub name: String,
        pub user: String,
        pub queue: String,
        pub command: Vec<String>,
        pub cwd: String,
        pub cpus: i32,
        pub mem_mb: i64,
        pub priority: i32,
        /// The job's lifecycle.
        #[cfg_attr(feature = "openapi", schema(schema_with = openapi::job_state))]
        pub state: String,
        /// Why a pending job waits, in words.
        pub pend_reason: Option<String>,
        /// Why a pending job waits, as a code; `null` unless pending.
        #[cfg_attr(feature = "openapi", schema(schema_with = openapi::pend_code))]
        pub pend_code: Option<String>,
        /// Why a job ended as it did, in words.
        pub reason: Option<String>,
        /// How a job that ended, ended; `null` until it has.
        #[cfg_attr(feature = "openapi", schema(schema_with = openapi::job_result))]
        pub result: Option<String>,
        /// Wall-clock seconds it may run, not counting time suspended; `null`: no limit.
        pub time_limit_s: Option<u32>,
        pub host: Option<String>,
        pub attempt: u32,
        /// How many of its attempts started (at most `attempt`; an attempt ended before it
        /// started, such as a kill while it waited on its host, did not).
        pub runs: u32,
        pub exit_code: Option<i32>,
        pub signal: Option<i32>,
        /// RFC 3339, UTC.
        pub submit_time: String,
        pub start_time: Option<String>,
        pub end_time: Option<String>,
        /// Whether the job runs a script (`xce job ID --script` prints it); otherwise it runs
        /// `command`.
        pub script: bool,
        /// The file its stdout goes to on its host; `null` until it has a host. A relative one
        /// (a job that named no directory) is in the home of the account it runs as: its
        /// user's, or the worker's own on a worker that runs every job as itself.
        pub stdout: Option<String>,
        /// The file its stderr goes to: stdout's unless submitted with `--stderr`.
        pub stderr: Option<String>,
        /// `append` or `truncate` (`--open-mode`); `null`: truncated by the first attempt,
        /// appended to by later ones.
        pub open_mode: Option<String>,
        /// Held (`--hold`, `xce hold`): it starts only once released.
        pub held: bool,
        /// RFC 3339, UTC: it starts no sooner (`--begin`).
        pub begin_time: Option<String>,
        /// `[B:]SIG@SECONDS`: the signal it gets that long before its time limit (`--signal`).
        pub warn_signal: Option<String>,
        /// Whether it runs again when its host is lost (`--no-requeue`: it ends `node_fail`).
        pub requeue: bool,
        /// What it waits for, as submitted in Slurm's syntax (`afterok:12,after:13`);
        /// `null`: nothing.
        pub dependency: Option<String>,
        /// Where that dependency stands: `waiting`, `satisfied` or `never` (its
        /// `pend_reason` then says why); `null` without one.
        #[cfg_attr(feature = "openapi", schema(schema_with = openapi::dependency_state))]
        pub dependency_state: Option<String>,
        /// Whether it is cancelled once its dependency can never be met
        /// (`--kill-on-invalid-dep`).
        pub kill_on_invalid_dep: bool,
        /// The array a task belongs to (`ID` of `ID_IDX`); `null` for a job that is no task.
        pub array_job_id: Option<u64>,
        /// A task's index in its array; `null` for a job that is no task.
        pub array_task_id: Option<u32>,
        /// On an array's own record: its spec as submitted and how its tasks stand;
        /// `null` on any other job.
        pub array: Option<ArrayJson>,
        /// The account its use is charged to (`--account`, or the user's default where the
        /// cluster has accounts); `""`: none.
        pub account: String,
        /// RFC 3339, UTC: for a pending job whose start backfill reserved, when it starts at
        /// the latest (Slurm's `squeue --start`); `null` for any other job.
        pub expected_start: Option<String>,
        /// CPU time its attempts used, user and system, in seconds, as their hosts measured
        /// it; `null` until an attempt that reported it ended.
        pub cpu_time_s: Option<f64>,
        /// The most memory an attempt held resident at once, in MiB; `null` as `cpu_time_s`.
        pub max_rss_mb: Option<f64>,
        /// Whole seconds from its (last) start to its end, as `start_time` and `end_time` show
        /// them (as Slurm's `Elapsed`); `null` until it ended having started.
        pub elapsed_s: Option<u64>,
        /// Its attempts that started, oldest first (the latest 100): where, when, how each
        /// ended and what it used (from cluster version 13).
        pub attempts: Vec<AttemptJson>,
    }
}

shape! {
    /// One attempt of a job that started.
    pub struct AttemptJson {
        pub attempt: u32,
        pub host: String,
        /// RFC 3339, UTC.
        pub start_time: String,
        /// RFC 3339, UTC; `null` while it runs.
        pub end_time: Option<String>,
        pub exit_code: Option<i32>,
        pub signal: Option<i32>,
        /// Why it ended, where no code says (its host was lost, it could not start, it was
        /// requeued).
        pub reason: Option<String>,
        /// CPU time it used, user and system, in seconds; `null` when not measured.
        pub cpu_time_s: Option<f64>,
        /// The most memory it held resident at once, in MiB; `null` when not measured.
        pub max_rss_mb: Option<f64>,
    }
}

impl From<&crate::types::AttemptRun> for AttemptJson {
    fn from(a: &crate::types::AttemptRun) -> AttemptJson {
        let crate::types::AttemptRun {
            attempt,
            host,
            start_ms,
            end_ms,
            exit_code,
            signal,
            reason,
            usage,
        } = a;
        AttemptJson {
            attempt: *attempt,
            host: host.clone(),
            start_time: rfc3339(*start_ms),
            end_time: end_ms.map(rfc3339),
            exit_code: *exit_code,
            signal: *signal,
            reason: reason.clone(),
            cpu_time_s: usage.map(|u| cpu_seconds(&u)),
            max_rss_mb: usage.map(|u| rss_mb(&u)),
        }
    }
}

/// User and system CPU, in seconds.
fn cpu_seconds(u: &crate::types::Usage) -> f64 {
    u.cpu_user_ms.saturating_add(u.cpu_sys_ms) as f64 / 1000.0
}

/// The peak resident memory, in MiB.
fn rss_mb(u: &crate::types::Usage) -> f64 {
    u.max_rss_kb as f64 / 1024.0
}

shape! {
    /// An array's tasks: `spec` as submitted (`0-999%50`); `pending` not yet started,
    /// `running` placed, `done` ended.
    pub struct ArrayJson {
        pub spec: String,
        pub pending: u64,
        pub running: u64,
        pub done: u64,
    }
}

impl From<&Job> for JobJson {
    fn from(job: &Job) -> JobJson {
        // Every field is named, so a field added to a job fails to compile here until this
        // shape decides whether to show it (docs/checklists/new-job-field.md).
        let Job {
            id,
            spec,
            state,
            pend_reason,
            pend_code,
            reason,
            result,
            host,
            attempt,
            runs,
            exit_code,
            signal,
            submit_time_ms,
            start_time_ms,
            end_time_ms,
            // Where older workers put output: it is where `stdout` and `stderr` say.
            output_dir: _,
            // Said in words by the reason ("cancelled by alice").
            cancelled_by: _,
            dependency_state,
            array,
            array_task,
            expected_start_ms,
            usage,
            attempts,
        } = job;
        let JobSpec {
            name,
            user,
            queue,
            command,
            // Not shown: a job's environment may hold secrets.
            env: _,
            cwd,
            resources,
            priority,
            limits,
            script,
            // Shown resolved, as `stdout` and `stderr`.
            stdout: _,
            stderr: _,
            open_mode,
            hold,
            begin_time_ms,
            warn_signal,
            no_requeue,
            dependency,
            kill_on_invalid_dep,
            array: array_spec,
            account,
        } = spec;
        let output = host
            .as_deref()
            .and_then(|host| crate::output_path::of_job(spec, *id, array_task.as_ref(), host).ok());
        let (stdout, stderr) = match output {
            Some(o) => {
                let stdout = o.stdout.to_string_lossy().into_owned();
                let stderr = o
                    .stderr
                    .map_or_else(|| stdout.clone(), |e| e.to_string_lossy().into_owned());
                (Some(stdout), Some(stderr))
            }
            None => (None, None),
        };
        let Resources {
            cpus,
            mem_mb,
            // Shown as `gres` once jobs can ask for them (the resources issue).
            gres: _,
        } = resources;
        let Limits { time_limit_s } = limits;
        JobJson {
            id: *id,
            name: name.clone(),
            user: user.clone(),
            queue: queue.clone(),
            command: command.clone(),
            cwd: cwd.clone(),
            cpus: i32::try_from(*cpus).unwrap_or(i32::MAX),
            mem_mb: i64::try_from(*mem_mb).unwrap_or(i64::MAX),
            priority: *priority,
            state: state.name().to_string(),
            pend_reason: pend_reason.clone(),
            pend_code: pend_code.map(|c| c.name().to_string()),
            reason: reason.clone(),
            result: result.map(|r| r.name().to_string()),
            time_limit_s: *time_limit_s,
            host: host.clone(),
            attempt: *attempt,
            runs: *runs,
            exit_code: *exit_code,
            signal: *signal,
            submit_time: rfc3339(*submit_time_ms),
            start_time: start_time_ms.map(rfc3339),
            end_time: end_time_ms.map(rfc3339),
            script: script.is_some(),
            stdout,
            stderr,
            open_mode: open_mode.map(|m| m.name().to_string()),
            held: *hold,
            begin_time: begin_time_ms.map(rfc3339),
            warn_signal: warn_signal.map(|w| w.to_string()),
            requeue: !no_requeue,
            dependency: dependency.as_ref().map(ToString::to_string),
            dependency_state: dependency_state.map(|d| d.name().to_string()),
            kill_on_invalid_dep: kill_on_invalid_dep.unwrap_or(false),
            array_job_id: array_task.map(|t| t.array_id),
            array_task_id: array_task.map(|t| t.index),
            array: match (array, array_spec) {
                (Some(progress), Some(spec)) => Some(ArrayJson {
                    spec: spec.to_string(),
                    pending: progress.not_started(),
                    running: progress.running,
                    done: progress.done(),
                }),
                _ => None,
            },
            account: account.clone(),
            expected_start: expected_start_ms.map(rfc3339),
            cpu_time_s: usage.map(|u| cpu_seconds(&u)),
            max_rss_mb: usage.map(|u| rss_mb(&u)),
            attempts: attempts.iter().map(AttemptJson::from).collect(),
            elapsed_s: match (start_time_ms, end_time_ms) {
                (Some(start), Some(end)) => Some((end / 1000).saturating_sub(start / 1000)),
                _ => None,
            },
        }
    }
}

shape! {
    /// A queue, with its jobs pending and running.
    pub struct QueueJson {
        pub name: String,
        pub priority: i32,
        pub open: bool,
        pub active: bool,
        pub pending: u32,
        pub running: u32,
        /// The time limit, in seconds, a job that asks for none gets in this queue (`null`:
        /// none).
        pub default_time_s: Option<u32>,
        /// The longest time limit, in seconds, a job of this queue may ask for (`null`: the
        /// cluster's).
        pub max_time_s: Option<u32>,
    }
}

impl From<&Queue> for QueueJson {
    fn from(queue: &Queue) -> QueueJson {
        // Destructured whole: a new queue field fails to compile here until it is shown.
        let Queue {
            name,
            priority,
            open,
            active,
            pending,
            running,
            default_time_s,
            max_time_s,
        } = queue;
        QueueJson {
            name: name.clone(),
            priority: *priority,
            open: *open,
            active: *active,
            pending: *pending,
            running: *running,
            default_time_s: *default_time_s,
            max_time_s: *max_time_s,
        }
    }
}

shape! {
    /// A worker host and its load.
    pub struct HostJson {
        pub name: String,
        pub cpus: u32,
        pub mem_mb: u64,
        /// `ok`, `closed` or `unavailable`.
        pub state: String,
        pub running: u32,
        pub cpus_used: u32,
        pub mem_mb_used: u64,
    }
}

impl From<&Host> for HostJson {
    fn from(host: &Host) -> HostJson {
        // Destructured whole: a new host field fails to compile here until it is shown (or
        // named as deliberately not shown, like `job_users`, which is the worker's business).
        let Host {
            name,
            capacity,
            state,
            running,
            used,
            job_users: _,
            // The scheduler's business (whether it may send the host jobs ahead of its slots).
            queues_starts: _,
        } = host;
        HostJson {
            name: name.clone(),
            cpus: capacity.cpus,
            mem_mb: capacity.mem_mb,
            state: state.name().to_string(),
            running: *running,
            cpus_used: used.cpus,
            mem_mb_used: used.mem_mb,
        }
    }
}

shape! {
    /// A controller candidate and what it is now.
    pub struct MemberJson {
        pub name: String,
        pub addr: String,
        /// `primary`, `standby` or `unreachable`.
        pub role: String,
        /// The newest cluster version its build runs; `null` while the primary has not heard.
        pub version: Option<u32>,
    }
}

shape! {
    /// A scheduler the primary heard from; `active` holds the lease.
    pub struct SchedulerJson {
        pub name: String,
        pub active: bool,
    }
}

shape! {
    /// The cluster: who is primary, in which term, and every member and scheduler.
    pub struct ClusterJson {
        pub primary: Option<String>,
        pub term: u64,
        pub members: Vec<MemberJson>,
        pub schedulers: Vec<SchedulerJson>,
        /// The cluster version in force; raised once every member runs a newer build.
        pub active_version: u32,
        /// The version the primary's configuration holds the cluster at; `null`: none.
        pub hold_version: Option<u32>,
    }
}

impl From<&ClusterInfo> for ClusterJson {
    fn from(info: &ClusterInfo) -> ClusterJson {
        // Destructured whole: a new field fails to compile here until it is shown.
        let ClusterInfo {
            primary,
            term,
            members,
            schedulers,
            active_version,
            hold_version,
        } = info;
        ClusterJson {
            primary: primary.clone(),
            term: *term,
            members: members.iter().map(MemberJson::from).collect(),
            schedulers: schedulers.iter().map(SchedulerJson::from).collect(),
            active_version: *active_version,
            hold_version: *hold_version,
        }
    }
}

impl From<&Member> for MemberJson {
    fn from(member: &Member) -> MemberJson {
        let Member {
            name,
            addr,
            role,
            version,
        } = member;
        MemberJson {
            name: name.clone(),
            addr: addr.clone(),
            role: role.name().to_string(),
            version: *version,
        }
    }
}

impl From<&SchedulerInfo> for SchedulerJson {
    fn from(scheduler: &SchedulerInfo) -> SchedulerJson {
        let SchedulerInfo { name, active } = scheduler;
        SchedulerJson {
            name: name.clone(),
            active: *active,
        }
    }
}

shape! {
    /// A user token as listed: never its secret.
    pub struct TokenJson {
        pub id: String,
        pub user: String,
        pub role: String,
        pub created: String,
        /// `null`: never.
        pub expires: Option<String>,
    }
}

impl From<&crate::types::TokenInfo> for TokenJson {
    fn from(t: &crate::types::TokenInfo) -> TokenJson {
        let crate::types::TokenInfo {
            id,
            user,
            role,
            created_ms,
            expires_ms,
        } = t;
        TokenJson {
            id: id.clone(),
            user: user.clone(),
            role: role.name().to_string(),
            created: rfc3339(*created_ms),
            expires: expires_ms.map(rfc3339),
        }
    }
}

shape! {
    /// What went wrong: `code` is a status name (`invalid`, `noEnt`, `perm`, ...) or
    /// `clusterNotReady`.
    pub struct ErrorBody {
        pub code: String,
        pub message: String,
    }
}

shape! {
    /// Every error, from the CLI (`-o json`) and the HTTP API alike.
    pub struct ErrorJson {
        pub error: ErrorBody,
    }
}

impl ErrorJson {
    /// An error with its code and message.
    pub fn new(code: &str, message: &str) -> ErrorJson {
        ErrorJson {
            error: ErrorBody {
                code: code.to_string(),
                message: message.to_string(),
            },
        }
    }
}

/// One item of an event stream (`xce -o json events`, and the data of the apiserver's
/// server-sent events): every item has `kind` (`job`, `host`, `queue` or `resync`); a job
/// event also `id`, `state`, `host`, `attempt`; a host event `name` and `state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EventJson {
    /// A job was created, or its state, host, attempt or reasons changed.
    Job {
        /// The log index of the change.
        index: u64,
        id: u64,
        state: String,
        host: Option<String>,
        attempt: u32,
        queue: String,
        user: String,
        pend_reason: Option<String>,
        pend_code: Option<String>,
        reason: Option<String>,
        result: Option<String>,
        /// A task's array and index (`ID_IDX`); null for a job that is no task.
        #[serde(default)]
        array_job_id: Option<u64>,
        #[serde(default)]
        array_task_id: Option<u32>,
    },
    /// A host registered, or its state changed.
    Host {
        index: u64,
        name: String,
        state: String,
    },
    /// A queue was defined, or its priority or flags changed.
    Queue {
        index: u64,
        name: String,
        priority: i32,
        open: bool,
        active: bool,
    },
    /// Events may have been missed (a new primary, a dropped subscription, a gap): re-read
    /// state.
    Resync { reason: String },
}

impl From<&crate::events::StreamItem> for EventJson {
    fn from(item: &crate::events::StreamItem) -> EventJson {
        use crate::events::StreamItem;
        use crate::types::ClusterEvent;
        match item {
            StreamItem::Resync { reason } => EventJson::Resync {
                reason: reason.clone(),
            },
            StreamItem::Event(ClusterEvent::Job {
                index,
                id,
                state,
                host,
                attempt,
                queue,
                user,
                pend_reason,
                pend_code,
                reason,
                result,
                task,
            }) => EventJson::Job {
                index: *index,
                id: *id,
                state: state.name().to_string(),
                host: host.clone(),
                attempt: *attempt,
                queue: queue.clone(),
                user: user.clone(),
                pend_reason: pend_reason.clone(),
                pend_code: pend_code.map(|c| c.name().to_string()),
                reason: reason.clone(),
                result: result.map(|r| r.name().to_string()),
                array_job_id: task.map(|(array, _)| array),
                array_task_id: task.map(|(_, index)| index),
            },
            StreamItem::Event(ClusterEvent::Host { index, name, state }) => EventJson::Host {
                index: *index,
                name: name.clone(),
                state: state.name().to_string(),
            },
            StreamItem::Event(ClusterEvent::Queue {
                index,
                name,
                priority,
                open,
                active,
            }) => EventJson::Queue {
                index: *index,
                name: name.clone(),
                priority: *priority,
                open: *open,
                active: *active,
            },
        }
    }
}

/// The OpenAPI schemas of the fields whose values are a domain enum's names: generated from
/// the enum, so the document (and the web view, which reads its lists from it) cannot drift.
#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

    use crate::types::{DependencyState, JobResult, JobState, PendCode};

    fn names(names: &[&str], nullable: bool) -> Object {
        let types = if nullable {
            SchemaType::from_iter([Type::String, Type::Null])
        } else {
            SchemaType::Type(Type::String)
        };
        let mut values: Vec<Option<String>> = names.iter().map(|n| Some(n.to_string())).collect();
        if nullable {
            values.push(None);
        }
        ObjectBuilder::new()
            .schema_type(types)
            .enum_values(Some(values))
            .build()
    }

    pub fn job_state() -> Object {
        names(JobState::NAMES, false)
    }

    pub fn pend_code() -> Object {
        names(PendCode::NAMES, true)
    }

    pub fn job_result() -> Object {
        names(JobResult::NAMES, true)
    }

    pub fn dependency_state() -> Object {
        names(DependencyState::NAMES, true)
    }
}

/// A shape as a JSON value (they hold only strings, numbers, booleans and lists, so this
/// cannot fail).
fn value<T: Serialize>(shape: &T) -> Value {
    serde_json::to_value(shape).unwrap_or(Value::Null)
}

/// A job in the contract shape.
pub fn job(job: &Job) -> Value {
    value(&JobJson::from(job))
}

/// A queue in the contract shape.
pub fn queue(queue: &Queue) -> Value {
    value(&QueueJson::from(queue))
}

/// A host in the contract shape.
pub fn host(host: &Host) -> Value {
    value(&HostJson::from(host))
}

/// The cluster in the contract shape.
pub fn cluster(info: &ClusterInfo) -> Value {
    value(&ClusterJson::from(info))
}

/// A user token as listed.
pub fn token_info(t: &crate::types::TokenInfo) -> Value {
    value(&TokenJson::from(t))
}

/// An error in the contract shape.
pub fn error(code: &str, message: &str) -> Value {
    value(&ErrorJson::new(code, message))
}

/// One item of an event stream in the `xce -o json events` shape.
pub fn stream_item(item: &crate::events::StreamItem) -> Value {
    value(&EventJson::from(item))
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with second precision
/// (`2026-11-30T10:00:00Z`), without a calendar dependency.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_032_800_000), "2026-11-30T10:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_704_067_199_999), "2023-12-31T23:59:59Z");
    }
}
