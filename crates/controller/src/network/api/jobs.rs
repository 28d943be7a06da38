//! Job methods: submit, list (paged), look up, control, dispatch, update, signal, script.

use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::{header_of, ControllerService};
use crate::node::{now_ms, outcome_reply};
use crate::state::{time_limit, validate_spec, Command};
use xce_client::types::{Job, TaskOp};

pub(super) async fn submit(
    this: &ControllerService,
    params: controller::SubmitParams,
    mut results: controller::SubmitResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let token = wire::read_token(p.get_token()?);
    let body = p.get_script()?;
    let spec = match wire::read_spec(p.get_spec()?) {
        Ok(spec) => Ok(spec),
        Err(wire::SpecError::Wire(e)) => return Err(e),
        Err(invalid) => Err(ReplyHeader::status(Status::Invalid, invalid.to_string())),
    };
    // A job is its caller's: the field the client filled in counts only while
    // authentication is off.
    let user = this.session.borrow().user.clone();
    // Only the ready primary judges requests: a standby redirects even a bad one.
    let checked = this.node.admit().await.and_then(|()| {
        let mut spec = spec?;
        if let Some(user) = user {
            spec.user = user;
        }
        let rules = &this.node.job_rules;
        let queue = if spec.queue.is_empty() {
            crate::state::DEFAULT_QUEUE.to_string()
        } else {
            spec.queue.clone()
        };
        // A default limit needs a cluster version that stores one (format 7 on).
        let defaults_allowed = this.node.active_version() >= 7;
        // The cluster's choice for a dependent job that makes none (a job without a
        // dependency needs none, and a cluster below version 9 could not store it).
        if spec.dependency.is_some() && spec.kill_on_invalid_dep.is_none() {
            spec.kill_on_invalid_dep = Some(rules.kill_on_invalid_dep);
        }
        // As the primary has applied them: submits still in flight are not counted, so a
        // user submitting in parallel may pass the limit by as many.
        if let Some(max) = rules.max_submitted_per_user {
            let submitted = this.node.applied_submits(&spec.user);
            if submitted >= max {
                return Err(ReplyHeader::status(
                    Status::Conflict,
                    format!(
                        "user {}: {submitted} jobs submitted and not ended, the most one user \
                         may have (jobs.max_submitted_per_user; an array counts once, and its \
                         tasks while they run): submit again once some end",
                        spec.user
                    ),
                ));
            }
        }
        if let Some(Err(why)) = spec.array.as_ref().map(|a| a.within(rules.max_array_tasks)) {
            return Err(ReplyHeader::status(
                Status::Invalid,
                format!("array: {why}"),
            ));
        }
        validate_spec(&spec)
            .and_then(|()| {
                time_limit::fit_queue(
                    &mut spec,
                    &queue,
                    rules.queue_time(&queue),
                    defaults_allowed,
                )
            })
            .and_then(|()| time_limit::check(&spec, rules.max_time_limit_s))
            .and_then(|()| {
                let version = this.node.active_version();
                rules
                    .accounts
                    .charge(&mut spec, version >= xce_client::version::ACCOUNTING)
            })
            .and_then(|()| script_of(&spec, body, rules.max_script_bytes))
            .map_err(|message| ReplyHeader::status(Status::Invalid, message))
            .map(|script| (spec, script))
    });
    let checked = match checked {
        Ok((mut spec, script)) => settle_retired(this, &mut spec)
            .await
            .map(|()| (spec, script)),
        refused => refused,
    };
    let checked = match checked {
        // The log holds each script once: not again once the primary holds it (a script is
        // never removed, so one applied here stays in every later primary's state).
        // Read from the state as applied here, without a linearizability round: it holds
        // only committed entries, and a script, once there, stays.
        Ok((spec, Some(script))) => {
            let held = spec
                .script
                .is_some_and(|id| this.node.applied_script(&id).is_some());
            Ok((spec, (!held).then_some(script)))
        }
        other => other,
    };
    let (header, id) = match checked {
        Err(h) => (h, None),
        Ok((spec, script)) => match this
            .node
            .write(Command::Submit {
                token,
                spec,
                script,
            })
            .await
        {
            Ok(outcome) => outcome_reply(outcome),
            Err(h) => (h, None),
        },
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header);
    r.set_job_id(id.unwrap_or(0));
    if let Some(job) = id.and_then(|id| this.node.applied_job_shown(id, now_ms())) {
        wire::write_job(r.init_job(), &this.as_seen(job));
    }
    Ok(())
}

/// Settles the terms of a dependency on jobs that retired to history, from their records
/// (`history::parents`): the apply judges only live jobs. A dependency met already is
/// dropped; one that can never be met is refused, naming why, as Slurm refuses one on a job
/// that failed.
async fn settle_retired(
    this: &ControllerService,
    spec: &mut xce_client::types::JobSpec,
) -> Result<(), ReplyHeader> {
    use xce_client::dependency::{self, Settled};
    let Some(expr) = spec.dependency.clone() else {
        return Ok(());
    };
    let gone: Vec<_> = expr
        .job_ids()
        .into_iter()
        .filter(|id| this.node.applied_job(*id).is_none())
        .collect();
    if gone.is_empty() {
        return Ok(());
    }
    let history = this.node.history.clone();
    let terms: Vec<_> = expr
        .terms()
        .into_iter()
        .filter(|t| matches!(t, dependency::Term::On(_, job) if gone.contains(&job.id)))
        .cloned()
        .collect();
    let decided = tokio::task::spawn_blocking(move || {
        terms
            .into_iter()
            .map(|t| history.decide(&t).map(|v| (t, v)))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ReplyHeader::status(Status::Internal, e.to_string()))?
    .map_err(|e| match e {
        crate::history::ParentError::History(e) => {
            ReplyHeader::status(Status::Internal, e.to_string())
        }
        paired => ReplyHeader::status(Status::Invalid, format!("dependency {paired}")),
    })?;
    let verdict_of = |t: &dependency::Term| {
        decided
            .iter()
            .find(|(d, _)| d == t)
            .and_then(|(_, v)| v.clone())
    };
    match dependency::settle(&expr, &verdict_of) {
        Settled::Waits(left) => spec.dependency = Some(left),
        Settled::Met => {
            spec.dependency = None;
            spec.kill_on_invalid_dep = None;
        }
        Settled::Never(why) => {
            return Err(ReplyHeader::status(
                Status::Invalid,
                format!(
                    "dependency {expr}: {} (it retired to history)",
                    dependency::never_reason(&why)
                ),
            ))
        }
    }
    Ok(())
}

/// The script bytes a submit carries, checked against its spec's id and the size limit.
fn script_of(
    spec: &xce_client::types::JobSpec,
    body: &[u8],
    max: usize,
) -> Result<Option<std::sync::Arc<[u8]>>, String> {
    use xce_client::script::check;
    let env = xce_client::export::size(&spec.env);
    match spec.script {
        None if body.is_empty() && env > max => Err(format!(
            "env: {env} bytes, over the {max} bytes a job may hold (jobs.max_script_bytes)"
        )),
        None if body.is_empty() => Ok(None),
        None => Err("script: bytes sent for a job that names no script".into()),
        Some(id) => {
            check(body, max).map_err(|e| format!("script: {e}"))?;
            // The job's environment is stored with it: the two share one budget.
            if body.len() + env > max {
                return Err(format!(
                    "script: {} bytes with the job's environment of {env} bytes, over the {max} \
                     bytes a job may hold (jobs.max_script_bytes)",
                    body.len()
                ));
            }
            crate::state::check_script_bytes(id, body)?;
            Ok(Some(body.into()))
        }
    }
}

pub(super) async fn list(
    this: &ControllerService,
    params: controller::ListJobsParams,
    mut results: controller::ListJobsResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let filter = wire::read_filter(p.get_filter()?)?;
    let (after, limit) = (p.get_after(), p.get_limit() as usize);
    let now = now_ms();
    let page = this
        .node
        .read(|s| {
            let mut page = s.jobs_page(&filter, after, limit);
            page.jobs = page
                .jobs
                .into_iter()
                .map(|j| this.as_seen(s.shown(j, now)))
                .collect();
            page
        })
        .await;
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&page));
    if let Ok(page) = page {
        r.set_next(page.next.unwrap_or(0));
        let mut list = r.init_jobs(page.jobs.len() as u32);
        for (i, job) in page.jobs.iter().enumerate() {
            wire::write_job(list.reborrow().get(i as u32), job);
        }
    }
    Ok(())
}

pub(super) async fn info(
    this: &ControllerService,
    params: controller::JobInfoParams,
    mut results: controller::JobInfoResults,
) -> Result<(), capnp::Error> {
    let id = params.get()?.get_job_id();
    let now = now_ms();
    let job = match this
        .node
        .read(|s| s.job(id).map(|j| this.as_seen(s.shown(j.clone(), now))))
        .await
    {
        Ok(Some(job)) => Ok(job),
        // A job no longer live may have retired: its record is in history.
        Ok(None) => match retired_job(this, id).await {
            Some(job) => Ok(this.as_seen(job)),
            None => Err(ReplyHeader::status(
                Status::NoEnt,
                format!("job {id}: no such job"),
            )),
        },
        Err(h) => Err(h),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&job));
    if let Ok(job) = job {
        wire::write_job(r.init_job(), &job);
    }
    Ok(())
}

/// A retired job's record from this controller's history store, if it holds one.
async fn retired_job(this: &ControllerService, id: xce_client::types::JobId) -> Option<Job> {
    let history = this.node.history.clone();
    match tokio::task::spawn_blocking(move || history.job(id)).await {
        Ok(Ok(job)) => job,
        Ok(Err(e)) => {
            tracing::warn!(job = id, error = %e, "history: reading a retired job failed");
            None
        }
        Err(_) => None,
    }
}

pub(super) async fn control(
    this: &ControllerService,
    params: controller::JobControlParams,
    mut results: controller::JobControlResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (token, id) = (wire::read_token(p.get_token()?), p.get_job_id());
    let action: xce_client::types::JobAction = p.get_action()?.into();
    let by = this.own_jobs_only();
    let actor = this.session.borrow().user.clone();
    // A kill of a whole array is the array's own (every cluster version takes it); the
    // rest reach its tasks as an action on them (version 10 on).
    let header = match action != xce_client::types::JobAction::Kill && is_array(this, id) {
        true => {
            let op = TaskOp::Control { action };
            this.write_for_header(tasks_cmd(token, id, None, by, actor, op))
                .await
        }
        // The signal to the worker, if any, follows from the applied entry's events.
        false => {
            let cmd = Command::ControlJob {
                token,
                id,
                action,
                by,
                actor,
            };
            this.write_for_header(cmd).await
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn dispatch(
    this: &ControllerService,
    params: controller::DispatchParams,
    mut results: controller::DispatchResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let cmd = Command::Dispatch {
        token: wire::read_token(p.get_token()?),
        id: p.get_job_id(),
        host: p.get_host()?.to_str()?.to_string(),
    };
    // The dispatch is decided once committed; the start push follows from the applied
    // entry's events without holding up the reply (a slow worker must not slow its
    // scheduler).
    let header = this.write_for_header(cmd).await;
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn update(
    this: &ControllerService,
    params: controller::UpdateJobParams,
    mut results: controller::UpdateJobResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let token = wire::read_token(p.get_token()?);
    let id = p.get_job_id();
    let changes = wire::read_changes(p.get_changes()?)?;
    let by = this.own_jobs_only();
    let checked = match this.node.admit().await {
        Ok(()) => check_update(this, id, &changes, by.is_some()).await,
        Err(h) => Err(h),
    };
    let header = match checked {
        // A whole array's change reaches its waiting tasks and every task of its own.
        Ok(()) if is_array(this, id) => {
            let actor = this.session.borrow().user.clone();
            let op = TaskOp::Update {
                changes,
                throttle: None,
            };
            this.write_for_header(tasks_cmd(token, id, None, by, actor, op))
                .await
        }
        Ok(()) => {
            this.write_for_header(Command::UpdateJob {
                token,
                id,
                by,
                changes,
            })
            .await
        }
        Err(h) => h,
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

/// The cluster's time rules for a change, as at submit: a new limit or queue keeps the job
/// within the cluster's maximum and, for a user, the queue's (an operator may grant more, as
/// Slurm's administrators may). The rest is the apply's to judge.
async fn check_update(
    this: &ControllerService,
    id: xce_client::types::JobId,
    changes: &xce_client::types::JobChanges,
    user_only: bool,
) -> Result<(), ReplyHeader> {
    if changes.queue.is_none() && changes.time_limit_s.is_none() {
        return Ok(());
    }
    let Some(mut spec) = this
        .node
        .read(|s| s.job(id).map(|j| j.spec.clone()))
        .await?
    else {
        // The apply answers `noEnt`.
        return Ok(());
    };
    if let Some(queue) = &changes.queue {
        spec.queue = queue.clone();
    }
    if let Some(limit) = changes.time_limit_s {
        spec.limits.time_limit_s = Some(limit);
    }
    let rules = &this.node.job_rules;
    let queue = spec.queue.clone();
    time_limit::check(&spec, rules.max_time_limit_s)
        .and_then(|()| match user_only {
            true => time_limit::fit_queue(&mut spec, &queue, rules.queue_time(&queue), false),
            false => Ok(()),
        })
        .map_err(|message| ReplyHeader::status(Status::Invalid, message))
}

pub(super) async fn signal(
    this: &ControllerService,
    params: controller::SignalJobParams,
    mut results: controller::SignalJobResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (token, id) = (wire::read_token(p.get_token()?), p.get_job_id());
    let (signal, leader_only) = (p.get_signal(), p.get_leader_only());
    let by = this.own_jobs_only();
    // The push to the worker follows from the applied entry, once.
    let header = match is_array(this, id) {
        // A whole array's signal reaches each of its running tasks.
        true => {
            let actor = this.session.borrow().user.clone();
            let op = TaskOp::Signal {
                signal,
                leader_only,
            };
            this.write_for_header(tasks_cmd(token, id, None, by, actor, op))
                .await
        }
        false => {
            let cmd = Command::SignalJob {
                token,
                id,
                by,
                signal,
                leader_only,
            };
            this.write_for_header(cmd).await
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn script(
    this: &ControllerService,
    params: controller::JobScriptParams,
    mut results: controller::JobScriptResults,
) -> Result<(), capnp::Error> {
    let id = params.get()?.get_job_id();
    let by = this.own_jobs_only();
    let mine = |job: &Job| {
        if by.as_deref().is_some_and(|me| me != job.spec.user) {
            return Err(ReplyHeader::status(
                Status::Perm,
                format!("job {id}: not yours; its script is its owner's to read"),
            ));
        }
        job.spec.script.ok_or_else(|| {
            ReplyHeader::status(
                Status::NoEnt,
                format!("job {id}: runs a command, not a script"),
            )
        })
    };
    let missing = |script| {
        ReplyHeader::status(
            Status::Internal,
            format!("job {id}: its script {script} is not in this controller's state"),
        )
    };
    let live = this
        .node
        .read(|s| {
            s.job(id).map(|job| {
                mine(job).and_then(|script| s.script(&script).ok_or_else(|| missing(script)))
            })
        })
        .await;
    let body = match live {
        Ok(Some(body)) => body.map(|b| b.to_vec()),
        // A retired job's script is kept in history with it.
        Ok(None) => match retired_job(this, id).await {
            Some(job) => mine(&job).and_then(|script| {
                this.node
                    .history
                    .script(&script)
                    .ok()
                    .flatten()
                    .ok_or_else(|| missing(script))
            }),
            None => Err(ReplyHeader::status(
                Status::NoEnt,
                format!("job {id}: no such job"),
            )),
        },
        Err(h) => Err(h),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&body));
    if let Ok(body) = body {
        r.set_script(&body);
    }
    Ok(())
}

/// Whether job `id` is an array's own record, as the state applied here holds it, without a
/// linearizability round: an id's being an array never changes, and a job not applied here
/// yet is taken for a plain one, whose command the apply then judges. A cluster below version
/// 10 cannot store an action on an array's tasks: its arrays are then judged as they always
/// were.
fn is_array(this: &ControllerService, id: xce_client::types::JobId) -> bool {
    this.node.active_version() >= 10 && this.node.applied_is_array(id)
}

fn tasks_cmd(
    token: xce_client::types::RequestToken,
    array: xce_client::types::JobId,
    tasks: Option<xce_client::array::TaskSet>,
    by: Option<String>,
    actor: Option<String>,
    op: TaskOp,
) -> Command {
    Command::ControlTasks {
        token,
        array,
        tasks,
        by,
        actor,
        op,
    }
}

pub(super) async fn control_tasks(
    this: &ControllerService,
    params: controller::ControlTasksParams,
    mut results: controller::ControlTasksResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let token = wire::read_token(p.get_token()?);
    let array = p.get_job_id();
    let op = wire::read_task_op(p.get_op()?)?;
    let text = p.get_tasks()?.to_str()?;
    let tasks = match text.is_empty() {
        true => Ok(None),
        false => text
            .parse::<xce_client::array::TaskSet>()
            .map(Some)
            .map_err(|e| ReplyHeader::status(Status::Invalid, format!("tasks: {e}"))),
    };
    let by = this.own_jobs_only();
    let actor = this.session.borrow().user.clone();
    let header = match tasks {
        Err(h) => h,
        Ok(tasks) => {
            let checked = match &op {
                TaskOp::Update { changes, .. } => match this.node.admit().await {
                    Ok(()) => check_update(this, array, changes, by.is_some()).await,
                    Err(h) => Err(h),
                },
                _ => Ok(()),
            };
            match checked {
                Ok(()) => {
                    this.write_for_header(tasks_cmd(token, array, tasks, by, actor, op))
                        .await
                }
                Err(h) => h,
            }
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn get_task(
    this: &ControllerService,
    params: controller::GetTaskParams,
    mut results: controller::GetTaskResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (array, index) = (p.get_job_id(), p.get_index());
    let now = now_ms();
    let job = match this
        .node
        .read(|s| s.task(array, index).map(|j| this.as_seen(s.shown(j, now))))
        .await
    {
        Ok(Ok(job)) => Ok(job),
        // An array no longer live may have retired with its tasks.
        Ok(Err(message)) if this.node.applied_job(array).is_none() => {
            let history = this.node.history.clone();
            match tokio::task::spawn_blocking(move || history.task(array, index)).await {
                Ok(Ok(Some(job))) => Ok(this.as_seen(job)),
                _ => Err(ReplyHeader::status(Status::NoEnt, message)),
            }
        }
        Ok(Err(message)) => Err(ReplyHeader::status(Status::NoEnt, message)),
        Err(h) => Err(h),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&job));
    if let Ok(job) = job {
        wire::write_job(r.init_job(), &job);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::script_of;
    use xce_client::script::ScriptId;
    use xce_client::types::JobSpec;

    /// A script is checked against its id and the limit, which the job's environment shares.
    #[test]
    fn a_script_and_the_environment_share_one_budget() {
        let body = b"#!/bin/sh\necho hi\n";
        let mut spec = JobSpec {
            script: Some(ScriptId::of(body)),
            ..JobSpec::default()
        };
        assert!(script_of(&spec, body, 100).unwrap().is_some());
        let over = script_of(&spec, body, 10).unwrap_err();
        assert!(over.contains("over the 10 bytes"), "{over}");
        spec.env = vec![("A".into(), "x".repeat(80))];
        let shared = script_of(&spec, body, 100).unwrap_err();
        assert!(shared.contains("environment"), "{shared}");
        assert!(
            script_of(&spec, b"other", 1000).is_err(),
            "bytes of another id"
        );
        let plain = JobSpec::default();
        assert_eq!(script_of(&plain, b"", 100), Ok(None));
        let big_env = JobSpec {
            env: vec![("A".into(), "x".repeat(200))],
            ..JobSpec::default()
        };
        let refused = script_of(&big_env, b"", 100).unwrap_err();
        assert!(refused.starts_with("env: "), "{refused}");
        assert!(script_of(&plain, body, 100).is_err(), "bytes without an id");
    }
}
