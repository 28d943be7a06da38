//! Conversions between the domain types and their Cap'n Proto form, used by both sides of
//! every connection (the client's operations and the controller's service).

use capnp::Error;
use xce_proto::xce_capnp as w;
use xce_proto::Status;

use crate::history::{HistoryFilter, TimeField};
use crate::types::{
    ArrayProgress, ArrayTask, AttemptRun, ClusterEvent, ClusterInfo, DependencyState, EventFilter,
    EventKind, HeldJob, HeldPhase, Host, HostAction, HostAttributes, HostState, Job, JobAction,
    JobChanges, JobEnd, JobFilter, JobOrder, JobResult, JobSignal, JobSpec, JobState, JobUsers,
    Limits, Member, MemberRole, OpenMode, PendCode, PendReason, Placement, Queue, QueueAction,
    Refusal, RequestToken, Resources, Role, SchedulerInfo, ScriptId, TaskOp, TokenInfo, Warning,
};

/// The common header of every reply, Rust side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    pub status: Status,
    pub message: String,
    /// The primary's client address, when the answering node knows it.
    pub redirect: Option<(String, u16)>,
    /// The primary's name, with `redirect` (see [`crate::Client`]: a client uses its own
    /// address for a candidate of that name).
    pub redirect_name: Option<String>,
}

impl ReplyHeader {
    /// A plain `ok` header.
    pub fn ok() -> Self {
        Self::status(Status::Ok, "")
    }

    /// A header with a status and a human message.
    pub fn status(status: Status, message: impl Into<String>) -> Self {
        ReplyHeader {
            status,
            message: message.into(),
            redirect: None,
            redirect_name: None,
        }
    }
}

/// A capnp text as an owned string; text that is not UTF-8 is an error, not replaced.
pub fn text(r: capnp::text::Reader<'_>) -> Result<String, Error> {
    Ok(r.to_str()?.to_string())
}

fn opt_text(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn opt_ms(ms: u64) -> Option<u64> {
    (ms != 0).then_some(ms)
}

/// `From` both ways between a domain enum and its capnp mirror, whose variants have the same
/// names: every enum conversion is written once, here.
macro_rules! mirror_enum {
    ($($domain:ident <=> $wire:ident { $($variant:ident),+ $(,)? })+) => {$(
        impl From<$domain> for w::$wire {
            fn from(v: $domain) -> Self {
                match v { $($domain::$variant => w::$wire::$variant),+ }
            }
        }

        impl From<w::$wire> for $domain {
            fn from(v: w::$wire) -> Self {
                match v { $(w::$wire::$variant => $domain::$variant),+ }
            }
        }
    )+};
}

/// An optional domain enum as its capnp mirror, whose first variant `none` is `None`.
trait ToWireOption<W> {
    fn to_wire(self) -> W;
}

/// A capnp mirror with a `none` variant as an optional domain enum.
trait FromWireOption<D> {
    fn into_domain(self) -> Option<D>;
}

/// Both conversions between `Option` of a domain enum and its capnp mirror, whose first
/// variant `none` is `None` and whose others have the domain's names.
macro_rules! mirror_optional_enum {
    ($($domain:ident <=> $wire:ident { $($variant:ident),+ $(,)? })+) => {$(
        impl ToWireOption<w::$wire> for Option<$domain> {
            fn to_wire(self) -> w::$wire {
                match self { None => w::$wire::None, $(Some($domain::$variant) => w::$wire::$variant),+ }
            }
        }

        impl FromWireOption<$domain> for w::$wire {
            fn into_domain(self) -> Option<$domain> {
                match self { w::$wire::None => None, $(w::$wire::$variant => Some($domain::$variant)),+ }
            }
        }
    )+};
}

mirror_optional_enum! {
    PendCode <=> PendCode {
        Resources, Priority, NoScheduler, QueueInactive, TooBig, Held, BeginTime, Dependency, Limit,
    }
    JobResult <=> JobResult { Completed, Failed, Cancelled, Timeout, OutOfMemory, NodeFail }
    OpenMode <=> OpenMode { Append, Truncate }
    DependencyState <=> DependencyState { Waiting, Satisfied, Never }
}

/// An optional enum from the wire: a value a newer peer added reads as `None`.
fn opt_enum<W: FromWireOption<D>, D>(r: Result<W, capnp::NotInSchema>) -> Option<D> {
    r.ok().and_then(FromWireOption::into_domain)
}

mirror_enum! {
    JobState <=> JobState { Pending, Dispatched, Running, Suspended, Done, Exited }
    JobAction <=> JobAction { Kill, Suspend, Resume, Requeue }
    QueueAction <=> QueueAction { Open, Close, Activate, Inactivate }
    HostAction <=> HostAction { Open, Close }
    HostState <=> HostState { Ok, Closed, Unavailable }
    MemberRole <=> MemberRole { Primary, Standby, Unreachable }
    Role <=> Role { User, Worker, Scheduler, Apiserver, Operator, Admin, Controller, Login }
    JobSignal <=> JobSignal { Kill, Suspend, Resume }
    HeldPhase <=> HeldPhase { Running, Suspended, Finished }
    EventKind <=> EventKind { Job, Host, Queue }
}

/// Writes a reply header.
pub fn write_header(mut b: w::reply_header::Builder<'_>, h: &ReplyHeader) {
    b.set_status(h.status.into());
    b.set_message(h.message.as_str());
    if let Some((host, port)) = &h.redirect {
        b.set_redirect_host(host.as_str());
        b.set_redirect_port(*port);
    }
    if let Some(name) = &h.redirect_name {
        b.set_redirect_name(name.as_str());
    }
}

/// Reads a reply header; an unknown status from a newer peer reads as `internal`.
pub fn read_header(r: w::reply_header::Reader<'_>) -> Result<ReplyHeader, Error> {
    let status = r.get_status().map(Status::from).unwrap_or(Status::Internal);
    let host = text(r.get_redirect_host()?)?;
    let port = r.get_redirect_port();
    Ok(ReplyHeader {
        status,
        message: text(r.get_message()?)?,
        redirect: (!host.is_empty() && port != 0).then_some((host, port)),
        redirect_name: opt_text(text(r.get_redirect_name()?)?),
    })
}

/// Writes a request token.
pub fn write_token(mut b: w::token::Builder<'_>, t: RequestToken) {
    b.set_hi((t.0 >> 64) as u64);
    b.set_lo(t.0 as u64);
}

/// Reads a request token.
pub fn read_token(r: w::token::Reader<'_>) -> RequestToken {
    RequestToken((u128::from(r.get_hi()) << 64) | u128::from(r.get_lo()))
}

/// Writes a job spec.
pub fn write_spec(mut b: w::job_spec::Builder<'_>, s: &JobSpec) {
    b.set_name(s.name.as_str());
    b.set_user(s.user.as_str());
    b.set_queue(s.queue.as_str());
    let mut cmd = b.reborrow().init_command(s.command.len() as u32);
    for (i, arg) in s.command.iter().enumerate() {
        cmd.set(i as u32, arg.as_str());
    }
    let mut env = b.reborrow().init_env(s.env.len() as u32);
    for (i, (k, v)) in s.env.iter().enumerate() {
        let mut e = env.reborrow().get(i as u32);
        e.set_name(k.as_str());
        e.set_value(v.as_str());
    }
    b.set_cwd(s.cwd.as_str());
    b.set_cpus(i32::try_from(s.resources.cpus).unwrap_or(i32::MAX));
    b.set_mem_mb(i64::try_from(s.resources.mem_mb).unwrap_or(i64::MAX));
    write_counts(
        b.reborrow().init_gres(s.resources.gres.len() as u32),
        &s.resources.gres,
    );
    b.set_priority(s.priority);
    write_limits(b.reborrow().init_limits(), &s.limits);
    b.set_script_id(s.script.as_ref().map_or(&[][..], |id| &id.0[..]));
    b.set_stdout(s.stdout.as_deref().unwrap_or(""));
    b.set_stderr(s.stderr.as_deref().unwrap_or(""));
    b.set_open_mode(s.open_mode.to_wire());
    b.set_hold(s.hold);
    b.set_begin_time_ms(s.begin_time_ms.unwrap_or(0));
    if let Some(warning) = &s.warn_signal {
        let mut wb = b.reborrow().init_warning();
        wb.set_signal(warning.signal);
        wb.set_before_s(warning.before_s);
        wb.set_leader_only(warning.leader_only);
    }
    b.set_no_requeue(s.no_requeue);
    if let Some(dependency) = &s.dependency {
        b.set_dependency(dependency.to_string());
    }
    if let Some(kill) = s.kill_on_invalid_dep {
        b.set_has_kill_on_invalid_dep(true);
        b.set_kill_on_invalid_dep(kill);
    }
    if let Some(array) = &s.array {
        b.set_array(array.to_string());
    }
    b.set_account(s.account.as_str());
}

/// Reads a script id: empty is none; any other length is no SHA-256.
fn read_script_id(data: &[u8]) -> Result<Option<ScriptId>, Error> {
    match data.len() {
        0 => Ok(None),
        32 => {
            let mut id = [0; 32];
            id.copy_from_slice(data);
            Ok(Some(ScriptId(id)))
        }
        n => Err(Error::failed(format!(
            "scriptId: {n} bytes, not the 32 of a SHA-256"
        ))),
    }
}

/// Reads a warning signal: signal 0 is none.
fn read_warning(r: w::warning_signal::Reader<'_>) -> Option<Warning> {
    (r.get_signal() != 0).then(|| Warning {
        signal: r.get_signal(),
        before_s: r.get_before_s(),
        leader_only: r.get_leader_only(),
    })
}

/// Writes named counts (generic resources).
fn write_counts(
    mut b: capnp::struct_list::Builder<'_, w::named_count::Owned>,
    counts: &std::collections::BTreeMap<String, u64>,
) {
    for (i, (name, count)) in counts.iter().enumerate() {
        let mut c = b.reborrow().get(i as u32);
        c.set_name(name.as_str());
        c.set_count(*count);
    }
}

/// Reads named counts: a zero count is none, a name listed twice counts once.
fn read_counts(
    r: capnp::struct_list::Reader<'_, w::named_count::Owned>,
) -> Result<std::collections::BTreeMap<String, u64>, Error> {
    let mut counts = std::collections::BTreeMap::new();
    for c in r.iter() {
        if c.get_count() > 0 {
            counts.insert(text(c.get_name()?)?, c.get_count());
        }
    }
    Ok(counts)
}

/// Writes a job's limits.
fn write_limits(mut b: w::job_limits::Builder<'_>, l: &Limits) {
    b.set_time_limit_s(l.time_limit_s.unwrap_or(0));
}

/// Reads a job's limits.
fn read_limits(r: w::job_limits::Reader<'_>) -> Limits {
    Limits {
        time_limit_s: Some(r.get_time_limit_s()).filter(|s| *s > 0),
    }
}

/// Why a job spec from the wire is refused before it is judged: a negative resource count
/// (the wire's fields are signed so that such a request arrives and is named).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{field}: must not be negative (got {got})")]
    Negative { field: &'static str, got: i64 },
    #[error(transparent)]
    Wire(#[from] Error),
    #[error(transparent)]
    Dependency(#[from] crate::dependency::DependencyError),
    #[error(transparent)]
    Array(#[from] crate::array::ArrayError),
}

/// Reads a job spec.
pub fn read_spec(r: w::job_spec::Reader<'_>) -> Result<JobSpec, SpecError> {
    let command = r
        .get_command()?
        .iter()
        .map(|t| text(t?))
        .collect::<Result<_, _>>()?;
    let env = r
        .get_env()?
        .iter()
        .map(|e| Ok((text(e.get_name()?)?, text(e.get_value()?)?)))
        .collect::<Result<_, Error>>()?;
    let negative = |field, got: i64| SpecError::Negative { field, got };
    let cpus = u32::try_from(r.get_cpus()).map_err(|_| negative("cpus", r.get_cpus().into()))?;
    let mem_mb = u64::try_from(r.get_mem_mb()).map_err(|_| negative("mem_mb", r.get_mem_mb()))?;
    Ok(JobSpec {
        name: text(r.get_name()?)?,
        user: text(r.get_user()?)?,
        queue: text(r.get_queue()?)?,
        command,
        env,
        cwd: text(r.get_cwd()?)?,
        resources: Resources {
            cpus,
            mem_mb,
            gres: read_counts(r.get_gres()?)?,
        },
        priority: r.get_priority(),
        limits: read_limits(r.get_limits()?),
        script: read_script_id(r.get_script_id()?)?,
        stdout: opt_text(text(r.get_stdout()?)?),
        stderr: opt_text(text(r.get_stderr()?)?),
        open_mode: opt_enum(r.get_open_mode()),
        hold: r.get_hold(),
        begin_time_ms: opt_ms(r.get_begin_time_ms()),
        warn_signal: read_warning(r.get_warning()?),
        no_requeue: r.get_no_requeue(),
        dependency: opt_text(text(r.get_dependency()?)?)
            .map(|d| d.parse())
            .transpose()?,
        kill_on_invalid_dep: r
            .get_has_kill_on_invalid_dep()
            .then(|| r.get_kill_on_invalid_dep()),
        array: opt_text(text(r.get_array()?)?)
            .map(|a| a.parse())
            .transpose()?,
        account: text(r.get_account()?)?,
    })
}

/// Writes a job.
pub fn write_job(mut b: w::job::Builder<'_>, j: &Job) {
    b.set_id(j.id);
    write_spec(b.reborrow().init_spec(), &j.spec);
    b.set_state(j.state.into());
    b.set_pend_reason(j.pend_reason.as_deref().unwrap_or(""));
    b.set_reason(j.reason.as_deref().unwrap_or(""));
    b.set_host(j.host.as_deref().unwrap_or(""));
    b.set_attempt(j.attempt);
    b.set_has_runs(true);
    b.set_runs(j.runs);
    if let Some(at) = j.expected_start_ms {
        b.set_has_expected_start(true);
        b.set_expected_start_ms(at);
    }
    if let Some(u) = &j.usage {
        write_usage(b.reborrow().init_usage(), u);
    }
    if !j.attempts.is_empty() {
        let mut list = b.reborrow().init_attempts(j.attempts.len() as u32);
        for (i, a) in j.attempts.iter().enumerate() {
            write_attempt(list.reborrow().get(i as u32), a);
        }
    }
    if let Some(code) = j.exit_code {
        b.set_has_exit_code(true);
        b.set_exit_code(code);
    }
    if let Some(sig) = j.signal {
        b.set_has_signal(true);
        b.set_signal(sig);
    }
    b.set_submit_time_ms(j.submit_time_ms);
    b.set_start_time_ms(j.start_time_ms.unwrap_or(0));
    b.set_end_time_ms(j.end_time_ms.unwrap_or(0));
    b.set_output_dir(j.output_dir.as_deref().unwrap_or(""));
    b.set_pend_code(j.pend_code.to_wire());
    b.set_result(j.result.to_wire());
    b.set_cancelled_by(j.cancelled_by.as_deref().unwrap_or(""));
    b.set_dependency_state(j.dependency_state.to_wire());
    if let Some(a) = &j.array {
        let mut ab = b.reborrow().init_array();
        ab.set_pending(a.pending.to_string());
        ab.set_running(a.running);
        ab.set_completed(a.completed);
        ab.set_failed(a.failed);
        ab.set_unrun(a.unrun);
        ab.set_waiting(a.waiting);
    }
    if let Some(t) = &j.array_task {
        let mut tb = b.reborrow().init_array_task();
        tb.set_array_id(t.array_id);
        tb.set_index(t.index);
        tb.set_count(t.count);
        tb.set_min(t.min);
        tb.set_max(t.max);
        tb.set_step(t.step);
    }
}

/// Reads a job.
pub fn read_job(r: w::job::Reader<'_>) -> Result<Job, Error> {
    Ok(Job {
        id: r.get_id(),
        spec: read_spec(r.get_spec()?).map_err(|e| Error::failed(e.to_string()))?,
        state: r.get_state()?.into(),
        pend_reason: opt_text(text(r.get_pend_reason()?)?),
        pend_code: opt_enum(r.get_pend_code()),
        reason: opt_text(text(r.get_reason()?)?),
        result: opt_enum(r.get_result()),
        host: opt_text(text(r.get_host()?)?),
        attempt: r.get_attempt(),
        // A controller older than the field counted every dispatch as a run.
        runs: if r.get_has_runs() {
            r.get_runs()
        } else {
            r.get_attempt()
        },
        exit_code: r.get_has_exit_code().then(|| r.get_exit_code()),
        signal: r.get_has_signal().then(|| r.get_signal()),
        expected_start_ms: r
            .get_has_expected_start()
            .then(|| r.get_expected_start_ms()),
        usage: if r.has_usage() {
            Some(read_usage(r.get_usage()?))
        } else {
            None
        },
        attempts: r
            .get_attempts()?
            .iter()
            .map(read_attempt)
            .collect::<Result<_, _>>()?,
        submit_time_ms: r.get_submit_time_ms(),
        start_time_ms: opt_ms(r.get_start_time_ms()),
        end_time_ms: opt_ms(r.get_end_time_ms()),
        output_dir: Some(text(r.get_output_dir()?)?).filter(|d| !d.is_empty()),
        cancelled_by: opt_text(text(r.get_cancelled_by()?)?),
        dependency_state: opt_enum(r.get_dependency_state()),
        array: if r.has_array() {
            let a = r.get_array()?;
            let pending = text(a.get_pending()?)?;
            Some(ArrayProgress {
                pending: if pending.is_empty() {
                    crate::array::TaskSet::new()
                } else {
                    pending
                        .parse()
                        .map_err(|e: crate::array::ArrayError| Error::failed(e.to_string()))?
                },
                waiting: a.get_waiting(),
                running: a.get_running(),
                completed: a.get_completed(),
                failed: a.get_failed(),
                unrun: a.get_unrun(),
            })
        } else {
            None
        },
        array_task: if r.has_array_task() {
            let t = r.get_array_task()?;
            Some(ArrayTask {
                array_id: t.get_array_id(),
                index: t.get_index(),
                count: t.get_count(),
                min: t.get_min(),
                max: t.get_max(),
                step: t.get_step(),
            })
        } else {
            None
        },
    })
}

/// Writes a job filter.
pub fn write_filter(mut b: w::job_filter::Builder<'_>, f: &JobFilter) {
    let JobFilter {
        queue,
        states,
        user,
        name,
        results,
        submitted_since_ms,
    } = f;
    b.set_queue(queue.as_deref().unwrap_or(""));
    b.set_user(user.as_deref().unwrap_or(""));
    b.set_name(name.as_deref().unwrap_or(""));
    b.set_submitted_since_ms(submitted_since_ms.unwrap_or(0));
    write_states(b.reborrow().init_states(states.len() as u32), states);
    write_results(b.init_results(results.len() as u32), results);
}

/// Writes a filter's states.
fn write_states(mut list: capnp::enum_list::Builder<'_, w::JobState>, states: &[JobState]) {
    for (i, s) in states.iter().enumerate() {
        list.set(i as u32, (*s).into());
    }
}

/// Writes a filter's results.
fn write_results(mut list: capnp::enum_list::Builder<'_, w::JobResult>, results: &[JobResult]) {
    for (i, r) in results.iter().enumerate() {
        list.set(i as u32, Some(*r).to_wire());
    }
}

/// Reads a job filter.
pub fn read_filter(r: w::job_filter::Reader<'_>) -> Result<JobFilter, Error> {
    let states = r
        .get_states()?
        .iter()
        .map(|s| s.map(JobState::from).map_err(Error::from))
        .collect::<Result<_, _>>()?;
    let mut results = Vec::new();
    // `none`, or a result a newer client knows and this build does not, filters nothing
    // here: the client filters again.
    for got in r.get_results()?.iter() {
        if let Some(result) = opt_enum(got) {
            results.push(result);
        }
    }
    Ok(JobFilter {
        queue: opt_text(text(r.get_queue()?)?),
        states,
        user: opt_text(text(r.get_user()?)?),
        name: opt_text(text(r.get_name()?)?),
        results,
        submitted_since_ms: Some(r.get_submitted_since_ms()).filter(|ms| *ms > 0),
    })
}

/// Writes a history filter.
pub fn write_history_filter(mut b: w::history_filter::Builder<'_>, f: &HistoryFilter) {
    let HistoryFilter {
        user,
        account,
        queue,
        name,
        states,
        results,
        array,
        first_id,
        last_id,
        time,
        since_ms,
        until_ms,
    } = f;
    b.set_user(user.as_deref().unwrap_or(""));
    b.set_account(account.as_deref().unwrap_or(""));
    b.set_queue(queue.as_deref().unwrap_or(""));
    b.set_name(name.as_deref().unwrap_or(""));
    b.set_array_id(array.unwrap_or(0));
    b.set_first_id(first_id.unwrap_or(0));
    b.set_last_id(last_id.unwrap_or(0));
    b.set_time(match time {
        TimeField::Submit => w::HistoryTime::Submit,
        TimeField::Start => w::HistoryTime::Start,
        TimeField::End => w::HistoryTime::End,
    });
    b.set_since_ms(since_ms.unwrap_or(0));
    b.set_until_ms(until_ms.unwrap_or(0));
    write_states(b.reborrow().init_states(states.len() as u32), states);
    write_results(b.init_results(results.len() as u32), results);
}

/// Reads a history filter. A result this build does not know is refused: a filter that
/// dropped it would answer jobs the caller did not ask for.
pub fn read_history_filter(r: w::history_filter::Reader<'_>) -> Result<HistoryFilter, Error> {
    let states = r
        .get_states()?
        .iter()
        .map(|s| s.map(JobState::from).map_err(Error::from))
        .collect::<Result<_, _>>()?;
    let mut results = Vec::new();
    for got in r.get_results()?.iter() {
        match opt_enum(got) {
            Some(result) => results.push(result),
            None => {
                return Err(Error::failed(
                    "history filter: a result this controller does not know".into(),
                ))
            }
        }
    }
    let nonzero = |v: u64| Some(v).filter(|v| *v > 0);
    Ok(HistoryFilter {
        user: opt_text(text(r.get_user()?)?),
        account: opt_text(text(r.get_account()?)?),
        queue: opt_text(text(r.get_queue()?)?),
        name: opt_text(text(r.get_name()?)?),
        states,
        results,
        array: nonzero(r.get_array_id()),
        first_id: nonzero(r.get_first_id()),
        last_id: nonzero(r.get_last_id()),
        time: match r.get_time()? {
            w::HistoryTime::Submit => TimeField::Submit,
            w::HistoryTime::Start => TimeField::Start,
            w::HistoryTime::End => TimeField::End,
        },
        since_ms: nonzero(r.get_since_ms()),
        until_ms: nonzero(r.get_until_ms()),
    })
}

/// Writes a queue.
pub fn write_queue(mut b: w::queue::Builder<'_>, q: &Queue) {
    b.set_name(q.name.as_str());
    b.set_priority(q.priority);
    b.set_open(q.open);
    b.set_active(q.active);
    b.set_pending(q.pending);
    b.set_running(q.running);
    b.set_default_time_s(q.default_time_s.unwrap_or(0));
    b.set_max_time_s(q.max_time_s.unwrap_or(0));
}

/// Reads a queue.
pub fn read_queue(r: w::queue::Reader<'_>) -> Result<Queue, Error> {
    Ok(Queue {
        name: text(r.get_name()?)?,
        priority: r.get_priority(),
        open: r.get_open(),
        active: r.get_active(),
        pending: r.get_pending(),
        running: r.get_running(),
        default_time_s: Some(r.get_default_time_s()).filter(|s| *s > 0),
        max_time_s: Some(r.get_max_time_s()).filter(|s| *s > 0),
    })
}

/// Writes a cluster report.
pub fn write_cluster(mut b: w::cluster_info::Builder<'_>, c: &ClusterInfo) {
    b.set_primary(c.primary.as_deref().unwrap_or(""));
    b.set_term(c.term);
    let mut members = b.reborrow().init_members(c.members.len() as u32);
    for (i, m) in c.members.iter().enumerate() {
        let mut mb = members.reborrow().get(i as u32);
        mb.set_name(m.name.as_str());
        mb.set_addr(m.addr.as_str());
        mb.set_role(m.role.into());
        mb.set_version(m.version.unwrap_or(0));
    }
    b.set_active_version(c.active_version);
    b.set_hold_version(c.hold_version.unwrap_or(0));
    let mut schedulers = b.init_schedulers(c.schedulers.len() as u32);
    for (i, s) in c.schedulers.iter().enumerate() {
        let mut sb = schedulers.reborrow().get(i as u32);
        sb.set_name(s.name.as_str());
        sb.set_active(s.active);
    }
}

/// Reads a cluster report.
pub fn read_cluster(r: w::cluster_info::Reader<'_>) -> Result<ClusterInfo, Error> {
    let members = r
        .get_members()?
        .iter()
        .map(|m| {
            Ok(Member {
                name: text(m.get_name()?)?,
                addr: text(m.get_addr()?)?,
                role: m.get_role()?.into(),
                version: Some(m.get_version()).filter(|v| *v > 0),
            })
        })
        .collect::<Result<_, Error>>()?;
    let schedulers = r
        .get_schedulers()?
        .iter()
        .map(|s| {
            Ok(SchedulerInfo {
                name: text(s.get_name()?)?,
                active: s.get_active(),
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(ClusterInfo {
        primary: opt_text(text(r.get_primary()?)?),
        term: r.get_term(),
        members,
        schedulers,
        active_version: r.get_active_version(),
        hold_version: Some(r.get_hold_version()).filter(|v| *v > 0),
    })
}

/// Writes a placement.
pub fn write_token_info(mut b: w::token_info::Builder<'_>, t: &TokenInfo) {
    b.set_id(t.id.as_str());
    b.set_user(t.user.as_str());
    b.set_role(t.role.into());
    b.set_created_ms(t.created_ms);
    b.set_expires_ms(t.expires_ms.unwrap_or(0));
}

pub fn read_token_info(r: w::token_info::Reader<'_>) -> Result<TokenInfo, Error> {
    Ok(TokenInfo {
        id: text(r.get_id()?)?,
        user: text(r.get_user()?)?,
        role: r.get_role()?.into(),
        created_ms: r.get_created_ms(),
        expires_ms: Some(r.get_expires_ms()).filter(|ms| *ms > 0),
    })
}

pub fn write_placement(mut b: w::placement::Builder<'_>, p: &Placement) {
    b.set_job_id(p.id);
    b.set_host(p.host.as_str());
}

/// Reads a placement.
pub fn read_placement(r: w::placement::Reader<'_>) -> Result<Placement, Error> {
    Ok(Placement {
        id: r.get_job_id(),
        host: text(r.get_host()?)?,
    })
}

/// Writes why a pending job waits.
pub fn write_pend_reason(mut b: w::pend_reason::Builder<'_>, id: u64, r: &PendReason) {
    b.set_job_id(id);
    b.set_reason(r.text.as_str());
    b.set_code(Some(r.code).to_wire());
    if let Some(at) = r.expected_start_ms {
        b.set_has_expected_start(true);
        b.set_expected_start_ms(at);
    }
}

/// Reads why a pending job waits. A code an older scheduler did not send (`none`) or a newer
/// one added is taken from the text as a format-6 cluster would ([`PendCode::of_v6_text`]).
pub fn read_pend_reason(r: w::pend_reason::Reader<'_>) -> Result<(u64, PendReason), Error> {
    let text = text(r.get_reason()?)?;
    let code = opt_enum(r.get_code()).unwrap_or_else(|| PendCode::of_v6_text(&text));
    let expected_start_ms = r
        .get_has_expected_start()
        .then(|| r.get_expected_start_ms());
    Ok((
        r.get_job_id(),
        PendReason {
            code,
            text,
            expected_start_ms,
        },
    ))
}

/// Writes a refused placement.
pub fn write_refusal(mut b: w::refusal::Builder<'_>, f: &Refusal) {
    b.set_job_id(f.id);
    b.set_status(f.status.into());
    b.set_message(f.message.as_str());
}

/// Reads a refused placement; an unknown status from a newer peer reads as `internal`.
pub fn read_refusal(r: w::refusal::Reader<'_>) -> Result<Refusal, Error> {
    Ok(Refusal {
        id: r.get_job_id(),
        status: r.get_status().map(Status::from).unwrap_or(Status::Internal),
        message: text(r.get_message()?)?,
    })
}

/// Writes a host.
pub fn write_host(mut b: w::host::Builder<'_>, h: &Host) {
    b.set_name(h.name.as_str());
    b.set_cpus(h.capacity.cpus);
    b.set_mem_mb(h.capacity.mem_mb);
    write_counts(
        b.reborrow().init_gres(h.capacity.gres.len() as u32),
        &h.capacity.gres,
    );
    b.set_state(h.state.into());
    b.set_running(h.running);
    b.set_cpus_used(h.used.cpus);
    b.set_mem_mb_used(h.used.mem_mb);
    write_counts(
        b.reborrow().init_gres_used(h.used.gres.len() as u32),
        &h.used.gres,
    );
    b.set_queues_starts(h.queues_starts);
    write_job_users(b.init_job_users(), &h.job_users);
}

/// Writes whose jobs a host runs.
pub fn write_job_users(mut b: w::job_users::Builder<'_>, u: &JobUsers) {
    match u {
        JobUsers::Any => b.set_any(()),
        JobUsers::EachUser { root } => b.set_each_user(*root),
        JobUsers::Only(user) => b.set_only(user.as_str()),
    }
}

/// Reads whose jobs a host runs; absent (an older worker) is `Any`, how it ran them.
pub fn read_job_users(r: w::job_users::Reader<'_>) -> Result<JobUsers, Error> {
    Ok(match r.which()? {
        w::job_users::Any(()) => JobUsers::Any,
        w::job_users::EachUser(root) => JobUsers::EachUser { root },
        w::job_users::Only(user) => JobUsers::Only(text(user?)?),
    })
}

/// Reads a host.
pub fn read_host(r: w::host::Reader<'_>) -> Result<Host, Error> {
    Ok(Host {
        name: text(r.get_name()?)?,
        capacity: Resources {
            cpus: r.get_cpus(),
            mem_mb: r.get_mem_mb(),
            gres: read_counts(r.get_gres()?)?,
        },
        state: r.get_state()?.into(),
        running: r.get_running(),
        used: Resources {
            cpus: r.get_cpus_used(),
            mem_mb: r.get_mem_mb_used(),
            gres: read_counts(r.get_gres_used()?)?,
        },
        job_users: read_job_users(r.get_job_users()?)?,
        queues_starts: r.get_queues_starts(),
    })
}

/// Writes host attributes.
pub fn write_attributes(mut b: w::host_attributes::Builder<'_>, a: &HostAttributes) {
    b.set_name(a.name.as_str());
    b.set_cpus(a.resources.cpus);
    b.set_mem_mb(a.resources.mem_mb);
    write_counts(
        b.reborrow().init_gres(a.resources.gres.len() as u32),
        &a.resources.gres,
    );
    b.set_spool_dir(a.spool_dir.as_str());
    write_job_users(b.init_job_users(), &a.job_users);
}

/// Reads host attributes.
pub fn read_attributes(r: w::host_attributes::Reader<'_>) -> Result<HostAttributes, Error> {
    Ok(HostAttributes {
        name: text(r.get_name()?)?,
        resources: Resources {
            cpus: r.get_cpus(),
            mem_mb: r.get_mem_mb(),
            gres: read_counts(r.get_gres()?)?,
        },
        spool_dir: text(r.get_spool_dir()?)?,
        job_users: read_job_users(r.get_job_users()?)?,
    })
}

/// Writes one attempt that started.
pub fn write_attempt(mut b: w::attempt_run::Builder<'_>, a: &AttemptRun) {
    b.set_attempt(a.attempt);
    b.set_host(a.host.as_str());
    b.set_start_ms(a.start_ms);
    b.set_end_ms(a.end_ms.unwrap_or(0));
    if let Some(code) = a.exit_code {
        b.set_has_exit_code(true);
        b.set_exit_code(code);
    }
    if let Some(sig) = a.signal {
        b.set_has_signal(true);
        b.set_signal(sig);
    }
    b.set_reason(a.reason.as_deref().unwrap_or(""));
    if let Some(u) = &a.usage {
        write_usage(b.init_usage(), u);
    }
}

/// Reads one attempt that started.
pub fn read_attempt(r: w::attempt_run::Reader<'_>) -> Result<AttemptRun, Error> {
    Ok(AttemptRun {
        attempt: r.get_attempt(),
        host: text(r.get_host()?)?,
        start_ms: r.get_start_ms(),
        end_ms: opt_ms(r.get_end_ms()),
        exit_code: r.get_has_exit_code().then(|| r.get_exit_code()),
        signal: r.get_has_signal().then(|| r.get_signal()),
        reason: opt_text(text(r.get_reason()?)?),
        usage: if r.has_usage() {
            Some(read_usage(r.get_usage()?))
        } else {
            None
        },
    })
}

/// Writes what a job's attempts used.
pub fn write_usage(mut b: w::usage::Builder<'_>, u: &crate::types::Usage) {
    b.set_cpu_user_ms(u.cpu_user_ms);
    b.set_cpu_sys_ms(u.cpu_sys_ms);
    b.set_max_rss_kb(u.max_rss_kb);
}

/// Reads what a job's attempts used.
pub fn read_usage(r: w::usage::Reader<'_>) -> crate::types::Usage {
    crate::types::Usage {
        cpu_user_ms: r.get_cpu_user_ms(),
        cpu_sys_ms: r.get_cpu_sys_ms(),
        max_rss_kb: r.get_max_rss_kb(),
    }
}

/// Writes how a job ended.
pub fn write_end(mut b: w::job_end::Builder<'_>, end: &JobEnd) {
    match end {
        JobEnd::Exit(code) => b.set_exit_code(*code),
        JobEnd::Signal(sig) => b.set_signal(*sig),
        JobEnd::Failed(reason) => b.set_failed(reason.as_str()),
        JobEnd::OutOfMemory => b.set_out_of_memory(()),
        JobEnd::TimedOut { exit_code, signal } => {
            let mut p = b.init_timed_out();
            if let Some(code) = exit_code {
                p.set_has_exit_code(true);
                p.set_exit_code(*code);
            }
            if let Some(sig) = signal {
                p.set_has_signal(true);
                p.set_signal(*sig);
            }
        }
    }
}

/// Reads how a job ended.
pub fn read_end(r: w::job_end::Reader<'_>) -> Result<JobEnd, Error> {
    Ok(match r.which()? {
        w::job_end::ExitCode(code) => JobEnd::Exit(code),
        w::job_end::Signal(sig) => JobEnd::Signal(sig),
        w::job_end::Failed(reason) => JobEnd::Failed(text(reason?)?),
        w::job_end::OutOfMemory(()) => JobEnd::OutOfMemory,
        w::job_end::TimedOut(p) => {
            let p = p?;
            JobEnd::TimedOut {
                exit_code: p.get_has_exit_code().then(|| p.get_exit_code()),
                signal: p.get_has_signal().then(|| p.get_signal()),
            }
        }
    })
}

/// Writes an order for one attempt.
pub fn write_order(mut b: w::job_order::Builder<'_>, o: &JobOrder) {
    b.set_job_id(o.id);
    b.set_attempt(o.attempt);
    b.set_signal(o.signal.into());
}

/// Reads an order for one attempt.
pub fn read_order(r: w::job_order::Reader<'_>) -> Result<JobOrder, Error> {
    Ok(JobOrder {
        id: r.get_job_id(),
        attempt: r.get_attempt(),
        signal: r.get_signal()?.into(),
    })
}

/// Writes what `updateJob` changes.
pub fn write_changes(mut b: w::job_changes::Builder<'_>, c: &JobChanges) {
    // Every field named: one added to the changes fails to compile here until it is sent.
    let JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s,
        hold,
        begin_time_ms,
    } = c;
    if let Some(name) = name {
        b.set_name(name);
        b.set_set_name(true);
    }
    if let Some(priority) = priority {
        b.set_priority(*priority);
        b.set_set_priority(true);
    }
    if let Some(queue) = queue {
        b.set_queue(queue);
        b.set_set_queue(true);
    }
    if let Some(cpus) = cpus {
        b.set_cpus(*cpus);
        b.set_set_cpus(true);
    }
    if let Some(mem_mb) = mem_mb {
        b.set_mem_mb(*mem_mb);
        b.set_set_mem_mb(true);
    }
    if let Some(limit) = time_limit_s {
        b.set_time_limit_s(*limit);
        b.set_set_time_limit(true);
    }
    if let Some(hold) = hold {
        b.set_hold(*hold);
        b.set_set_hold(true);
    }
    if let Some(begin) = begin_time_ms {
        b.set_begin_time_ms(*begin);
        b.set_set_begin_time(true);
    }
}

/// Reads what `updateJob` changes.
pub fn read_changes(r: w::job_changes::Reader<'_>) -> Result<JobChanges, Error> {
    Ok(JobChanges {
        name: r.get_set_name().then(|| text(r.get_name()?)).transpose()?,
        priority: r.get_set_priority().then(|| r.get_priority()),
        queue: r
            .get_set_queue()
            .then(|| text(r.get_queue()?))
            .transpose()?,
        cpus: r.get_set_cpus().then(|| r.get_cpus()),
        mem_mb: r.get_set_mem_mb().then(|| r.get_mem_mb()),
        time_limit_s: r.get_set_time_limit().then(|| r.get_time_limit_s()),
        hold: r.get_set_hold().then(|| r.get_hold()),
        begin_time_ms: r.get_set_begin_time().then(|| r.get_begin_time_ms()),
    })
}

/// Writes what an action on an array's tasks does to each.
pub fn write_task_op(mut b: w::task_op::Builder<'_>, op: &TaskOp) {
    match op {
        TaskOp::Control { action } => b.set_action((*action).into()),
        TaskOp::Update { changes, throttle } => {
            let mut u = b.init_update();
            write_changes(u.reborrow().init_changes(), changes);
            if let Some(throttle) = throttle {
                u.set_throttle(*throttle);
                u.set_set_throttle(true);
            }
        }
        TaskOp::Signal {
            signal,
            leader_only,
        } => {
            let mut s = b.init_signal();
            s.set_signal(*signal);
            s.set_leader_only(*leader_only);
        }
    }
}

/// Reads what an action on an array's tasks does to each.
pub fn read_task_op(r: w::task_op::Reader<'_>) -> Result<TaskOp, Error> {
    use w::task_op::Which;
    Ok(match r.which()? {
        Which::Action(action) => TaskOp::Control {
            action: action?.into(),
        },
        Which::Update(u) => {
            let u = u?;
            TaskOp::Update {
                changes: read_changes(u.get_changes()?)?,
                throttle: u.get_set_throttle().then(|| u.get_throttle()),
            }
        }
        Which::Signal(sig) => {
            let sig = sig?;
            TaskOp::Signal {
                signal: sig.get_signal(),
                leader_only: sig.get_leader_only(),
            }
        }
    })
}

/// Writes one attempt a worker holds.
pub fn write_held(mut b: w::held_job::Builder<'_>, h: &HeldJob) {
    b.set_job_id(h.id);
    b.set_attempt(h.attempt);
    b.set_phase(h.phase.into());
}

/// Reads one attempt a worker holds.
pub fn read_held(r: w::held_job::Reader<'_>) -> Result<HeldJob, Error> {
    Ok(HeldJob {
        id: r.get_job_id(),
        attempt: r.get_attempt(),
        phase: r.get_phase()?.into(),
    })
}

/// Writes an event filter.
pub fn write_event_filter(b: w::event_filter::Builder<'_>, f: &EventFilter) {
    let mut kinds = b.init_kinds(f.kinds.len() as u32);
    for (i, k) in f.kinds.iter().enumerate() {
        kinds.set(i as u32, (*k).into());
    }
}

/// Reads an event filter.
pub fn read_event_filter(r: w::event_filter::Reader<'_>) -> Result<EventFilter, Error> {
    let kinds = r
        .get_kinds()?
        .iter()
        .map(|k| k.map(EventKind::from).map_err(Error::from))
        .collect::<Result<_, _>>()?;
    Ok(EventFilter { kinds })
}

/// Writes one event.
pub fn write_event(mut b: w::event::Builder<'_>, e: &ClusterEvent) {
    match e {
        ClusterEvent::Job {
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
        } => {
            b.set_index(*index);
            let mut j = b.init_job();
            if let Some((array, task)) = task {
                j.set_has_task(true);
                j.set_array_job_id(*array);
                j.set_array_task_id(*task);
            }
            j.set_id(*id);
            j.set_state((*state).into());
            j.set_host(host.as_deref().unwrap_or(""));
            j.set_attempt(*attempt);
            j.set_queue(queue.as_str());
            j.set_user(user.as_str());
            j.set_pend_reason(pend_reason.as_deref().unwrap_or(""));
            j.set_reason(reason.as_deref().unwrap_or(""));
            j.set_pend_code(pend_code.to_wire());
            j.set_result(result.to_wire());
        }
        ClusterEvent::Host { index, name, state } => {
            b.set_index(*index);
            let mut h = b.init_host();
            h.set_name(name.as_str());
            h.set_state((*state).into());
        }
        ClusterEvent::Queue {
            index,
            name,
            priority,
            open,
            active,
        } => {
            b.set_index(*index);
            let mut q = b.init_queue();
            q.set_name(name.as_str());
            q.set_priority(*priority);
            q.set_open(*open);
            q.set_active(*active);
        }
    }
}

/// Reads one event.
pub fn read_event(r: w::event::Reader<'_>) -> Result<ClusterEvent, Error> {
    let index = r.get_index();
    Ok(match r.which()? {
        w::event::Job(j) => {
            let j = j?;
            ClusterEvent::Job {
                index,
                id: j.get_id(),
                state: j.get_state()?.into(),
                host: opt_text(text(j.get_host()?)?),
                attempt: j.get_attempt(),
                queue: text(j.get_queue()?)?,
                user: text(j.get_user()?)?,
                pend_reason: opt_text(text(j.get_pend_reason()?)?),
                pend_code: opt_enum(j.get_pend_code()),
                reason: opt_text(text(j.get_reason()?)?),
                result: opt_enum(j.get_result()),
                task: j
                    .get_has_task()
                    .then(|| (j.get_array_job_id(), j.get_array_task_id())),
            }
        }
        w::event::Host(h) => {
            let h = h?;
            ClusterEvent::Host {
                index,
                name: text(h.get_name()?)?,
                state: h.get_state()?.into(),
            }
        }
        w::event::Queue(q) => {
            let q = q?;
            ClusterEvent::Queue {
                index,
                name: text(q.get_name()?)?,
                priority: q.get_priority(),
                open: q.get_open(),
                active: q.get_active(),
            }
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing;

    /// A job with every field set, for this crate's tests.
    pub(crate) fn sample_job() -> Job {
        Job {
            id: 42,
            spec: JobSpec {
                name: "sim-7".into(),
                user: "alice".into(),
                queue: "normal".into(),
                command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                env: vec![("A".into(), "1".into())],
                cwd: "/home/alice".into(),
                resources: Resources::new(2, 512),
                priority: 5,
                limits: Limits {
                    time_limit_s: Some(60),
                },
                script: Some(ScriptId::of(b"#!/bin/sh\necho hi\n")),
                stdout: Some("%x-%j.out".into()),
                stderr: Some("%x-%j.err".into()),
                open_mode: Some(OpenMode::Append),
                hold: true,
                begin_time_ms: Some(3),
                warn_signal: Some(Warning {
                    signal: 10,
                    before_s: 5,
                    leader_only: true,
                }),
                no_requeue: true,
                dependency: Some("afterok:1:2,after:3".parse().unwrap()),
                kill_on_invalid_dep: Some(true),
                array: Some("1-9:2,20%3".parse().unwrap()),
                account: "physics".into(),
            },
            state: JobState::Exited,
            pend_reason: None,
            pend_code: None,
            reason: Some("killed".into()),
            result: Some(JobResult::Cancelled),
            host: Some("w1".into()),
            attempt: 1,
            runs: 1,
            exit_code: Some(0),
            signal: None,
            submit_time_ms: 1,
            start_time_ms: Some(2),
            end_time_ms: None,
            output_dir: Some("/var/spool/xce".into()),
            cancelled_by: Some("alice".into()),
            dependency_state: Some(DependencyState::Satisfied),
            array: None,
            array_task: Some(ArrayTask {
                array_id: 40,
                index: 3,
                count: 6,
                min: 1,
                max: 20,
                step: 1,
            }),
            expected_start_ms: None,
            usage: None,
            attempts: Vec::new(),
        }
    }

    /// Writes `value` with `write` into a fresh message and reads it back with `read`.
    fn round_trip<T, W, R>(value: &T, write: W, read: R) -> T
    where
        W: FnOnce(&mut capnp::message::Builder<capnp::message::HeapAllocator>, &T),
        R: FnOnce(&capnp::message::Builder<capnp::message::HeapAllocator>) -> T,
    {
        let mut msg = capnp::message::Builder::new_default();
        write(&mut msg, value);
        read(&msg)
    }

    proptest! {
        // Every domain value a boundary carries reads back as it was written: a field that a
        // `write_*` forgets, or a `read_*` drops, fails here.

        #[test]
        fn any_job_round_trips_through_capnp(job in testing::job()) {
            let back = round_trip(&job, |m, j| write_job(m.init_root(), j), |m| {
                read_job(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, job);
        }

        #[test]
        fn any_spec_round_trips_through_capnp(spec in testing::spec()) {
            let back = round_trip(&spec, |m, s| write_spec(m.init_root(), s), |m| {
                read_spec(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, spec);
        }

        #[test]
        fn any_host_and_attributes_round_trip_through_capnp(
            host in testing::host(), attrs in testing::attributes()
        ) {
            let back = round_trip(&host, |m, h| write_host(m.init_root(), h), |m| {
                read_host(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, host);
            let back = round_trip(&attrs, |m, a| write_attributes(m.init_root(), a), |m| {
                read_attributes(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, attrs);
        }

        #[test]
        fn any_job_filter_round_trips_through_capnp(filter in testing::job_filter()) {
            let back = round_trip(&filter, |m, f| write_filter(m.init_root(), f), |m| {
                read_filter(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, filter);
        }

        #[test]
        fn any_changes_round_trip_through_capnp(changes in testing::job_changes()) {
            let back = round_trip(&changes, |m, c| write_changes(m.init_root(), c), |m| {
                read_changes(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, changes);
        }

        #[test]
        fn any_end_round_trips_through_capnp(end in testing::end()) {
            let back = round_trip(&end, |m, e| write_end(m.init_root(), e), |m| {
                read_end(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, end);
        }

        #[test]
        fn any_event_round_trips_through_capnp(event in testing::event()) {
            let back = round_trip(&event, |m, e| write_event(m.init_root(), e), |m| {
                read_event(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, event);
        }

        #[test]
        fn any_cluster_report_round_trips_through_capnp(cluster in testing::cluster()) {
            let back = round_trip(&cluster, |m, c| write_cluster(m.init_root(), c), |m| {
                read_cluster(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, cluster);
        }

        #[test]
        fn any_pend_reason_round_trips_through_capnp(id in any::<u64>(), r in testing::pend_reason()) {
            let pair = (id, r);
            let back = round_trip(&pair, |m, (id, r)| write_pend_reason(m.init_root(), *id, r), |m| {
                read_pend_reason(m.get_root_as_reader().unwrap()).unwrap()
            });
            prop_assert_eq!(back, pair);
        }
    }

    #[test]
    fn a_negative_count_from_the_wire_is_refused_naming_its_field() {
        let mut msg = capnp::message::Builder::new_default();
        {
            let mut b: w::job_spec::Builder<'_> = msg.init_root();
            b.set_cpus(-1);
        }
        let e = read_spec(msg.get_root_as_reader().unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "cpus: must not be negative (got -1)");
        let mut msg = capnp::message::Builder::new_default();
        {
            let mut b: w::job_spec::Builder<'_> = msg.init_root();
            b.set_mem_mb(-5);
        }
        let e = read_spec(msg.get_root_as_reader().unwrap()).unwrap_err();
        assert_eq!(e.to_string(), "mem_mb: must not be negative (got -5)");
    }

    #[test]
    fn a_pend_reason_from_an_older_scheduler_takes_its_code_from_the_text() {
        let mut msg = capnp::message::Builder::new_default();
        {
            let mut b: w::pend_reason::Builder<'_> = msg.init_root();
            b.set_job_id(3);
            b.set_reason("no host with 64 cpus (largest has 2)");
        }
        let (id, r) = read_pend_reason(msg.get_root_as_reader().unwrap()).unwrap();
        assert_eq!((id, r.code), (3, PendCode::TooBig));
    }

    #[test]
    fn header_round_trips_and_keeps_the_redirect() {
        let mut h = ReplyHeader::status(Status::Redirect, "standby");
        h.redirect = Some(("127.0.0.1".into(), 7102));
        h.redirect_name = Some("c2".into());
        let mut msg = capnp::message::Builder::new_default();
        write_header(msg.init_root(), &h);
        assert_eq!(read_header(msg.get_root_as_reader().unwrap()).unwrap(), h);
    }

    #[test]
    fn token_round_trips() {
        let t = RequestToken(u128::MAX - 12345);
        let mut msg = capnp::message::Builder::new_default();
        write_token(msg.init_root(), t);
        assert_eq!(read_token(msg.get_root_as_reader().unwrap()), t);
    }
}
