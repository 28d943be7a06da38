//! The seed corpus: small, valid inputs for every target, built from real values through the
//! same encoders the daemons use, so that fuzzing starts from inputs the code accepts. They
//! are committed under `fuzz/corpus/<target>/seed-*`; the corpus test fails when they are
//! missing or stale (`XCE_FUZZ_WRITE_SEEDS=1` rewrites them).

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LeaderId, LogId, SnapshotMeta, Vote};
use xce_client::types::{
    ClusterEvent, HostAttributes, Job, JobSpec, JobState, JobUsers, Limits, RequestToken, Resources,
};
use xce_client::wire;
use xce_controller::network::codec;
use xce_controller::node::election::{PreVote, StepDown};
use xce_controller::state::{Command, State};
use xce_controller::store::{Batch, TypeConfig};
use xce_proto::xce_capnp as w;

/// Every seed: (target, file name, bytes).
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |target: &'static str, name: &str, bytes: Vec<u8>| {
        out.push((target, format!("seed-{name}"), bytes));
    };
    add(
        "peers",
        "three",
        b"c1=127.0.0.1:7101,c2=127.0.0.1:7102,c3=127.0.0.1:7103".to_vec(),
    );
    add("peers", "bare", b"[::1]:7101,localhost:7102".to_vec());
    let configs = [
        include_str!("../../../deploy/controller.yaml"),
        include_str!("../../../deploy/scheduler.yaml"),
        include_str!("../../../deploy/worker.yaml"),
        include_str!("../../../deploy/apiserver.yaml"),
    ];
    for (which, (name, text)) in ["controller", "scheduler", "worker", "apiserver"]
        .iter()
        .zip(configs)
        .enumerate()
    {
        add("config", name, prefixed(which as u8, text.as_bytes()));
    }
    add(
        "wire",
        "job",
        capnp_seed(1, |m| {
            wire::write_job(m.init_root::<w::job::Builder<'_>>(), &job())
        }),
    );
    add(
        "wire",
        "host-attributes",
        capnp_seed(10, |m| {
            let attrs = host_attributes();
            wire::write_attributes(m.init_root::<w::host_attributes::Builder<'_>>(), &attrs)
        }),
    );
    add(
        "wire",
        "event",
        capnp_seed(15, |m| {
            let event = ClusterEvent::Job {
                index: 7,
                id: 3,
                state: JobState::Running,
                host: Some("w1".into()),
                attempt: 1,
                queue: "normal".into(),
                user: "alice".into(),
                pend_reason: None,
                pend_code: None,
                reason: None,
                result: None,
                task: Some((2, 7)),
            };
            wire::write_event(m.init_root::<w::event::Builder<'_>>(), &event)
        }),
    );
    add("raft", "append", prefixed(0, &append()));
    add("raft", "vote", prefixed(1, &vote()));
    add("raft", "pre-vote", prefixed(2, &pre_vote()));
    add("raft", "snapshot", prefixed(3, &snapshot_chunks()));
    add("raft", "step-down", prefixed(5, &step_down()));
    add(
        "snapshot",
        "small",
        snapshot_then(&[0x04, 0x11, 0x07, 0x02, 0x09]),
    );
    add("apply", "mixed", (0..=255u8).cycle().take(600).collect());
    add(
        "apply",
        "dense",
        (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
    );
    out
}

fn prefixed(first: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    out.extend_from_slice(rest);
    out
}

fn capnp_seed(
    which: u8,
    write: impl FnOnce(&mut capnp::message::Builder<capnp::message::HeapAllocator>),
) -> Vec<u8> {
    let mut msg = capnp::message::Builder::new_default();
    write(&mut msg);
    prefixed(which, &capnp::serialize::write_message_to_words(&msg))
}

fn spec() -> JobSpec {
    JobSpec {
        name: "sim".into(),
        user: "alice".into(),
        queue: "normal".into(),
        command: vec!["sh".into(), "-c".into(), "echo $GREETING".into()],
        env: vec![("GREETING".into(), "hi".into())],
        cwd: "/tmp".into(),
        resources: Resources::new(2, 512),
        priority: 10,
        limits: Limits {
            time_limit_s: Some(3600),
        },
        script: None,
        stdout: Some("%x-%j.out".into()),
        stderr: None,
        open_mode: None,
        hold: false,
        begin_time_ms: None,
        warn_signal: None,
        no_requeue: false,
        dependency: None,
        kill_on_invalid_dep: None,
        array: None,
        account: "physics".into(),
    }
}

fn job() -> Job {
    Job {
        id: 3,
        spec: spec(),
        state: JobState::Running,
        pend_reason: None,
        pend_code: None,
        reason: None,
        result: None,
        host: Some("w1".into()),
        attempt: 1,
        runs: 1,
        exit_code: None,
        signal: None,
        submit_time_ms: 1_000,
        start_time_ms: Some(1_200),
        end_time_ms: None,
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

fn host_attributes() -> HostAttributes {
    HostAttributes {
        name: "w1".into(),
        resources: Resources::new(4, 4096),
        spool_dir: "/spool".into(),
        job_users: JobUsers::Any,
    }
}

/// A few commands that place a job on a host.
fn commands() -> Vec<Command> {
    vec![
        Command::RegisterHost {
            token: RequestToken(1),
            host: host_attributes(),
            held: Vec::new(),
        },
        Command::Submit {
            token: RequestToken(2),
            spec: spec(),
            script: None,
        },
        Command::Dispatch {
            token: RequestToken(3),
            id: 1,
            host: "w1".into(),
        },
    ]
}

fn vote_of(term: u64) -> Vote<u64> {
    Vote {
        leader_id: LeaderId::new(term, 1),
        committed: true,
    }
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn append() -> Vec<u8> {
    let req = AppendEntriesRequest::<TypeConfig> {
        vote: vote_of(2),
        prev_log_id: Some(log_id(1, 4)),
        entries: vec![Entry {
            log_id: log_id(2, 5),
            payload: EntryPayload::Normal(Batch {
                format: xce_controller::store::STORE_FORMAT,
                at_ms: 5_000,
                commands: commands(),
            }),
        }],
        leader_commit: Some(log_id(1, 4)),
    };
    codec::to_bin(&req).unwrap_or_default()
}

fn vote() -> Vec<u8> {
    let req = VoteRequest {
        vote: vote_of(3),
        last_log_id: Some(log_id(2, 5)),
    };
    codec::to_json(&req).unwrap_or_default()
}

fn pre_vote() -> Vec<u8> {
    let req = PreVote {
        candidate: 1,
        last_log_id: Some(log_id(2, 5)),
    };
    codec::to_json(&req).unwrap_or_default()
}

fn step_down() -> Vec<u8> {
    let req = StepDown {
        leader: 1,
        term: 3,
        successor: 2,
    };
    codec::to_json(&req).unwrap_or_default()
}

fn small_state() -> State {
    let mut state = State::default();
    for cmd in commands() {
        state.apply(5_000, cmd);
    }
    state
}

/// Two chunks of one snapshot: a JSON request, a tab, the chunk, one per line.
fn snapshot_chunks() -> Vec<u8> {
    let bytes = small_state().snapshot_bytes().unwrap_or_default();
    // Chunks may not hold a newline: cut where none is.
    let cut = bytes
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(bytes.len());
    let mut out = Vec::new();
    let mut offset = 0;
    for (chunk, done) in [
        (&bytes[..cut.min(8)], false),
        (&bytes[cut.min(8)..cut], true),
    ] {
        let req = InstallSnapshotRequest::<TypeConfig> {
            vote: vote_of(2),
            meta: SnapshotMeta {
                last_log_id: Some(log_id(2, 5)),
                last_membership: Default::default(),
                snapshot_id: "2-5".into(),
            },
            offset,
            data: Vec::new(),
            done,
        };
        out.extend(codec::to_json(&req).unwrap_or_default());
        out.push(b'\t');
        out.extend_from_slice(chunk);
        out.push(b'\n');
        offset += chunk.len() as u64;
    }
    out
}

/// A small state's snapshot, length first, then `commands` for the `apply` program.
fn snapshot_then(commands: &[u8]) -> Vec<u8> {
    let bytes = small_state().snapshot_bytes().unwrap_or_default();
    let mut out = (bytes.len() as u16).to_le_bytes().to_vec();
    out.extend(bytes);
    out.extend_from_slice(commands);
    out
}
