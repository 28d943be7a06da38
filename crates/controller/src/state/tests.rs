//! Properties of the whole state machine over random command sequences: determinism,
//! idempotence, events that match every change, indexes that match a recount, and paging.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use xce_client::types::{
    HeldJob, HeldPhase, HostAttributes, HostState, Job, JobAction, JobEnd, JobFilter, JobId,
    JobSpec, JobState, PendCode, PendReason, Placement, QueueAction, RequestToken,
};

use super::*;

#[test]
fn token_window_is_bounded() {
    let mut w = TokenWindow::default();
    for t in 0..(TOKEN_WINDOW as u128 + 10) {
        w.remember(RequestToken(t), Outcome::Done);
    }
    assert_eq!(w.outcomes.len(), TOKEN_WINDOW);
    assert!(w.get(&RequestToken(0)).is_none());
    assert!(w.get(&RequestToken(TOKEN_WINDOW as u128 + 9)).is_some());
}

/// A page is bounded in jobs returned and in jobs looked at: a filter that matches nothing
/// for a long stretch returns an empty page with a cursor, and the listing still ends with
/// every match.
#[test]
fn pages_are_bounded_in_size_and_in_jobs_scanned() {
    let mut s = State::default();
    s.apply(
        0,
        Command::Barrier {
            term: 1,
            queues: vec![QueueDef {
                name: "x".into(),
                priority: 1,
                on_host_lost: LostPolicy::Requeue,
            }],
        },
    );
    let n = MAX_PAGE_SCAN as u128 + 10;
    for t in 0..n {
        let spec = JobSpec {
            command: vec!["true".into()],
            queue: if t + 3 >= n {
                "x".into()
            } else {
                String::new()
            },
            ..JobSpec::default()
        };
        s.apply(
            0,
            Command::Submit {
                token: RequestToken(t),
                spec,
                script: None,
            },
        );
    }
    let all = s.jobs_page(&JobFilter::default(), 0, 1_000_000);
    assert_eq!(
        (all.jobs.len(), all.next),
        (MAX_PAGE, Some(MAX_PAGE as u64))
    );
    let in_x = JobFilter {
        queue: Some("x".into()),
        ..JobFilter::default()
    };
    let first = s.jobs_page(&in_x, 0, 0);
    assert_eq!(first.jobs, Vec::new());
    assert_eq!(first.next, Some(MAX_PAGE_SCAN as u64));
    let rest = s.jobs_page(&in_x, first.next.unwrap(), 0);
    let ids: Vec<JobId> = rest.jobs.iter().map(|j| j.id).collect();
    let last = n as u64;
    assert_eq!((ids, rest.next), (vec![last - 2, last - 1, last], None));
}

fn command() -> impl Strategy<Value = Command> {
    let token = (0u128..60).prop_map(RequestToken);
    let host = prop_oneof![Just("w1"), Just("w2")].prop_map(String::from);
    let id = 0u64..8;
    let attempt = 0u32..3;
    let action = prop_oneof![
        Just(JobAction::Kill),
        Just(JobAction::Suspend),
        Just(JobAction::Resume),
        Just(JobAction::Requeue)
    ];
    let phase = prop_oneof![
        Just(HeldPhase::Running),
        Just(HeldPhase::Suspended),
        Just(HeldPhase::Finished)
    ];
    let held = (id.clone(), attempt.clone(), phase).prop_map(|(id, attempt, phase)| HeldJob {
        id,
        attempt,
        phase,
    });
    let end = prop_oneof![
        (0i32..3).prop_map(JobEnd::Exit),
        Just(JobEnd::Signal(9)),
        Just(JobEnd::Failed("no".into())),
        Just(JobEnd::OutOfMemory)
    ];
    prop_oneof![
        (
            token.clone(),
            prop::collection::vec("[a-z ]{0,3}", 0..3),
            0u32..3,
            0u64..300,
            prop_oneof![Just(""), Just("normal"), Just("x")]
        )
            .prop_map(|(token, command, cpus, mem_mb, queue)| Command::Submit {
                token,
                spec: JobSpec {
                    command,
                    resources: xce_client::types::Resources::new(cpus, mem_mb),
                    queue: queue.into(),
                    ..JobSpec::default()
                },
                script: None,
            }),
        (token.clone(), id.clone(), action).prop_map(|(token, id, action)| Command::ControlJob {
            token,
            id,
            action,
            by: None,
            actor: None,
        }),
        (
            token.clone(),
            prop_oneof![Just("normal"), Just("x")],
            prop_oneof![
                Just(QueueAction::Open),
                Just(QueueAction::Close),
                Just(QueueAction::Inactivate)
            ]
        )
            .prop_map(|(token, name, action)| Command::ControlQueue {
                token,
                name: name.into(),
                action
            }),
        (
            token.clone(),
            host.clone(),
            1u32..3,
            prop_oneof![Just(0u64), Just(500u64)],
            prop::collection::vec(held, 0..4)
        )
            .prop_map(|(token, name, cpus, mem_mb, held)| {
                Command::RegisterHost {
                    token,
                    host: HostAttributes {
                        name,
                        resources: xce_client::types::Resources::new(cpus, mem_mb),
                        spool_dir: "/spool".into(),
                        job_users: xce_client::types::JobUsers::Any,
                    },
                    held,
                }
            }),
        (host.clone(), any::<bool>())
            .prop_map(|(name, available)| Command::SetHostAvailable { name, available }),
        host.clone().prop_map(|name| Command::HostLost { name }),
        (token.clone(), id.clone(), host.clone()).prop_map(|(token, id, host)| Command::Dispatch {
            token,
            id,
            host
        }),
        (token.clone(), id.clone(), attempt.clone(), host.clone()).prop_map(
            |(token, id, attempt, host)| Command::JobStarted {
                token,
                id,
                attempt,
                host
            }
        ),
        (
            token.clone(),
            prop_oneof![Just("s1"), Just("s2")],
            0u64..2,
            200u32..3000
        )
            .prop_map(
                |(token, name, instance, ttl_ms)| Command::AcquireScheduler {
                    token,
                    name: name.into(),
                    instance,
                    ttl_ms,
                }
            ),
        (
            token.clone(),
            0u64..4,
            prop::collection::vec((id.clone(), host.clone()), 0..4)
        )
            .prop_map(|(token, epoch, placements)| Command::DispatchBatch {
                token,
                epoch,
                placements: placements
                    .into_iter()
                    .map(|(id, host)| Placement { id, host })
                    .collect(),
            }),
        (
            token.clone(),
            0u64..4,
            prop::collection::vec((id.clone(), prop_oneof![Just("a"), Just("b")]), 0..3)
        )
            .prop_map(|(token, epoch, reasons)| Command::SetPendReasons {
                token,
                epoch,
                reasons: reasons
                    .into_iter()
                    .map(|(id, r)| (id, PendReason::new(PendCode::of_v6_text(r), r)))
                    .collect(),
            }),
        (token, id.clone(), attempt, host, end).prop_map(|(token, id, attempt, host, end)| {
            Command::JobFinished {
                token,
                id,
                attempt,
                host,
                end,
                usage: None,
            }
        }),
        prop::collection::vec(id.clone(), 0..3).prop_map(|ids| Command::RetireJobs { ids }),
        (1u64..4).prop_map(|term| Command::Barrier {
            term,
            queues: vec![QueueDef {
                name: "x".into(),
                priority: term as i32,
                on_host_lost: LostPolicy::Exit,
            }],
        }),
    ]
}

/// What must hold after every command, whatever the order of events.
fn check_invariants(s: &State) -> Result<(), TestCaseError> {
    s.check_invariants().map_err(TestCaseError::fail)
}

type Seen = (
    JobState,
    Option<String>,
    u32,
    Option<String>,
    Option<String>,
);

fn seen_jobs(s: &State) -> BTreeMap<JobId, Seen> {
    s.jobs
        .values()
        .map(|j| {
            (
                j.id,
                (
                    j.state,
                    j.host.clone(),
                    j.attempt,
                    j.pend_reason.clone(),
                    j.reason.clone(),
                ),
            )
        })
        .collect()
}

fn host_states(s: &State) -> BTreeMap<String, HostState> {
    s.hosts
        .iter()
        .map(|(n, h)| (n.clone(), h.state()))
        .collect()
}

fn queue_flags_of(s: &State) -> BTreeMap<String, (i32, bool, bool)> {
    s.queues
        .iter()
        .map(|(n, q)| (n.clone(), (q.priority, q.open, q.active)))
        .collect()
}

/// The events of one command are exactly its changes: one job event per job whose state,
/// host, attempt or reasons changed (carrying the new values), one host event per host whose
/// state changed or whose worker joined (`joined`: what it offers may have changed), one
/// queue event per queue whose flags changed, and nothing else.
fn check_events(
    before: &State,
    after: &State,
    events: &[Event],
    joined: Option<&str>,
) -> Result<(), TestCaseError> {
    let (jobs_before, jobs_after) = (seen_jobs(before), seen_jobs(after));
    let changed_jobs: BTreeSet<JobId> = jobs_after
        .iter()
        .filter(|(id, seen)| jobs_before.get(id) != Some(seen))
        .map(|(id, _)| *id)
        .collect();
    let mut job_events = BTreeSet::new();
    let mut host_events = BTreeSet::new();
    let mut queue_events = BTreeSet::new();
    for e in events {
        match e {
            Event::Job {
                id,
                state,
                host,
                attempt,
                queue,
                ..
            } => {
                let job: &Job = after
                    .job(*id)
                    .ok_or_else(|| TestCaseError::fail("no job"))?;
                prop_assert_eq!(
                    (job.state, &job.host, job.attempt, &job.spec.queue),
                    (*state, host, *attempt, queue)
                );
                prop_assert!(job_events.insert(*id), "two events for job {}", id);
            }
            Event::Host { name, state } => {
                prop_assert_eq!(after.host(name).map(HostRecord::state), Some(*state));
                prop_assert!(host_events.insert(name.clone()));
            }
            Event::Queue { name, .. } => {
                prop_assert!(queue_events.insert(name.clone()));
            }
            Event::Push(_) => {}
            Event::Retired { job, .. } => {
                prop_assert!(
                    after.job(job.id).is_none(),
                    "job {} retired, still held",
                    job.id
                );
                prop_assert!(job.state.is_final(), "job {} retired unended", job.id);
            }
        }
    }
    prop_assert_eq!(job_events, changed_jobs);
    let (hb, ha) = (host_states(before), host_states(after));
    let changed_hosts: BTreeSet<String> = ha
        .iter()
        .filter(|(n, s)| hb.get(*n) != Some(s) || joined == Some(n.as_str()))
        .map(|(n, _)| n.clone())
        .collect();
    prop_assert_eq!(host_events, changed_hosts);
    let (qb, qa) = (queue_flags_of(before), queue_flags_of(after));
    let changed_queues: BTreeSet<String> = qa
        .iter()
        .filter(|(n, f)| qb.get(*n) != Some(f))
        .map(|(n, _)| n.clone())
        .collect();
    prop_assert_eq!(queue_events, changed_queues);
    Ok(())
}

fn filter() -> impl Strategy<Value = JobFilter> {
    let state = prop::sample::select(JobState::ALL.to_vec());
    (
        prop_oneof![
            Just(None),
            Just(Some("normal".to_string())),
            Just(Some("x".to_string()))
        ],
        prop::collection::vec(state, 0..3),
        prop_oneof![
            Just(None),
            Just(Some(String::new())),
            Just(Some("bob".to_string()))
        ],
        prop_oneof![Just(None), Just(Some("job".to_string()))],
        prop::collection::vec(xce_client::testing::job_result(), 0..2),
        prop_oneof![Just(None), (0u64..5_000).prop_map(Some)],
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

proptest! {
    /// Replicas that apply the same log agree, and emit the same events; ids are dense and in
    /// order; a final job never changes again; re-applying a whole log changes nothing (every
    /// write is deduplicated by its token); a state restored from its encoding (indexes
    /// rebuilt) is the same state.
    #[test]
    fn apply_is_deterministic_and_idempotent(
        cmds in prop::collection::vec(command(), 0..60),
        retiring in any::<bool>(),
    ) {
        let (mut a, mut b) = (State::default(), State::default());
        // Half the runs at version 13, where ended jobs retire.
        if retiring {
            for s in [&mut a, &mut b] {
                s.apply(0, Command::RaiseVersion { to: xce_client::version::ACCOUNTING });
            }
        }
        for (i, cmd) in cmds.iter().enumerate() {
            // Every command reads back from its stored form as itself, in the newest format
            // and (where it fits) in format 6.
            for format in [crate::store::OLDEST_FORMAT, crate::store::STORE_FORMAT] {
                let Ok(fit) = crate::state::fit_format(format, cmd.clone()) else { continue };
                let batch = crate::store::Batch { at_ms: 5, format, commands: vec![fit] };
                let stored = postcard::to_stdvec(&batch).unwrap();
                prop_assert_eq!(postcard::from_bytes::<crate::store::Batch>(&stored).unwrap(), batch);
            }
            let before = a.clone();
            let requeue = matches!(cmd, Command::ControlJob { action: JobAction::Requeue, .. });
            // A placement, or a worker's rejoin that sends an unconfirmed start again as a
            // new attempt.
            let dispatch = matches!(
                cmd,
                Command::Dispatch { .. } | Command::DispatchBatch { .. } | Command::RegisterHost { .. }
            );
            let (oa, ea) = a.apply_emitting(i as u64, cmd.clone());
            let (ob, eb) = b.apply_emitting(i as u64, cmd.clone());
            prop_assert_eq!(&oa, &ob);
            prop_assert_eq!(&ea, &eb);
            let joined = match (&cmd, &oa) {
                (_, Outcome::Rejected { .. } | Outcome::Duplicate(_)) => None,
                (Command::RegisterHost { host, .. }, _) => Some(host.name.as_str()),
                _ => None,
            };
            check_events(&before, &a, &ea, joined)?;
            if matches!(oa, Outcome::Rejected { .. } | Outcome::Duplicate(_)) {
                prop_assert_eq!(&ea, &Vec::new());
            }
            // Only an operator's requeue brings a final job back; one that retired is gone.
            let retire = matches!(cmd, Command::RetireJobs { .. });
            if !requeue {
                for j in before.jobs.values().filter(|j| j.state.is_final()) {
                    if !(retire && a.job(j.id).is_none()) {
                        prop_assert_eq!(a.job(j.id), Some(&**j));
                    }
                }
            }
            // Attempts only grow, and only by a dispatch (or a rejoin's resend), which pushes
            // that attempt's start.
            for j in before.jobs.values() {
                let now = a.job(j.id).map(|j| j.attempt).unwrap_or(0);
                prop_assert!(now == j.attempt || (dispatch && now == j.attempt + 1));
                if now != j.attempt {
                    let start = Event::Push(Push::Start {
                        host: a.job(j.id).and_then(|j| j.host.clone()).unwrap_or_default(),
                        id: j.id,
                        attempt: now,
                    });
                    prop_assert!(ea.contains(&start), "{:?}", ea);
                }
            }
            // A dispatch that was accepted left its host within its cpus and memory.
            let placed: Vec<&String> = match (cmd, &oa) {
                (Command::Dispatch { host, .. }, Outcome::Done) => vec![host],
                // Only the placements made: a refused one says nothing of its host (which a
                // re-registration may have shrunk under its jobs).
                (Command::DispatchBatch { placements, .. }, Outcome::Placed { refused }) => {
                    placements
                        .iter()
                        .filter(|p| !refused.iter().any(|r| r.id == p.id))
                        .map(|p| &p.host)
                        .collect()
                }
                _ => vec![],
            };
            for host in placed {
                let Some(h) = a.host(host) else { continue };
                let load = a.host_load(host);
                prop_assert!(load.cpus <= h.resources.cpus, "{:?} {:?}", h, load);
                prop_assert!(load.mem_mb <= h.resources.mem_mb || load.mem_mb == 0, "{:?} {:?}", h, load);
            }
            check_invariants(&a)?;
        }
        prop_assert_eq!(&a, &b);
        // Ids are dense but for those retired, which are counted.
        let ids: Vec<JobId> = a.jobs.keys().copied().collect();
        prop_assert!(ids.iter().all(|id| (1..a.next_job_id).contains(id)));
        prop_assert_eq!(ids.len() as u64 + a.retired_seq(), a.next_job_id - 1);
        // The streamed snapshot is exactly its record's encoding in the cluster's version.
        let encoded = a.snapshot_bytes().unwrap();
        let record = a.clone().into_record();
        let expected = match a.active_version() {
            6 => postcard::to_stdvec(&super::stored::migrate::downgrade_state_6(record).unwrap()).unwrap(),
            7 => crate::store::format::encode_marked(7, &super::stored::migrate::downgrade_state_7(record).unwrap()).unwrap(),
            format => crate::store::format::encode_marked(format, &record).unwrap(),
        };
        prop_assert_eq!(&encoded, &expected);
        let restored = State::try_from_record(super::decode_state(&encoded).unwrap()).unwrap();
        prop_assert_eq!(&restored, &a);
        // Liveness commands carry no token: the primary proposes them from fresh state.
        let snapshot = a.clone();
        for cmd in cmds.into_iter().filter(|c| c.token().is_some()) {
            let (_, events) = a.apply_emitting(0, cmd);
            prop_assert_eq!(events, Vec::new());
        }
        prop_assert_eq!(a, snapshot);
    }

    /// Paging through a listing while jobs are being submitted returns every matching job
    /// exactly once, in id order: the pages together are the filtered set as it stands when
    /// the last page is read.
    #[test]
    fn pages_together_are_exactly_the_filtered_set(
        cmds in prop::collection::vec(command(), 0..60),
        filter in filter(),
        limit in 0usize..5,
        submits_between in 0u128..4,
    ) {
        let mut s = State::default();
        for (i, cmd) in cmds.into_iter().enumerate() {
            s.apply(i as u64, cmd);
        }
        let mut token = 10_000u128;
        let mut seen = Vec::new();
        let mut after = 0;
        for round in 0..1000 {
            let page = s.jobs_page(&filter, after, limit);
            let most = if limit == 0 { DEFAULT_PAGE } else { limit };
            prop_assert!(page.jobs.len() <= most);
            seen.extend(page.jobs.iter().map(|j| j.id));
            match page.next {
                Some(next) => after = next,
                None => break,
            }
            // Submits stop after a while, so that the listing can catch up and end.
            for _ in 0..if round < 20 { submits_between } else { 0 } {
                token += 1;
                s.apply(0, Command::Submit {
                    token: RequestToken(token),
                    spec: JobSpec { command: vec!["true".into()], ..JobSpec::default() },
                    script: None,
                });
            }
        }
        let expected: Vec<JobId> = s.jobs.values().filter(|j| filter.matches(j)).map(|j| j.id).collect();
        prop_assert_eq!(seen, expected);
    }
}
