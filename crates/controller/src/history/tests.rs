use std::sync::Arc;

use xce_client::history::{HistoryFilter, TimeField};
use xce_client::types::{Job, JobResult, JobSpec, JobState};

use super::{History, Retired};

fn job(id: u64, user: &str, end_ms: u64) -> Job {
    let spec = JobSpec {
        user: user.into(),
        account: format!("{user}-lab"),
        command: vec!["true".into()],
        ..JobSpec::default()
    };
    Job {
        id,
        spec,
        state: JobState::Done,
        pend_reason: None,
        pend_code: None,
        reason: None,
        result: Some(JobResult::Completed),
        host: Some("w1".into()),
        attempt: 1,
        runs: 1,
        exit_code: Some(0),
        signal: None,
        submit_time_ms: end_ms - 10,
        start_time_ms: Some(end_ms - 5),
        end_time_ms: Some(end_ms),
        output_dir: Some("/spool".into()),
        cancelled_by: None,
        dependency_state: None,
        array: None,
        array_task: None,
        expected_start_ms: None,
        usage: None,
        attempts: Vec::new(),
    }
}

fn retired(seq: u64, job: Job) -> Retired {
    Retired {
        seq,
        id: job.id,
        job: Some(Arc::new(job)),
        script: None,
    }
}

fn ids(page: &xce_client::history::HistoryPage) -> Vec<u64> {
    page.jobs.iter().map(|j| j.id).collect()
}

#[test]
fn a_written_job_reads_back_whole_and_rewriting_it_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = History::open(dir.path()).expect("open");
    let a = job(7, "alice", 1_000);
    h.write(vec![retired(1, a.clone())]).expect("write");
    h.write(vec![retired(1, a.clone())]).expect("write again");
    assert_eq!(h.job(7).expect("read"), Some(a));
    assert_eq!(h.len().expect("len"), 1);
    assert_eq!(h.written_seq().expect("mark"), 1);
    // Reopened, it holds the same.
    drop(h);
    let h = History::open(dir.path()).expect("reopen");
    assert_eq!(h.len().expect("len"), 1);
}

#[test]
fn the_mark_stops_at_the_first_missing_sequence_number_and_moves_once_it_is_filled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = History::open(dir.path()).expect("open");
    h.write(vec![
        retired(1, job(1, "a", 10)),
        retired(2, job(2, "a", 10)),
    ])
    .expect("write");
    h.write(vec![retired(4, job(4, "a", 10))]).expect("write");
    assert_eq!(h.written_seq().expect("mark"), 2, "3 is missing");
    h.write(vec![retired(3, job(3, "a", 10))]).expect("write");
    assert_eq!(h.written_seq().expect("mark"), 4);
}

#[test]
fn queries_walk_by_user_account_and_id_range_in_id_order_and_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = History::open(dir.path()).expect("open");
    let jobs: Vec<Retired> = (1..=10)
        .map(|id| {
            retired(
                id,
                job(id, if id % 2 == 0 { "bob" } else { "alice" }, id * 100),
            )
        })
        .collect();
    h.write(jobs).expect("write");
    let alice = HistoryFilter {
        user: Some("alice".into()),
        ..HistoryFilter::default()
    };
    let first = h.query(&alice, 0, 3).expect("query");
    assert_eq!(ids(&first), vec![1, 3, 5]);
    assert_eq!(first.next, 5);
    let second = h.query(&alice, first.next, 3).expect("query");
    assert_eq!(ids(&second), vec![7, 9]);
    assert_eq!(second.next, 0, "the last page");
    let lab = HistoryFilter {
        account: Some("bob-lab".into()),
        first_id: Some(3),
        last_id: Some(8),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&h.query(&lab, 0, 100).expect("query")), vec![4, 6, 8]);
    let ended = HistoryFilter {
        time: TimeField::End,
        since_ms: Some(300),
        until_ms: Some(500),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&h.query(&ended, 0, 100).expect("query")), vec![3, 4, 5]);
    let failed = HistoryFilter {
        results: vec![JobResult::Failed],
        ..HistoryFilter::default()
    };
    let none = h.query(&failed, 0, 100).expect("query");
    assert!(none.jobs.is_empty());
    assert_eq!(none.scanned, 10);
}

#[test]
fn purged_records_leave_their_numbers_and_a_peer_pulling_them_gets_tombstones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = History::open(dir.path()).expect("open");
    let jobs: Vec<Retired> = (1..=3)
        .map(|id| retired(id, job(id, "alice", id * 100)))
        .collect();
    h.write(jobs).expect("write");
    assert_eq!(
        h.purge(250, 100).expect("purge"),
        2,
        "jobs 1 and 2 ended before 250"
    );
    assert_eq!(h.purge(250, 100).expect("purge again"), 0);
    assert_eq!(h.job(1).expect("read"), None);
    let alice = HistoryFilter {
        user: Some("alice".into()),
        ..HistoryFilter::default()
    };
    assert_eq!(ids(&h.query(&alice, 0, 10).expect("query")), vec![3]);
    let pulled = h.range(1, 10, usize::MAX).expect("range");
    let shape: Vec<(u64, u64, bool)> = pulled
        .iter()
        .map(|r| (r.seq, r.id, r.job.is_empty()))
        .collect();
    assert_eq!(shape, vec![(1, 1, true), (2, 2, true), (3, 3, false)]);
    // A controller catching up writes them: its mark passes the tombstones.
    let other = tempfile::tempdir().expect("tempdir");
    let peer = History::open(other.path()).expect("open");
    let retired: Vec<Retired> = pulled
        .into_iter()
        .map(|r| r.retired().expect("decode"))
        .collect();
    peer.write(retired).expect("write");
    assert_eq!(
        (peer.written_seq().expect("mark"), peer.len().expect("len")),
        (3, 1)
    );
}

#[test]
fn a_store_that_does_not_open_is_moved_aside_for_a_new_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(super::FILE), b"not a redb file at all").expect("write");
    let h = History::open_or_replace(dir.path()).expect("a new store");
    assert_eq!(h.len().expect("len"), 0);
    let moved: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("history.redb.corrupt-"))
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
}

mod interleavings {
    //! Retirement, snapshot installs and log replays in any order leave every controller's
    //! history holding each retired job exactly once.

    use proptest::prelude::*;
    use xce_client::types::{JobEnd, JobSpec, RequestToken};

    use super::super::{History, Retired};
    use crate::state::{Command, Event, State};

    #[derive(Debug, Clone)]
    enum Op {
        /// A job is submitted, runs on w1 and ends.
        RunOne,
        /// The primary retires what may retire.
        Retire,
        /// A snapshot is taken of the state as applied.
        Snapshot,
        /// The controller restarts: its state from the last snapshot, the log after it again.
        Restart,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::RunOne),
            2 => Just(Op::Retire),
            1 => Just(Op::Snapshot),
            1 => Just(Op::Restart),
        ]
    }

    /// Applies `cmd`, handing what it retired to `history`.
    fn apply(state: &mut State, history: &History, cmd: Command) {
        let (_, events) = state.apply_emitting(1_000, cmd);
        let retired: Vec<Retired> = events
            .into_iter()
            .filter_map(|e| match e {
                Event::Retired { seq, job, script } => Some(Retired {
                    seq,
                    id: job.id,
                    job: Some(job),
                    script,
                }),
                _ => None,
            })
            .collect();
        history.write(retired).expect("write");
    }

    fn job_commands(id: u64, t: u128) -> Vec<Command> {
        let token = |n: u128| RequestToken(t * 10 + n);
        vec![
            Command::Submit {
                token: token(1),
                spec: JobSpec {
                    command: vec!["true".into()],
                    ..JobSpec::default()
                },
                script: None,
            },
            Command::Dispatch {
                token: token(2),
                id,
                host: "w1".into(),
            },
            Command::JobStarted {
                token: token(3),
                id,
                attempt: 1,
                host: "w1".into(),
            },
            Command::JobFinished {
                token: token(4),
                id,
                attempt: 1,
                host: "w1".into(),
                end: JobEnd::Exit(0),
                usage: None,
            },
        ]
    }

    /// Each retired number held once, by a job the state no longer holds, and the mark at
    /// the state's count.
    fn holds_each_once(state: &State, history: &History) -> Result<(), TestCaseError> {
        let retired = state.retired_seq();
        prop_assert_eq!(history.written_seq().expect("mark"), retired);
        prop_assert_eq!(history.len().expect("len"), retired);
        let pulled = history.range(1, usize::MAX, usize::MAX).expect("range");
        let mut ids: Vec<u64> = pulled.iter().map(|r| r.id).collect();
        prop_assert_eq!(pulled.len() as u64, retired);
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len() as u64, retired, "a job held twice");
        for id in ids {
            prop_assert!(state.job(id).is_none(), "job {} both live and retired", id);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn any_interleaving_leaves_each_retired_job_once(ops in prop::collection::vec(op(), 1..40)) {
            let dir = tempfile::tempdir().expect("tempdir");
            let history = History::open(dir.path()).expect("open");
            let mut state = State::default();
            let mut log: Vec<Command> = vec![
                Command::RaiseVersion { to: xce_client::version::ACCOUNTING },
                crate::state::testing::join_cmd(1, "w1", vec![]),
            ];
            for cmd in log.clone() {
                apply(&mut state, &history, cmd);
            }
            let mut snapshot = (state.clone(), log.len());
            let mut jobs = 0u64;
            for op in ops {
                let new: Vec<Command> = match op {
                    Op::RunOne => {
                        jobs += 1;
                        job_commands(jobs, u128::from(jobs))
                    }
                    Op::Retire => vec![Command::RetireJobs { ids: state.retire_candidates(u64::MAX, 1000) }],
                    Op::Snapshot => {
                        snapshot = (state.clone(), log.len());
                        vec![]
                    }
                    Op::Restart => {
                        state = snapshot.0.clone();
                        for cmd in log[snapshot.1..].iter().cloned() {
                            apply(&mut state, &history, cmd);
                        }
                        vec![]
                    }
                };
                for cmd in new {
                    log.push(cmd.clone());
                    apply(&mut state, &history, cmd);
                }
            }
            holds_each_once(&state, &history)?;
            // A controller added now installs the last snapshot, applies the log after it,
            // and pulls what the snapshot retired before it.
            let other = tempfile::tempdir().expect("tempdir");
            let follower = History::open(other.path()).expect("open");
            let mut theirs = snapshot.0.clone();
            for cmd in log[snapshot.1..].iter().cloned() {
                apply(&mut theirs, &follower, cmd);
            }
            let missing = history.range(follower.written_seq().expect("mark") + 1, usize::MAX, usize::MAX).expect("range");
            let pulled: Vec<Retired> = missing.into_iter().map(|r| r.retired().expect("decode")).collect();
            follower.write(pulled).expect("write");
            holds_each_once(&theirs, &follower)?;
        }
    }
}
