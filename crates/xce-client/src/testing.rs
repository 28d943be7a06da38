//! Strategies for arbitrary domain values, for property tests of every boundary a value
//! crosses (the wire here, the stored records in the controller). Each builds its type with
//! a struct literal naming every field, so a field added to a domain type fails to compile
//! here until it is generated, and then fails each boundary's round trip until that boundary
//! carries it (docs/checklists/new-job-field.md).
//!
//! What a boundary cannot tell apart is not generated: empty optional text (the wire's empty
//! text is `None`), zero times and counts (`0` is "none"), and values beyond the wire's
//! signed fields.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

use crate::types::{
    ClusterEvent, ClusterInfo, Host, HostAttributes, HostState, Job, JobEnd, JobFilter, JobResult,
    JobSpec, JobState, JobUsers, Limits, Member, MemberRole, OpenMode, PendCode, PendReason,
    Resources, SchedulerInfo, ScriptId, Warning,
};

/// Text of any characters but control ones, possibly empty.
pub fn text() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{0,12}"
}

/// Text that is not empty: what an optional text field holds when it is set.
pub fn some_text() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{1,12}"
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    option::of(some_text())
}

fn opt_ms() -> impl Strategy<Value = Option<u64>> {
    option::of(1..u64::MAX)
}

/// Any job filter the wire carries (an empty text or a zero time is "any" there).
pub fn job_filter() -> impl Strategy<Value = JobFilter> {
    (
        opt_text(),
        vec(prop::sample::select(JobState::ALL), 0..4),
        opt_text(),
        opt_text(),
        vec(job_result(), 0..4),
        opt_ms(),
    )
        .prop_map(
            |(queue, states, user, name, results, submitted_since_ms)| JobFilter {
                queue,
                states,
                user,
                name,
                results,
                submitted_since_ms,
            },
        )
}

/// Any changes `updateJob` carries (any field set or not, empty texts included).
pub fn job_changes() -> impl Strategy<Value = crate::types::JobChanges> {
    (
        (
            proptest::option::of(".{0,8}"),
            proptest::option::of(any::<i32>()),
            proptest::option::of(".{0,8}"),
            proptest::option::of(any::<u32>()),
        ),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<u64>()),
        ),
    )
        .prop_map(
            |((name, priority, queue, cpus), (mem_mb, time_limit_s, hold, begin_time_ms))| {
                crate::types::JobChanges {
                    name,
                    priority,
                    queue,
                    cpus,
                    mem_mb,
                    time_limit_s,
                    hold,
                    begin_time_ms,
                }
            },
        )
}

/// Any amount of resources the wire carries (cpus and memory within its signed fields).
pub fn resources() -> impl Strategy<Value = Resources> {
    (
        0..=i32::MAX as u32,
        0..=i64::MAX as u64,
        btree_map("[a-z]{1,6}(:[a-z0-9]{1,4})?", 1..u64::MAX, 0..3),
    )
        .prop_map(|(cpus, mem_mb, gres)| Resources { cpus, mem_mb, gres })
}

/// Any limits.
pub fn limits() -> impl Strategy<Value = Limits> {
    option::of(1..=u32::MAX).prop_map(|time_limit_s| Limits { time_limit_s })
}

/// Any job spec.
pub fn spec() -> impl Strategy<Value = JobSpec> {
    (
        (text(), text(), text()),
        vec(text(), 0..4),
        vec((some_text(), text()), 0..3),
        text(),
        resources(),
        any::<i32>(),
        limits(),
        script_fields(),
        (
            option::of(dependency()),
            option::of(any::<bool>()),
            option::of(array_spec()),
            text(),
        ),
    )
        .prop_map(
            |(
                (name, user, queue),
                command,
                env,
                cwd,
                resources,
                priority,
                limits,
                script,
                (dependency, kill_on_invalid_dep, array, account),
            )| {
                let ScriptFields {
                    script,
                    stdout,
                    stderr,
                    open_mode,
                    hold,
                    begin_time_ms,
                    warn_signal,
                    no_requeue,
                } = script;
                JobSpec {
                    name,
                    user,
                    queue,
                    command,
                    env,
                    cwd,
                    resources,
                    priority,
                    limits,
                    script,
                    stdout,
                    stderr,
                    open_mode,
                    hold,
                    begin_time_ms,
                    warn_signal,
                    no_requeue,
                    dependency,
                    kill_on_invalid_dep,
                    array,
                    account,
                }
            },
        )
}

/// The spec fields of a batch job (store format 8), generated together.
#[derive(Debug, Clone)]
struct ScriptFields {
    script: Option<ScriptId>,
    stdout: Option<String>,
    stderr: Option<String>,
    open_mode: Option<OpenMode>,
    hold: bool,
    begin_time_ms: Option<u64>,
    warn_signal: Option<Warning>,
    no_requeue: bool,
}

fn script_fields() -> impl Strategy<Value = ScriptFields> {
    (
        option::of(any::<[u8; 32]>().prop_map(ScriptId)),
        (opt_text(), opt_text()),
        option::of(prop::sample::select(OpenMode::ALL)),
        (any::<bool>(), opt_ms(), any::<bool>()),
        option::of(warning()),
    )
        .prop_map(
            |(
                script,
                (stdout, stderr),
                open_mode,
                (hold, begin_time_ms, no_requeue),
                warn_signal,
            )| {
                ScriptFields {
                    script,
                    stdout,
                    stderr,
                    open_mode,
                    hold,
                    begin_time_ms,
                    warn_signal,
                    no_requeue,
                }
            },
        )
}

/// Any dependency `--dependency` can say (one level of all or any: Slurm's syntax has no
/// nesting), so that its text reads back the same.
pub fn dependency() -> impl Strategy<Value = crate::dependency::Expr> {
    use crate::dependency::{Expr, Kind, Term};
    let kind = prop::sample::select(vec![
        Kind::After,
        Kind::AfterAny,
        Kind::AfterOk,
        Kind::AfterNotOk,
    ]);
    let tasks = option::of(
        (0u32..50, 0u32..20, 1u32..4)
            .prop_filter_map("a run", |(a, n, s)| crate::array::Run::new(a, a + n, s))
            .prop_map(|run| {
                let mut set = crate::array::TaskSet::new();
                set.insert_run(run);
                set
            }),
    );
    let on = (kind, 1u64..1_000_000, tasks).prop_map(|(kind, id, tasks)| {
        Expr::Term(Term::On(kind, crate::array::JobRef { id, tasks }))
    });
    let corr = (1u64..1_000_000).prop_map(|id| {
        Expr::Term(Term::On(
            Kind::AfterCorr,
            crate::array::JobRef { id, tasks: None },
        ))
    });
    let term = prop_oneof![
        6 => on,
        1 => corr,
        1 => Just(Expr::Term(Term::Singleton)),
    ];
    prop_oneof![
        term.clone(),
        (vec(term.clone(), 2..4), any::<bool>()).prop_map(|(parts, any)| if any {
            Expr::Any(parts)
        } else {
            Expr::All(parts)
        }),
    ]
}

/// Any task set of a few runs (the wire and the store carry it as its text).
pub fn task_set() -> impl Strategy<Value = crate::array::TaskSet> {
    vec(
        (0u32..1_000, 0u32..200, 1u32..5)
            .prop_filter_map("a run", |(a, n, s)| crate::array::Run::new(a, a + n, s)),
        0..4,
    )
    .prop_map(|runs| {
        let mut set = crate::array::TaskSet::new();
        for run in runs {
            set.insert_run(run);
        }
        set
    })
}

/// Any array spec: some tasks, and maybe a throttle.
pub fn array_spec() -> impl Strategy<Value = crate::array::ArraySpec> {
    (
        task_set().prop_filter("some tasks", |t| !t.is_empty()),
        option::of(1u32..100),
    )
        .prop_map(|(tasks, throttle)| crate::array::ArraySpec { tasks, throttle })
}

/// Any progress of an array's own record.
pub fn array_progress() -> impl Strategy<Value = crate::types::ArrayProgress> {
    (task_set(), any::<[u32; 5]>()).prop_map(
        |(pending, [waiting, running, completed, failed, unrun])| crate::types::ArrayProgress {
            pending,
            waiting: waiting.into(),
            running: running.into(),
            completed: completed.into(),
            failed: failed.into(),
            unrun: unrun.into(),
        },
    )
}

/// Any task's view of its array.
pub fn array_task() -> impl Strategy<Value = crate::types::ArrayTask> {
    (any::<u64>(), any::<[u32; 4]>(), any::<u64>()).prop_map(
        |(array_id, [index, min, max, step], count)| crate::types::ArrayTask {
            array_id,
            index,
            count,
            min,
            max,
            step,
        },
    )
}

/// Any warning signal the wire carries (signal 0 is none there).
pub fn warning() -> impl Strategy<Value = Warning> {
    (1..=crate::signals::MAX_SIGNAL, any::<u32>(), any::<bool>()).prop_map(
        |(signal, before_s, leader_only)| Warning {
            signal,
            before_s,
            leader_only,
        },
    )
}

/// Any job.
pub fn job() -> impl Strategy<Value = Job> {
    (
        (any::<u64>(), spec(), prop::sample::select(JobState::ALL)),
        (opt_text(), option::of(pend_code()), opt_text()),
        (
            option::of(job_result()),
            opt_text(),
            any::<u32>(),
            any::<u32>(),
        ),
        (option::of(any::<i32>()), option::of(any::<i32>())),
        (any::<u64>(), opt_ms(), opt_ms(), opt_text()),
        (
            opt_text(),
            option::of(prop::sample::select(crate::types::DependencyState::ALL)),
            option::of(array_progress()),
            option::of(array_task()),
            opt_ms(),
            option::of(usage()),
        ),
        prop::collection::vec(attempt_run(), 0..3),
    )
        .prop_map(
            |(
                (id, spec, state),
                (pend_reason, pend_code, reason),
                (result, host, attempt, runs),
                (exit_code, signal),
                (submit_time_ms, start_time_ms, end_time_ms, output_dir),
                (cancelled_by, dependency_state, array, array_task, expected_start_ms, usage),
                attempts,
            )| Job {
                id,
                spec,
                state,
                pend_reason,
                pend_code,
                reason,
                result,
                host,
                attempt,
                // At most its attempts.
                runs: runs.min(attempt),
                exit_code,
                signal,
                submit_time_ms,
                start_time_ms,
                end_time_ms,
                output_dir,
                cancelled_by,
                dependency_state,
                array,
                array_task,
                expected_start_ms,
                usage,
                attempts,
            },
        )
}

/// Any usage of an attempt.
pub fn usage() -> impl Strategy<Value = crate::types::Usage> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(cpu_user_ms, cpu_sys_ms, max_rss_kb)| {
        crate::types::Usage {
            cpu_user_ms,
            cpu_sys_ms,
            max_rss_kb,
        }
    })
}

/// Any record of an attempt that started (an end time of 0 is none on the wire).
pub fn attempt_run() -> impl Strategy<Value = crate::types::AttemptRun> {
    (
        (any::<u32>(), "[a-z0-9.-]{1,12}", any::<u64>(), opt_ms()),
        (
            option::of(any::<i32>()),
            option::of(any::<i32>()),
            opt_text(),
            option::of(usage()),
        ),
    )
        .prop_map(
            |((attempt, host, start_ms, end_ms), (exit_code, signal, reason, usage))| {
                crate::types::AttemptRun {
                    attempt,
                    host,
                    start_ms,
                    end_ms,
                    exit_code,
                    signal,
                    reason,
                    usage,
                }
            },
        )
}

/// Any pending code.
pub fn pend_code() -> impl Strategy<Value = PendCode> {
    prop::sample::select(PendCode::ALL)
}

/// Any result.
pub fn job_result() -> impl Strategy<Value = JobResult> {
    prop::sample::select(JobResult::ALL)
}

/// Any reason a pending job waits.
pub fn pend_reason() -> impl Strategy<Value = PendReason> {
    (pend_code(), text(), opt_ms()).prop_map(|(code, text, expected_start_ms)| PendReason {
        code,
        text,
        expected_start_ms,
    })
}

/// Whose jobs a host runs.
pub fn job_users() -> impl Strategy<Value = JobUsers> {
    prop_oneof![
        Just(JobUsers::Any),
        any::<bool>().prop_map(|root| JobUsers::EachUser { root }),
        text().prop_map(JobUsers::Only),
    ]
}

/// Any host as reported.
pub fn host() -> impl Strategy<Value = Host> {
    (
        text(),
        resources(),
        prop::sample::select(HostState::ALL),
        any::<u32>(),
        resources(),
        job_users(),
        any::<bool>(),
    )
        .prop_map(
            |(name, capacity, state, running, used, job_users, queues_starts)| Host {
                name,
                capacity,
                state,
                running,
                used,
                job_users,
                queues_starts,
            },
        )
}

/// Any host attributes a worker reports.
pub fn attributes() -> impl Strategy<Value = HostAttributes> {
    (text(), resources(), text(), job_users()).prop_map(
        |(name, resources, spool_dir, job_users)| HostAttributes {
            name,
            resources,
            spool_dir,
            job_users,
        },
    )
}

/// Any way an attempt ends.
pub fn end() -> impl Strategy<Value = JobEnd> {
    prop_oneof![
        any::<i32>().prop_map(JobEnd::Exit),
        any::<i32>().prop_map(JobEnd::Signal),
        text().prop_map(JobEnd::Failed),
        Just(JobEnd::OutOfMemory),
        (option::of(any::<i32>()), option::of(any::<i32>()))
            .prop_map(|(exit_code, signal)| JobEnd::TimedOut { exit_code, signal }),
    ]
}

/// Any event a subscriber sees.
pub fn event() -> impl Strategy<Value = ClusterEvent> {
    let job = (
        (
            any::<u64>(),
            any::<u64>(),
            prop::sample::select(JobState::ALL),
            option::of((any::<u64>(), any::<u32>())),
        ),
        (opt_text(), any::<u32>(), text(), text()),
        (
            opt_text(),
            option::of(pend_code()),
            opt_text(),
            option::of(job_result()),
        ),
    )
        .prop_map(
            |(
                (index, id, state, task),
                (host, attempt, queue, user),
                (pend_reason, pend_code, reason, result),
            )| ClusterEvent::Job {
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
            },
        );
    let host = (any::<u64>(), text(), prop::sample::select(HostState::ALL))
        .prop_map(|(index, name, state)| ClusterEvent::Host { index, name, state });
    let queue = (
        any::<u64>(),
        text(),
        any::<i32>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(index, name, priority, open, active)| ClusterEvent::Queue {
                index,
                name,
                priority,
                open,
                active,
            },
        );
    prop_oneof![job, host, queue]
}

/// Any cluster report.
pub fn cluster() -> impl Strategy<Value = ClusterInfo> {
    let member = (
        text(),
        text(),
        prop::sample::select(MemberRole::ALL),
        option::of(1..=u32::MAX),
    )
        .prop_map(|(name, addr, role, version)| Member {
            name,
            addr,
            role,
            version,
        });
    let scheduler =
        (text(), any::<bool>()).prop_map(|(name, active)| SchedulerInfo { name, active });
    (
        opt_text(),
        any::<u64>(),
        vec(member, 0..4),
        vec(scheduler, 0..3),
        any::<u32>(),
        option::of(1..=u32::MAX),
    )
        .prop_map(
            |(primary, term, members, schedulers, active_version, hold_version)| ClusterInfo {
                primary,
                term,
                members,
                schedulers,
                active_version,
                hold_version,
            },
        )
}
