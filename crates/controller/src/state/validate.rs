//! Checks on what clients send that need no state: bounded sizes and well-formed names. The
//! service runs them before a request costs a log entry; `apply` runs them again, so that the
//! state machine stands alone.

use xce_client::types::{JobEnd, JobSpec, TaskOp};

use super::users::{validate_user_name, MAX_TOKEN_TTL_MS, TOKEN_ROLES};
use super::Command;

/// Largest name-like field (job name, user, queue), in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest working directory, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest command line or environment, in bytes. Bounded specs keep every Raft batch and
/// every message far below capnp's message limit.
pub const MAX_LIST_BYTES: usize = 64 * 1024;
/// What each element of a list counts beyond its text: the wire's pointer to it. Without it a
/// command of millions of empty arguments would pass as zero bytes.
pub const LIST_ELEMENT_BYTES: usize = xce_client::export::ELEMENT_BYTES;

/// Largest reason a worker may give for an attempt that never ran, in bytes.
pub const MAX_REASON_BYTES: usize = 4096;
/// Most attempts a worker may say it holds at a join: far more than any host runs at once.
pub const MAX_HELD: usize = 10_000;
/// Most placements (or pending reasons) in one scheduler request: big enough that placement
/// is not one Raft round per job, small enough that a batch stays far below message limits.
pub const MAX_BATCH: usize = 4096;
/// Most bytes of a job script: the most `jobs.max_script_bytes` may allow, so that a submit
/// always fits a message.
pub const MAX_SCRIPT_BYTES: usize = 16 << 20;
/// Longest pending reason, in bytes.
pub const MAX_PEND_REASON_BYTES: usize = 512;
/// The scheduler lease's shortest and longest time to live.
pub const SCHEDULER_TTL_MS: std::ops::RangeInclusive<u32> = 200..=60_000;

/// Refuses a field longer than `max` bytes, naming it.
pub fn check_size(field: &str, len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{field}: {len} bytes, at most {max} allowed"));
    }
    Ok(())
}

/// Refuses a scheduler request of more than [`MAX_BATCH`] items, naming the field.
fn check_count(field: &str, len: usize) -> Result<(), String> {
    if len > MAX_BATCH {
        return Err(format!("{field}: {len} items, at most {MAX_BATCH} allowed"));
    }
    Ok(())
}

/// The most tasks one array may hold, whatever the cluster's `jobs.max_array_tasks` (which
/// the service checks first): an index is at most 2^31 - 1.
pub const MAX_ARRAY_TASKS: u64 = 1 << 31;

/// The most conditions one job's dependency may hold (each names a job the apply looks up).
pub const MAX_DEPENDENCY_TERMS: usize = 1024;

/// Checks a job spec; the error names the field.
pub fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    check_size("name", spec.name.len(), MAX_NAME_BYTES)?;
    check_size("user", spec.user.len(), MAX_NAME_BYTES)?;
    // Empty only while authentication is off; a name is what a host's account can be.
    if !spec.user.is_empty() {
        validate_user_name(&spec.user)?;
    }
    check_size("queue", spec.queue.len(), MAX_NAME_BYTES)?;
    if !spec.account.is_empty() && (spec.account.len() > 64 || !name_chars_ok(&spec.account)) {
        return Err(format!(
            "account: {:?} must be 1 to 64 letters, digits, '-', '_' or '.'",
            spec.account
        ));
    }
    check_size("cwd", spec.cwd.len(), MAX_PATH_BYTES)?;
    check_size(
        "command",
        spec.command
            .iter()
            .map(|a| a.len() + LIST_ELEMENT_BYTES)
            .sum(),
        MAX_LIST_BYTES,
    )?;
    // Below cluster version 8 at most `export::MAX_ENV_BYTES` (refused on the way down to
    // format 7, by `fit_format`); the service holds it to `jobs.max_script_bytes` with the
    // script.
    check_size("env", xce_client::export::size(&spec.env), MAX_SCRIPT_BYTES)?;
    // With a script, the command is the script's arguments (any, or none).
    match spec.command.first() {
        None if spec.script.is_none() => return Err("command: must not be empty".into()),
        Some(arg0) if spec.script.is_none() && arg0.trim().is_empty() => {
            return Err("command: the program name must not be empty".into())
        }
        _ => {}
    }
    validate_batch_fields(spec)?;
    if let Some(dependency) = &spec.dependency {
        check_size("dependency", dependency.to_string().len(), MAX_LIST_BYTES)?;
        let terms = dependency.terms().len();
        if terms > MAX_DEPENDENCY_TERMS {
            return Err(format!(
                "dependency: {terms} conditions, at most {MAX_DEPENDENCY_TERMS}"
            ));
        }
    }
    if let Some(array) = &spec.array {
        // Its text is what travels and is stored: runs, however many tasks they hold.
        check_size("array", array.to_string().len(), MAX_PATH_BYTES)?;
        if array.tasks.is_empty() || array.throttle == Some(0) {
            return Err("array: no tasks, or a throttle of 0".into());
        }
        if array.tasks.len() > MAX_ARRAY_TASKS {
            return Err(format!(
                "array: {} tasks, at most {MAX_ARRAY_TASKS}",
                array.tasks.len()
            ));
        }
    }
    validate_gres("gres", &spec.resources)?;
    if let Some((k, _)) = spec
        .env
        .iter()
        .find(|(k, _)| k.is_empty() || k.contains('='))
    {
        return Err(format!("env: invalid variable name {k:?}"));
    }
    Ok(())
}

/// The fields of a batch job: output patterns, the warning signal.
fn validate_batch_fields(spec: &JobSpec) -> Result<(), String> {
    for (field, pattern) in [("stdout", &spec.stdout), ("stderr", &spec.stderr)] {
        if let Some(pattern) = pattern {
            check_size(field, pattern.len(), MAX_PATH_BYTES)?;
            xce_client::output_path::check(pattern).map_err(|e| format!("{field}: {e}"))?;
        }
    }
    if let Some(warning) = &spec.warn_signal {
        use xce_client::signals::{MAX_SIGNAL, MAX_WARNING_S};
        if !(1..=MAX_SIGNAL).contains(&warning.signal) {
            return Err(format!(
                "signal: {} is not a signal number (1 to {MAX_SIGNAL})",
                warning.signal
            ));
        }
        if warning.before_s > MAX_WARNING_S {
            return Err(format!(
                "signal: {} s before the limit is over the {MAX_WARNING_S} s allowed",
                warning.before_s
            ));
        }
    }
    Ok(())
}

/// Most generic resources a job may ask for, or a host offer, by name.
pub const MAX_GRES: usize = 64;

/// Checks the generic resources of an amount: bounded, and each name letters, digits, `-`,
/// `_`, `.` and a `:` before a type (`gpu:a100`).
pub fn validate_gres(field: &str, resources: &xce_client::types::Resources) -> Result<(), String> {
    if resources.gres.len() > MAX_GRES {
        return Err(format!(
            "{field}: {} resources, at most {MAX_GRES} allowed",
            resources.gres.len()
        ));
    }
    for name in resources.gres.keys() {
        check_size(field, name.len(), MAX_NAME_BYTES)?;
        let (base, kind) = name.split_once(':').unwrap_or((name, ""));
        if base.is_empty() || !name_chars_ok(base) || !name_chars_ok(kind) {
            return Err(format!(
                "{field}: {name:?} is not a resource name (letters, digits, '-', '_', '.', and ':TYPE')"
            ));
        }
    }
    Ok(())
}

/// The most runs a command's task list (`ID_[1,3,5-7]`) holds.
pub const MAX_TASK_RUNS: usize = 1_000;

/// The most tasks one stepped run of a task list names: such a run is taken index by index.
pub const MAX_STEPPED_TASKS: u64 = 1_000_000;

/// A task list a command names is bounded in runs and, where stepped, in tasks.
fn validate_tasks(tasks: &xce_client::array::TaskSet) -> Result<(), String> {
    let runs = tasks.runs().count();
    if runs > MAX_TASK_RUNS {
        return Err(format!("tasks: {runs} ranges, at most {MAX_TASK_RUNS}"));
    }
    if tasks.is_empty() {
        return Err("tasks: none named".to_string());
    }
    match tasks
        .runs()
        .find(|r| r.step > 1 && r.len() > MAX_STEPPED_TASKS)
    {
        Some(run) => Err(format!(
            "tasks: {run} names {} tasks, at most {MAX_STEPPED_TASKS} in a stepped range",
            run.len()
        )),
        None => Ok(()),
    }
}

pub(super) use xce_client::types::name_chars_ok;
pub use xce_client::types::validate_host_name;

/// Checks every field of a command a client proposes, before it can reach the log: each one
/// is bounded, so no entry (and no batch of them) nears a message limit a follower would
/// refuse. The error names the field and never echoes it.
pub fn validate_command(cmd: &Command) -> Result<(), String> {
    match cmd {
        Command::Submit { spec, script, .. } => {
            validate_spec(spec)?;
            // The script and the environment share one budget.
            let env = xce_client::export::size(&spec.env);
            let body = script.as_ref().map_or(0, |b| b.len());
            check_size("script and env", body + env, MAX_SCRIPT_BYTES)
        }
        Command::UpdateJob { by, changes, .. } => {
            by.as_deref().map_or(Ok(()), validate_user_name)?;
            check_size(
                "name",
                changes.name.as_ref().map_or(0, String::len),
                MAX_NAME_BYTES,
            )?;
            check_size(
                "queue",
                changes.queue.as_ref().map_or(0, String::len),
                MAX_NAME_BYTES,
            )
        }
        Command::SignalJob { by, .. } => by.as_deref().map_or(Ok(()), validate_user_name),
        Command::ControlTasks {
            tasks,
            by,
            actor,
            op,
            ..
        } => {
            by.as_deref().map_or(Ok(()), validate_user_name)?;
            check_size(
                "actor",
                actor.as_ref().map_or(0, String::len),
                MAX_NAME_BYTES,
            )?;
            if let Some(tasks) = tasks {
                validate_tasks(tasks)?;
            }
            if let TaskOp::Update { changes, .. } = op {
                check_size(
                    "name",
                    changes.name.as_ref().map_or(0, String::len),
                    MAX_NAME_BYTES,
                )?;
                check_size(
                    "queue",
                    changes.queue.as_ref().map_or(0, String::len),
                    MAX_NAME_BYTES,
                )?;
            }
            Ok(())
        }
        Command::ControlQueue { name, .. } => check_size("queue", name.len(), MAX_NAME_BYTES),
        Command::ControlHost { name, .. }
        | Command::SetHostAvailable { name, .. }
        | Command::HostLost { name } => check_size("host", name.len(), MAX_NAME_BYTES),
        Command::Dispatch { host, .. } | Command::JobStarted { host, .. } => {
            check_size("host", host.len(), MAX_NAME_BYTES)
        }
        Command::JobFinished { host, end, .. } => {
            check_size("host", host.len(), MAX_NAME_BYTES)?;
            match end {
                JobEnd::Failed(reason) => check_size("end.failed", reason.len(), MAX_REASON_BYTES),
                JobEnd::Exit(_)
                | JobEnd::Signal(_)
                | JobEnd::OutOfMemory
                | JobEnd::TimedOut { .. } => Ok(()),
            }
        }
        Command::RegisterHost { host, held, .. } => {
            check_size("host.name", host.name.len(), MAX_NAME_BYTES)?;
            validate_host_name(&host.name)?;
            check_size("host.spool_dir", host.spool_dir.len(), MAX_PATH_BYTES)?;
            validate_gres("host.gres", &host.resources)?;
            if held.len() > MAX_HELD {
                return Err(format!(
                    "held: {} attempts, at most {MAX_HELD} allowed",
                    held.len()
                ));
            }
            Ok(())
        }
        Command::ControlJob { by, actor, .. } => {
            by.as_deref().map_or(Ok(()), validate_user_name)?;
            check_size(
                "actor",
                actor.as_ref().map_or(0, String::len),
                MAX_NAME_BYTES,
            )
        }
        Command::CreateToken {
            id,
            user,
            role,
            expires_in_ms,
            ..
        } => {
            validate_token_id(id)?;
            validate_user_name(user)?;
            if !TOKEN_ROLES.contains(role) {
                return Err(format!(
                    "role: a token's role is user, operator or admin, not {role} (a daemon \
                     proves itself with a certificate)"
                ));
            }
            match expires_in_ms {
                Some(ms) if *ms == 0 || *ms > MAX_TOKEN_TTL_MS => Err(format!(
                    "expires: {ms} ms is outside 1..={MAX_TOKEN_TTL_MS} ms (ten years)"
                )),
                _ => Ok(()),
            }
        }
        Command::RevokeToken { id, .. } => validate_token_id(id),
        // The whole state, checked as a received snapshot is (its size was bounded as bytes).
        Command::Restore { state, .. } => super::State::try_from_record((**state).clone())
            .map(drop)
            .map_err(|e| format!("backup: {e}")),
        // What needs no state; the rest (new ids, below the counter) is checked at apply.
        Command::RestoreJobs { jobs, .. } if jobs.is_empty() => {
            Err("a backup part holds no jobs".into())
        }
        Command::RestoreJobs { .. } => Ok(()),
        Command::AcquireScheduler { name, ttl_ms, .. } => {
            validate_host_name(name).map_err(|e| e.replacen("host.name", "name", 1))?;
            if *ttl_ms != 0 && !SCHEDULER_TTL_MS.contains(ttl_ms) {
                return Err(format!(
                    "ttl_ms: {ttl_ms} is outside {}..={} (0 releases the lease)",
                    SCHEDULER_TTL_MS.start(),
                    SCHEDULER_TTL_MS.end()
                ));
            }
            Ok(())
        }
        Command::DispatchBatch { placements, .. } => {
            check_count("placements", placements.len())?;
            placements
                .iter()
                .try_for_each(|p| check_size("placements.host", p.host.len(), MAX_NAME_BYTES))
        }
        Command::SetPendReasons { reasons, .. } => {
            check_count("reasons", reasons.len())?;
            reasons.iter().try_for_each(|(_, r)| {
                check_size("reasons.reason", r.text.len(), MAX_PEND_REASON_BYTES)
            })
        }
        Command::Barrier { queues, .. } => queues
            .iter()
            .try_for_each(|q| check_size("queue", q.name.len(), MAX_NAME_BYTES)),
        Command::RaiseVersion { .. } => Ok(()),
        Command::RetireJobs { ids } if ids.len() > super::retire::MAX_RETIRE_BATCH => Err(format!(
            "retired jobs: {} ids, at most {} allowed",
            ids.len(),
            super::retire::MAX_RETIRE_BATCH
        )),
        Command::RetireJobs { .. } => Ok(()),
    }
}

/// A token id as `xce_client::tokens` makes them.
pub fn validate_token_id(id: &str) -> Result<(), String> {
    if xce_client::tokens::is_id(id) {
        Ok(())
    } else {
        Err(format!(
            "id: {id:?} is not a token id (16 lowercase hex digits)"
        ))
    }
}

#[cfg(test)]
mod command_tests {
    use super::*;
    use xce_client::types::{QueueAction, RequestToken};

    #[test]
    fn an_oversized_queue_name_is_refused_without_being_echoed() {
        let cmd = Command::ControlQueue {
            token: RequestToken::random(),
            name: "q".repeat(40 << 20),
            action: QueueAction::Close,
        };
        let e = validate_command(&cmd).unwrap_err();
        assert_eq!(e, "queue: 41943040 bytes, at most 256 allowed");
    }

    #[test]
    fn a_command_of_countless_empty_arguments_is_refused() {
        let mut spec = JobSpec {
            command: vec!["true".into()],
            ..JobSpec::default()
        };
        spec.command
            .extend(std::iter::repeat_n(String::new(), 1_000_000));
        let e = validate_spec(&spec).unwrap_err();
        assert_eq!(e, "command: 8000012 bytes, at most 65536 allowed");
        // At the limit exactly, arguments and their pointers together.
        spec.command = vec!["true".into(), "a".repeat(MAX_LIST_BYTES - 4 - 16)];
        assert_eq!(validate_spec(&spec), Ok(()));
    }

    #[test]
    fn a_failure_reason_is_bounded() {
        let cmd = Command::JobFinished {
            token: RequestToken::random(),
            id: 1,
            attempt: 1,
            host: "w1".into(),
            end: JobEnd::Failed("x".repeat(MAX_REASON_BYTES + 1)),
            usage: None,
        };
        assert!(validate_command(&cmd)
            .unwrap_err()
            .starts_with("end.failed:"));
    }

    #[test]
    fn a_token_names_a_valid_id_user_role_and_lifetime() {
        let good = || Command::CreateToken {
            token: RequestToken::random(),
            id: "0123456789abcdef".into(),
            user: "alice".into(),
            role: xce_client::types::Role::User,
            hash: [0; 32],
            expires_in_ms: Some(1000),
        };
        assert_eq!(validate_command(&good()), Ok(()));
        let with = |f: fn(&mut Command)| {
            let mut cmd = good();
            f(&mut cmd);
            validate_command(&cmd).unwrap_err()
        };
        let field = |e: String, name: &str| assert!(e.starts_with(name), "{e}");
        field(
            with(|c| {
                if let Command::CreateToken { id, .. } = c {
                    *id = "x".repeat(16);
                }
            }),
            "id:",
        );
        field(
            with(|c| {
                if let Command::CreateToken { user, .. } = c {
                    *user = "a b".into();
                }
            }),
            "user:",
        );
        field(
            with(|c| {
                if let Command::CreateToken { role, .. } = c {
                    *role = xce_client::types::Role::Controller;
                }
            }),
            "role:",
        );
        for ttl in [0, MAX_TOKEN_TTL_MS + 1] {
            let mut cmd = good();
            if let Command::CreateToken { expires_in_ms, .. } = &mut cmd {
                *expires_in_ms = Some(ttl);
            }
            field(validate_command(&cmd).unwrap_err(), "expires:");
        }
        let revoke = Command::RevokeToken {
            token: RequestToken::random(),
            id: "not-an-id".into(),
        };
        field(validate_command(&revoke).unwrap_err(), "id:");
    }
}
