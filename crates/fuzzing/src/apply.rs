//! `State::apply` over arbitrary command sequences, as a forged or corrupt log could hold
//! them (no admission checks ran): the input is read as a program of commands drawn mostly
//! from small pools of names, ids and tokens, so that commands meet each other's jobs and
//! hosts, with arbitrary values mixed in. After every command the state keeps its
//! invariants; applying the same sequence again gives the same state and outcomes; the final
//! state's snapshot reads back equal.

use arbitrary::{Result, Unstructured};
use xce_client::types::{
    HeldJob, HeldPhase, HostAction, HostAttributes, Job, JobAction, JobChanges, JobEnd, JobSpec,
    JobState, JobUsers, Limits, OpenMode, PendCode, PendReason, Placement, QueueAction,
    RequestToken, Resources, Role, ScriptId, TaskOp, Warning,
};
use xce_controller::state::{
    decode_state, fit_format, Command, EndIntentRecord, JobRecord, LostPolicy, QueueDef, State,
    StateRecord,
};

const HOSTS: &[&str] = &["w1", "w2", "w3"];
const QUEUES: &[&str] = &["normal", "high", "low"];
const USERS: &[&str] = &["alice", "bob", "root"];
const TOKEN_IDS: &[&str] = &["0123456789abcdef", "fedcba9876543210"];
/// Job scripts: submits name them by id, sending their bytes or not.
const SCRIPTS: &[&[u8]] = &[b"#!/bin/sh\necho one\n", b"echo two\n"];

/// Fuzzes `State::apply` from an empty state.
pub fn run(data: &[u8]) {
    apply_all(State::default(), data);
}

/// Applies the commands `data` describes to `state`, checking after each one.
pub fn apply_all(state: State, data: &[u8]) {
    let Ok(program) = program(&mut Unstructured::new(data)) else {
        return;
    };
    let mut first = state.clone();
    let mut outcomes = Vec::new();
    let mut applied = Vec::new();
    for (at_ms, cmd) in program {
        // What a log of the cluster's version can hold: a log of format 6 holds no pending
        // code, for one, only a text it is derived from (as the proposer fits what it proposes).
        let Ok(cmd) = fit_format(first.active_version(), cmd) else {
            continue;
        };
        outcomes.push(first.apply(at_ms, cmd.clone()));
        if let Err(e) = first.check_invariants() {
            panic!("after {cmd:?} at {at_ms}: {e}");
        }
        applied.push((at_ms, cmd));
    }
    let program = applied;
    let mut second = state;
    for ((at_ms, cmd), outcome) in program.iter().zip(&outcomes) {
        assert_eq!(&second.apply(*at_ms, cmd.clone()), outcome, "{cmd:?}");
    }
    assert_eq!(second, first, "apply is deterministic");
    let Ok(bytes) = first.snapshot_bytes() else {
        panic!("a state does not encode");
    };
    match decode_state(&bytes).map(State::try_from_record) {
        Ok(Ok(back)) => assert_eq!(back, first, "a snapshot reads back the same"),
        other => panic!("the snapshot of an applied state is refused: {other:?}"),
    }
}

/// The commands and their times.
fn program(u: &mut Unstructured<'_>) -> Result<Vec<(u64, Command)>> {
    let mut at_ms: u64 = 1_000;
    let mut out = Vec::new();
    while !u.is_empty() && out.len() < 64 {
        at_ms = match u.int_in_range(0..=15u8)? {
            // A clock that jumps, in either direction, or to the ends of time.
            0 => u.arbitrary()?,
            _ => at_ms.saturating_add(u.int_in_range(0..=5_000)?),
        };
        out.push((at_ms, command(u)?));
    }
    Ok(out)
}

fn pick(u: &mut Unstructured<'_>, pool: &[&str]) -> Result<String> {
    // Mostly from the pool; now and then anything at all.
    if u.ratio(1, 12)? {
        return u.arbitrary();
    }
    Ok((*u.choose(pool)?).to_string())
}

fn job_id(u: &mut Unstructured<'_>) -> Result<u64> {
    if u.ratio(1, 16)? {
        return u.arbitrary();
    }
    u.int_in_range(0..=12)
}

fn attempt(u: &mut Unstructured<'_>) -> Result<u32> {
    if u.ratio(1, 16)? {
        return u.arbitrary();
    }
    u.int_in_range(0..=4)
}

fn token(u: &mut Unstructured<'_>) -> Result<RequestToken> {
    // A small pool, so that tokens repeat and replays are exercised.
    Ok(RequestToken(u128::from(u.int_in_range(0..=40u8)?)))
}

fn small_or_any_i32(u: &mut Unstructured<'_>, max: i32) -> Result<i32> {
    if u.ratio(1, 10)? {
        return u.arbitrary();
    }
    u.int_in_range(0..=max)
}

fn spec(u: &mut Unstructured<'_>) -> Result<JobSpec> {
    Ok(JobSpec {
        name: pick(u, &["job"])?,
        user: pick(u, USERS)?,
        queue: pick(u, QUEUES)?,
        command: vec!["true".into()],
        env: if u.ratio(1, 8)? {
            u.arbitrary()?
        } else {
            Vec::new()
        },
        cwd: String::new(),
        resources: resources(u, 4, 2048)?,
        priority: small_or_any_i32(u, 100)?,
        limits: Limits {
            time_limit_s: if u.ratio(1, 6)? {
                Some(u.int_in_range(1..=100)?)
            } else {
                None
            },
        },
        script: if u.ratio(1, 4)? {
            Some(ScriptId::of(u.choose(SCRIPTS)?))
        } else {
            None
        },
        stdout: if u.ratio(1, 8)? {
            Some(pick(u, &["%x-%j.out", "out", "%q"])?)
        } else {
            None
        },
        stderr: None,
        open_mode: if u.ratio(1, 8)? {
            Some(*u.choose(OpenMode::ALL)?)
        } else {
            None
        },
        hold: u.ratio(1, 6)?,
        begin_time_ms: if u.ratio(1, 6)? {
            Some(u.int_in_range(0..=10_000)?)
        } else {
            None
        },
        warn_signal: if u.ratio(1, 8)? {
            Some(Warning {
                signal: u.int_in_range(-1..=70)?,
                before_s: u.arbitrary()?,
                leader_only: u.arbitrary()?,
            })
        } else {
            None
        },
        no_requeue: u.ratio(1, 6)?,
        dependency: if u.ratio(1, 4)? {
            Some(dependency(u)?)
        } else {
            None
        },
        kill_on_invalid_dep: if u.ratio(1, 3)? {
            Some(u.arbitrary()?)
        } else {
            None
        },
        array: if u.ratio(1, 5)? {
            let first = u.int_in_range(0..=5u32)?;
            let text = format!(
                "{first}-{}%{}",
                first + u.int_in_range(0..=6)?,
                u.int_in_range(1..=3)?
            );
            Some(
                text.parse()
                    .map_err(|_| arbitrary::Error::IncorrectFormat)?,
            )
        } else {
            None
        },
        account: pick(u, &["", "", "physics"])?,
    })
}

/// A dependency on jobs of the small id pool (some not there), of every type, joined by all
/// or any.
fn dependency(u: &mut Unstructured<'_>) -> Result<xce_client::dependency::Expr> {
    let kinds = [
        "after",
        "afterany",
        "afterok",
        "afternotok",
        "aftercorr",
        "singleton",
    ];
    let mut terms = Vec::new();
    for _ in 0..u.int_in_range(1..=3)? {
        let kind = *u.choose(&kinds)?;
        let id = u.int_in_range(0..=12u64)?;
        // Some tasks of an array (version 11), by one index or a range.
        let tasks = match u.int_in_range(0..=3u8)? {
            0 => format!("_{}", u.int_in_range(0..=6u32)?),
            1 => {
                let from = u.int_in_range(0..=6u32)?;
                format!("_[{from}-{}]", from + u.int_in_range(0..=3u32)?)
            }
            _ => String::new(),
        };
        terms.push(match kind {
            "singleton" => kind.to_string(),
            "aftercorr" => format!("{kind}:{id}"),
            _ => format!("{kind}:{id}{tasks}"),
        });
    }
    let sep = if u.arbitrary()? { "," } else { "?" };
    terms
        .join(sep)
        .parse()
        .map_err(|_| arbitrary::Error::IncorrectFormat)
}

/// A submit, with the script's bytes or (as when the primary holds them) without.
fn submit(u: &mut Unstructured<'_>) -> Result<Command> {
    let spec = spec(u)?;
    let script = match spec.script {
        Some(id) if u.ratio(3, 4)? => SCRIPTS
            .iter()
            .find(|s| ScriptId::of(s) == id)
            .map(|s| std::sync::Arc::from(*s)),
        _ if u.ratio(1, 20)? => Some(std::sync::Arc::from(*u.choose(SCRIPTS)?)),
        _ => None,
    };
    Ok(Command::Submit {
        token: token(u)?,
        spec,
        script,
    })
}

fn maybe<T>(
    u: &mut Unstructured<'_>,
    value: impl FnOnce(&mut Unstructured<'_>) -> Result<T>,
) -> Result<Option<T>> {
    if u.ratio(1, 3)? {
        Ok(Some(value(u)?))
    } else {
        Ok(None)
    }
}

/// `xce update` with a few of its changes.
fn update(u: &mut Unstructured<'_>) -> Result<Command> {
    let changes = JobChanges {
        name: maybe(u, |u| pick(u, &["renamed"]))?,
        priority: maybe(u, |u| small_or_any_i32(u, 100))?,
        queue: maybe(u, |u| pick(u, QUEUES))?,
        cpus: maybe(u, |u| u.int_in_range(0..=4))?,
        mem_mb: maybe(u, |u| u.int_in_range(0..=2048))?,
        time_limit_s: maybe(u, |u| u.int_in_range(0..=100))?,
        hold: maybe(u, |u| u.arbitrary())?,
        begin_time_ms: maybe(u, |u| u.int_in_range(0..=10_000))?,
    };
    Ok(Command::UpdateJob {
        token: token(u)?,
        id: job_id(u)?,
        by: maybe(u, |u| pick(u, USERS))?,
        changes,
    })
}

/// cpus and memory up to the bounds, now and then any; now and then a generic resource.
fn resources(u: &mut Unstructured<'_>, cpus: u32, mem_mb: u64) -> Result<Resources> {
    let mut r = Resources::new(
        if u.ratio(1, 10)? {
            u.arbitrary()?
        } else {
            u.int_in_range(0..=cpus)?
        },
        if u.ratio(1, 10)? {
            u.arbitrary()?
        } else {
            u.int_in_range(0..=mem_mb)?
        },
    );
    if u.ratio(1, 8)? {
        r.set_gres(
            pick(u, &["gpu", "gpu:a100", "nvme"])?.as_str(),
            u.int_in_range(0..=3)?,
        );
    }
    Ok(r)
}

fn job_users(u: &mut Unstructured<'_>) -> Result<JobUsers> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => JobUsers::Any,
        1 => JobUsers::EachUser {
            root: u.arbitrary()?,
        },
        _ => JobUsers::Only(pick(u, USERS)?),
    })
}

fn held(u: &mut Unstructured<'_>) -> Result<Vec<HeldJob>> {
    let n = u.int_in_range(0..=3)?;
    (0..n)
        .map(|_| {
            Ok(HeldJob {
                id: job_id(u)?,
                attempt: attempt(u)?,
                phase: *u.choose(&[
                    HeldPhase::Running,
                    HeldPhase::Suspended,
                    HeldPhase::Finished,
                ])?,
            })
        })
        .collect()
}

fn end(u: &mut Unstructured<'_>) -> Result<JobEnd> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => JobEnd::Exit(u.arbitrary()?),
        1 => JobEnd::Signal(u.arbitrary()?),
        2 => JobEnd::Failed(u.arbitrary()?),
        3 => JobEnd::TimedOut {
            exit_code: u.arbitrary()?,
            signal: u.arbitrary()?,
        },
        _ => JobEnd::OutOfMemory,
    })
}

/// An action on some tasks of an array (or on a whole one, or on a job that is none).
fn control_tasks(u: &mut Unstructured<'_>) -> Result<Command> {
    let tasks = match u.ratio(1, 3)? {
        true => None,
        false => {
            let first = u.int_in_range(0..=8u32)?;
            let text = format!("{first}-{}", first + u.int_in_range(0..=3)?);
            Some(
                text.parse()
                    .map_err(|_| arbitrary::Error::IncorrectFormat)?,
            )
        }
    };
    let op = match u.int_in_range(0..=2u8)? {
        0 => TaskOp::Control {
            action: *u.choose(JobAction::ALL)?,
        },
        1 => {
            let Command::UpdateJob { changes, .. } = update(u)? else {
                return Err(arbitrary::Error::IncorrectFormat);
            };
            TaskOp::Update {
                changes,
                throttle: maybe(u, |u| u.int_in_range(0..=3))?,
            }
        }
        _ => TaskOp::Signal {
            signal: u.int_in_range(-1..=70)?,
            leader_only: u.arbitrary()?,
        },
    };
    Ok(Command::ControlTasks {
        token: token(u)?,
        array: job_id(u)?,
        tasks,
        by: maybe(u, |u| pick(u, USERS))?,
        actor: maybe(u, |u| pick(u, USERS))?,
        op,
    })
}

fn command(u: &mut Unstructured<'_>) -> Result<Command> {
    Ok(match u.int_in_range(0..=18u8)? {
        0 | 1 => submit(u)?,
        16 => update(u)?,
        18 => control_tasks(u)?,
        17 => Command::SignalJob {
            token: token(u)?,
            id: job_id(u)?,
            by: maybe(u, |u| pick(u, USERS))?,
            signal: u.int_in_range(-1..=70)?,
            leader_only: u.arbitrary()?,
        },
        2 => Command::ControlJob {
            token: token(u)?,
            id: job_id(u)?,
            action: *u.choose(JobAction::ALL)?,
            by: if u.arbitrary()? {
                Some(pick(u, USERS)?)
            } else {
                None
            },
            actor: maybe(u, |u| pick(u, USERS))?,
        },
        3 => Command::ControlQueue {
            token: token(u)?,
            name: pick(u, QUEUES)?,
            action: *u.choose(QueueAction::ALL)?,
        },
        4 => Command::RegisterHost {
            token: token(u)?,
            host: HostAttributes {
                name: pick(u, HOSTS)?,
                resources: resources(u, 8, 4096)?,
                spool_dir: "/spool".into(),
                job_users: job_users(u)?,
            },
            held: held(u)?,
        },
        5 => Command::ControlHost {
            token: token(u)?,
            name: pick(u, HOSTS)?,
            action: *u.choose(HostAction::ALL)?,
        },
        6 => Command::SetHostAvailable {
            name: pick(u, HOSTS)?,
            available: u.arbitrary()?,
        },
        7 => Command::Dispatch {
            token: token(u)?,
            id: job_id(u)?,
            host: pick(u, HOSTS)?,
        },
        8 => Command::JobStarted {
            token: token(u)?,
            id: job_id(u)?,
            attempt: attempt(u)?,
            host: pick(u, HOSTS)?,
        },
        9 => Command::JobFinished {
            token: token(u)?,
            id: job_id(u)?,
            attempt: attempt(u)?,
            host: pick(u, HOSTS)?,
            end: end(u)?,
            usage: if u.ratio(1, 2)? {
                Some(xce_client::types::Usage {
                    cpu_user_ms: u.arbitrary()?,
                    cpu_sys_ms: u.arbitrary()?,
                    max_rss_kb: u.arbitrary()?,
                })
            } else {
                None
            },
        },
        10 => Command::HostLost {
            name: pick(u, HOSTS)?,
        },
        11 => Command::Barrier {
            term: u.arbitrary()?,
            queues: (0..u.int_in_range(0..=2)?)
                .map(|_| {
                    Ok(QueueDef {
                        name: pick(u, QUEUES)?,
                        priority: u.arbitrary()?,
                        on_host_lost: *u.choose(&[LostPolicy::Requeue, LostPolicy::Exit])?,
                    })
                })
                .collect::<Result<_>>()?,
        },
        12 => Command::AcquireScheduler {
            token: token(u)?,
            name: pick(u, &["s1", "s2"])?,
            instance: u.int_in_range(0..=2)?,
            ttl_ms: if u.ratio(1, 8)? {
                u.arbitrary()?
            } else {
                u.int_in_range(0..=3_000)?
            },
        },
        13 => Command::DispatchBatch {
            token: token(u)?,
            epoch: epoch(u)?,
            placements: (0..u.int_in_range(0..=4)?)
                .map(|_| {
                    Ok(Placement {
                        id: job_id(u)?,
                        host: pick(u, HOSTS)?,
                    })
                })
                .collect::<Result<_>>()?,
        },
        14 => Command::SetPendReasons {
            token: token(u)?,
            epoch: epoch(u)?,
            reasons: (0..u.int_in_range(0..=3)?)
                .map(|_| {
                    let code = *u.choose(PendCode::ALL)?;
                    let mut reason = PendReason::new(code, pick(u, &["no room"])?);
                    if u.ratio(1, 3)? {
                        reason.expected_start_ms = Some(u.int_in_range(0..=10_000)?);
                    }
                    Ok((job_id(u)?, reason))
                })
                .collect::<Result<_>>()?,
        },
        _ => tokens(u)?,
    })
}

fn epoch(u: &mut Unstructured<'_>) -> Result<u64> {
    if u.ratio(1, 10)? {
        return u.arbitrary();
    }
    u.int_in_range(0..=4)
}

fn tokens(u: &mut Unstructured<'_>) -> Result<Command> {
    if u.ratio(1, 8)? {
        // The cluster's version raised (now and then to one no build knows).
        return Ok(Command::RaiseVersion {
            to: u.int_in_range(5..=13)?,
        });
    }
    if u.ratio(1, 6)? {
        return restore(u);
    }
    if u.ratio(1, 5)? {
        return restore_jobs(u);
    }
    Ok(if u.arbitrary()? {
        Command::CreateToken {
            token: token(u)?,
            id: pick(u, TOKEN_IDS)?,
            user: pick(u, USERS)?,
            role: *u.choose(Role::ALL)?,
            hash: u.arbitrary()?,
            expires_in_ms: u.arbitrary()?,
        }
    } else {
        Command::RevokeToken {
            token: token(u)?,
            id: pick(u, TOKEN_IDS)?,
        }
    })
}

/// A restore of a state decoded from the input (anything that decodes as a record, however
/// broken its rules), or of an empty one.
fn restore(u: &mut Unstructured<'_>) -> Result<Command> {
    let len = u.int_in_range(0..=256usize)?;
    let bytes = u.bytes(len.min(u.len()))?;
    let state = postcard::from_bytes::<StateRecord>(bytes)
        .unwrap_or_else(|_| State::default().into_record());
    Ok(Command::Restore {
        token: token(u)?,
        state: Box::new(state),
    })
}

/// A later part of a restore: jobs in any state on any host, with intents on some (its base
/// token from the same small pool, so it sometimes follows an applied restore).
fn restore_jobs(u: &mut Unstructured<'_>) -> Result<Command> {
    let jobs: Vec<JobRecord> = (0..u.int_in_range(0..=3)?)
        .map(|_| {
            let placed = u.arbitrary::<bool>()?;
            let attempt = attempt(u)?;
            let runs = u.int_in_range(0..=attempt)?;
            Ok(JobRecord::from(Job {
                id: job_id(u)?,
                spec: JobSpec {
                    command: vec!["true".into()],
                    ..JobSpec::default()
                },
                state: *u.choose(JobState::ALL)?,
                pend_reason: None,
                pend_code: None,
                reason: None,
                result: None,
                host: if placed { Some(pick(u, HOSTS)?) } else { None },
                attempt,
                runs,
                exit_code: None,
                signal: None,
                submit_time_ms: 1,
                start_time_ms: None,
                end_time_ms: None,
                output_dir: None,
                cancelled_by: None,
                dependency_state: None,
                array: None,
                array_task: None,
                expected_start_ms: None,
                usage: None,
                attempts: Vec::new(),
            }))
        })
        .collect::<Result<_>>()?;
    let intents = (0..u.int_in_range(0..=2)?)
        .map(|_| {
            let intent = *u.choose(&[EndIntentRecord::Kill, EndIntentRecord::Requeue])?;
            Ok((job_id(u)?, intent))
        })
        .collect::<Result<_>>()?;
    let scripts = if u.ratio(1, 3)? {
        let body = *u.choose(SCRIPTS)?;
        vec![(ScriptId::of(body).0, body.to_vec())]
    } else {
        Vec::new()
    };
    Ok(Command::RestoreJobs {
        token: token(u)?,
        base: token(u)?,
        jobs,
        intents,
        scripts,
    })
}
