//! The stored formats: the golden bytes of every format this build reads, the migration
//! between them on those bytes, and round trips over arbitrary values.

use proptest::prelude::*;
use xce_client::types::{
    DependencyState, HeldJob, HeldPhase, HostAction, HostAttributes, JobAction, JobEnd, JobState,
    PendCode, Placement, QueueAction, Role, Standing,
};

use super::migrate::{downgrade_command_6, downgrade_job_6, upgrade_command_6};
use super::*;
use crate::state::LostPolicy;
use crate::store::format::encode_marked;
use crate::store::{Batch, STORE_FORMAT};

/// One command of every kind format 6 holds, every field set: format 6's own golden test's,
/// in today's types.
fn every_v6_command() -> Vec<Command> {
    let t = RequestToken;
    vec![
        Command::Barrier {
            term: 7,
            queues: vec![QueueDef {
                name: "high".into(),
                priority: 50,
                on_host_lost: LostPolicy::Exit,
            }],
        },
        Command::RegisterHost {
            token: t(1),
            host: HostAttributes {
                name: "w1".into(),
                resources: Resources::new(4, 2048),
                spool_dir: "/spool".into(),
                job_users: crate::state::JobUsers::EachUser { root: false },
            },
            held: vec![HeldJob {
                id: 9,
                attempt: 2,
                phase: HeldPhase::Suspended,
            }],
        },
        Command::Submit {
            token: t(u128::MAX - 1),
            spec: JobSpec {
                name: "sim".into(),
                user: "alice".into(),
                queue: "high".into(),
                command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                env: vec![("A".into(), "1".into())],
                cwd: "/home/alice".into(),
                resources: Resources::new(2, 512),
                priority: -3,
                limits: Limits::default(),
                ..Default::default()
            },
            script: None,
        },
        Command::Dispatch {
            token: t(3),
            id: 1,
            host: "w1".into(),
        },
        Command::JobStarted {
            token: t(4),
            id: 1,
            attempt: 1,
            host: "w1".into(),
        },
        Command::ControlJob {
            token: t(5),
            id: 1,
            action: JobAction::Kill,
            by: Some("alice".into()),
            actor: None,
        },
        Command::JobFinished {
            token: t(6),
            id: 1,
            attempt: 1,
            host: "w1".into(),
            end: JobEnd::Failed("no such file".into()),
            usage: None,
        },
        Command::ControlQueue {
            token: t(7),
            name: "high".into(),
            action: QueueAction::Inactivate,
        },
        Command::ControlHost {
            token: t(8),
            name: "w1".into(),
            action: HostAction::Close,
        },
        Command::SetHostAvailable {
            name: "w1".into(),
            available: false,
        },
        Command::HostLost { name: "w1".into() },
        Command::AcquireScheduler {
            token: t(9),
            name: "s1".into(),
            instance: 42,
            ttl_ms: 3000,
        },
        Command::DispatchBatch {
            token: t(10),
            epoch: 1,
            placements: vec![Placement {
                id: 1,
                host: "w1".into(),
            }],
        },
        Command::SetPendReasons {
            token: t(11),
            epoch: 1,
            // Format 6 holds the text; the code is read from it.
            reasons: vec![(
                1,
                PendReason::new(PendCode::QueueInactive, "queue normal is inactive"),
            )],
        },
        Command::CreateToken {
            token: t(12),
            id: "00112233445566ff".into(),
            user: "alice".into(),
            role: Role::Operator,
            hash: [7; 32],
            expires_in_ms: Some(86_400_000),
        },
        Command::CreateToken {
            token: t(13),
            id: "ffeeddccbbaa9988".into(),
            user: "bob".into(),
            role: Role::User,
            hash: [9; 32],
            expires_in_ms: None,
        },
        Command::RevokeToken {
            token: t(14),
            id: "ffeeddccbbaa9988".into(),
        },
        // Refused here (the state holds jobs).
        Command::Restore {
            token: t(15),
            state: Box::new(State::default().into_record()),
        },
        // Refused here (no restore under token 15 was applied).
        Command::RestoreJobs {
            token: t(16),
            base: t(15),
            jobs: vec![JobRecord::from(Job {
                id: 9,
                spec: JobSpec {
                    command: vec!["true".into()],
                    ..JobSpec::default()
                },
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
                submit_time_ms: 5,
                start_time_ms: Some(6),
                end_time_ms: None,
                output_dir: None,
                cancelled_by: None,
                dependency_state: None,
                array: None,
                array_task: None,
                expected_start_ms: None,
                usage: None,
                attempts: Vec::new(),
            })],
            intents: vec![(9, EndIntentRecord::Kill)],
            scripts: Vec::new(),
        },
    ]
}

/// One command of every kind format 7 holds, every field set: format 6's, the raise to 7,
/// then what format 7 added (format 7's own golden test's, in today's types).
fn every_v7_command() -> Vec<Command> {
    let t = RequestToken;
    let mut gpu = Resources::new(1, 64);
    gpu.set_gres("gpu:a100", 2);
    let mut commands = every_v6_command();
    commands.extend([
        Command::RaiseVersion { to: 7 },
        Command::RegisterHost {
            token: t(17),
            host: HostAttributes {
                name: "w2".into(),
                resources: {
                    let mut r = Resources::new(8, 4096);
                    r.set_gres("gpu:a100", 4);
                    r
                },
                spool_dir: "/spool2".into(),
                job_users: crate::state::JobUsers::Any,
            },
            held: Vec::new(),
        },
        Command::Submit {
            token: t(18),
            spec: JobSpec {
                command: vec!["train".into()],
                resources: gpu,
                limits: Limits {
                    time_limit_s: Some(2),
                },
                ..JobSpec::default()
            },
            script: None,
        },
        Command::Dispatch {
            token: t(19),
            id: 2,
            host: "w2".into(),
        },
        Command::JobFinished {
            token: t(20),
            id: 2,
            attempt: 1,
            host: "w2".into(),
            end: JobEnd::TimedOut {
                exit_code: None,
                signal: Some(15),
            },
            usage: None,
        },
        Command::SetPendReasons {
            token: t(21),
            epoch: 1,
            reasons: vec![(2, PendReason::new(PendCode::TooBig, "no host with 9 gpu"))],
        },
    ]);
    commands
}

/// The script of [`every_command`]'s batch jobs.
const SCRIPT: &[u8] = b"#!/bin/sh\n#XCE --time 1:00\necho \"$1\"\n";

/// One command of every kind format 8 holds, every field set: format 7's, the raise to 8,
/// then what format 8 added (format 8's own golden test's, in today's types).
fn every_v8_command() -> Vec<Command> {
    let t = RequestToken;
    let script = xce_client::types::ScriptId::of(SCRIPT);
    let batch_spec = JobSpec {
        name: "batch".into(),
        user: "carol".into(),
        command: vec!["arg".into()],
        script: Some(script),
        stdout: Some("%x-%j.out".into()),
        stderr: Some("%x-%j.err".into()),
        open_mode: Some(xce_client::types::OpenMode::Append),
        hold: true,
        begin_time_ms: Some(1_700_000_100_000),
        warn_signal: Some(xce_client::types::Warning {
            signal: 10,
            before_s: 5,
            leader_only: true,
        }),
        no_requeue: true,
        ..JobSpec::default()
    };
    let mut commands = every_v7_command();
    commands.extend([
        Command::RaiseVersion { to: 8 },
        // Job 3: the script's bytes with it; job 4: the same script, held already.
        Command::Submit {
            token: t(22),
            spec: batch_spec.clone(),
            script: Some(SCRIPT.into()),
        },
        Command::Submit {
            token: t(23),
            spec: JobSpec {
                hold: false,
                ..batch_spec
            },
            script: None,
        },
        Command::UpdateJob {
            token: t(24),
            id: 3,
            by: Some("carol".into()),
            changes: xce_client::types::JobChanges {
                name: Some("renamed".into()),
                priority: Some(-9),
                queue: Some("normal".into()),
                cpus: Some(2),
                mem_mb: Some(100),
                time_limit_s: Some(60),
                hold: Some(false),
                begin_time_ms: Some(0),
            },
        },
        // Refused: job 3 is not running.
        Command::SignalJob {
            token: t(25),
            id: 3,
            by: None,
            signal: 10,
            leader_only: false,
        },
        Command::ControlJob {
            token: t(26),
            id: 4,
            action: JobAction::Kill,
            by: None,
            actor: Some("dave".into()),
        },
        // Refused here (no restore under token 15 was applied).
        Command::RestoreJobs {
            token: t(27),
            base: t(15),
            jobs: Vec::new(),
            intents: Vec::new(),
            scripts: vec![(script.0, SCRIPT.to_vec())],
        },
    ]);
    commands
}

/// One command of every kind the current format holds, every field set: format 11's, then
/// the raise to this version, and what its apply takes that format 11's refused: a host sent
/// a job beyond its free room (dispatch ahead). Format 12 stores every record as format 10
/// does.
/// One command of every kind format 13 holds, every field set: format 12's, the raise to 13,
/// then what format 13 added: a job charged to an account, a start reserved for a pending job
/// by the scheduler's reasons, what an attempt used with its end, and a retirement.
fn every_command() -> Vec<Command> {
    let t = RequestToken;
    let mut commands = every_v12_command();
    commands.extend([
        Command::RaiseVersion { to: 13 },
        // Job 15 waits for w3, which job 13 holds.
        Command::Submit {
            token: t(47),
            spec: JobSpec {
                command: vec!["true".into()],
                queue: "high".into(),
                resources: xce_client::types::Resources::new(1, 0),
                account: "physics".into(),
                ..JobSpec::default()
            },
            script: None,
        },
        Command::SetPendReasons {
            token: t(48),
            epoch: 1,
            reasons: vec![(
                15,
                xce_client::types::PendReason {
                    code: xce_client::types::PendCode::Resources,
                    text: "no host with 1 free cpus (most free: 0)".into(),
                    expected_start_ms: Some(1_700_000_600_000),
                },
            )],
        },
        // Job 13 ends, having used 1.52 s of CPU and 4 MiB at most.
        Command::JobFinished {
            token: t(49),
            id: 13,
            attempt: 1,
            host: "w3".into(),
            end: JobEnd::Exit(0),
            usage: Some(xce_client::types::Usage {
                cpu_user_ms: 1500,
                cpu_sys_ms: 20,
                max_rss_kb: 4096,
            }),
        },
        // Job 1 (ended, no job waits on it) retires to history, the first to.
        Command::RetireJobs { ids: vec![1] },
    ]);
    commands
}

/// One command of every kind format 12 holds, every field set: format 11's, the raise to 12,
/// and the scheduler's jobs sent ahead of a host's room, one of them killed before it started.
fn every_v12_command() -> Vec<Command> {
    let t = RequestToken;
    let mut commands = every_v11_command();
    let one_cpu = JobSpec {
        command: vec!["true".into()],
        queue: "high".into(),
        resources: xce_client::types::Resources::new(1, 0),
        ..JobSpec::default()
    };
    commands.extend([
        Command::RaiseVersion { to: 12 },
        // Host w3 offers one cpu and is sent jobs 13 and 14 by the scheduler: the second
        // waits on it.
        Command::RegisterHost {
            token: t(39),
            host: xce_client::types::HostAttributes {
                name: "w3".into(),
                resources: xce_client::types::Resources::new(1, 0),
                spool_dir: "/spool3".into(),
                job_users: xce_client::types::JobUsers::Any,
            },
            held: vec![],
        },
        Command::Submit {
            token: t(40),
            spec: one_cpu.clone(),
            script: None,
        },
        Command::Submit {
            token: t(41),
            spec: one_cpu,
            script: None,
        },
        // The scheduler's placements (an operator's needs free room), from an active queue.
        Command::ControlQueue {
            token: t(42),
            name: "high".into(),
            action: QueueAction::Activate,
        },
        Command::DispatchBatch {
            token: t(43),
            epoch: 1,
            placements: vec![
                Placement {
                    id: 13,
                    host: "w3".into(),
                },
                Placement {
                    id: 14,
                    host: "w3".into(),
                },
            ],
        },
        // Job 13 starts; job 14 is killed while it waits on w3, before it started: its
        // attempt is no run.
        Command::JobStarted {
            token: t(44),
            id: 13,
            attempt: 1,
            host: "w3".into(),
        },
        Command::ControlJob {
            token: t(45),
            id: 14,
            action: JobAction::Kill,
            by: None,
            actor: None,
        },
        Command::JobFinished {
            token: t(46),
            id: 14,
            attempt: 1,
            host: "w3".into(),
            end: JobEnd::Failed("killed before it started".into()),
            usage: None,
        },
    ]);
    commands
}

/// One command of every kind format 11 holds, every field set: format 10's, then the raise
/// to 11, and what it judges that format 10 refused: a dependency on some tasks of an array,
/// and an array whose tasks follow another's (`aftercorr`). Format 11 stores every record as
/// format 10 does.
fn every_v11_command() -> Vec<Command> {
    let t = RequestToken;
    let mut commands = every_v10_command();
    let array = |tasks: &str, dependency: &str| JobSpec {
        command: vec!["true".into()],
        array: Some(tasks.parse().unwrap()),
        dependency: Some(dependency.parse().unwrap()),
        ..JobSpec::default()
    };
    commands.extend([
        Command::RaiseVersion { to: 11 },
        // Job 10 (array 1-7:2) waits for task 7_1 (job 8, placed); job 11's tasks follow
        // array 7's one by one: 11_3, whose pair 7_3 ended unrun, is split off as job 12,
        // pending: never satisfied.
        Command::Submit {
            token: t(37),
            spec: array("1-7:2", "afterany:7_1"),
            script: None,
        },
        Command::Submit {
            token: t(38),
            spec: array("1-7:2", "aftercorr:7"),
            script: None,
        },
    ]);
    commands
}

/// One command of every kind format 10 holds, every field set: format 9's, the raise to 10,
/// then what format 10 added.
fn every_v10_command() -> Vec<Command> {
    let t = RequestToken;
    let mut commands = every_v9_command();
    let changes = xce_client::types::JobChanges {
        hold: Some(true),
        ..Default::default()
    };
    commands.extend([
        Command::RaiseVersion { to: 10 },
        // Task 5 of array 7 split off as job 9, held.
        Command::ControlTasks {
            token: t(33),
            array: 7,
            tasks: Some("5".parse().unwrap()),
            by: None,
            actor: None,
            op: TaskOp::Update {
                changes,
                throttle: None,
            },
        },
        Command::ControlTasks {
            token: t(34),
            array: 7,
            tasks: None,
            by: None,
            actor: None,
            op: TaskOp::Update {
                changes: Default::default(),
                throttle: Some(3),
            },
        },
        // Task 3 ends unrun.
        Command::ControlTasks {
            token: t(35),
            array: 7,
            tasks: Some("3".parse().unwrap()),
            by: None,
            actor: Some("dave".into()),
            op: TaskOp::Control {
                action: JobAction::Kill,
            },
        },
        // Refused: task 1 (job 8) is not running yet.
        Command::ControlTasks {
            token: t(36),
            array: 7,
            tasks: Some("1".parse().unwrap()),
            by: Some("carol".into()),
            actor: None,
            op: TaskOp::Signal {
                signal: 10,
                leader_only: true,
            },
        },
    ]);
    commands
}

/// One command of every kind format 9 holds, every field set: format 8's, the raise to 9,
/// then what format 9 added.
fn every_v9_command() -> Vec<Command> {
    let t = RequestToken;
    let waits = |dependency: &str, kill: bool| JobSpec {
        name: "follow".into(),
        user: "carol".into(),
        command: vec!["true".into()],
        dependency: Some(dependency.parse().unwrap()),
        kill_on_invalid_dep: Some(kill),
        ..JobSpec::default()
    };
    let mut commands = every_v8_command();
    commands.extend([
        Command::RaiseVersion { to: 9 },
        // Job 5 waits for job 3 (pending); job 6's dependency is met (job 4 was cancelled
        // before it ran, which never satisfies afternotok, but nothing called "follow" runs).
        Command::Submit {
            token: t(28),
            spec: waits("afterok:3", true),
            script: None,
        },
        Command::Submit {
            token: t(29),
            spec: waits("afternotok:4?singleton", false),
            script: None,
        },
        // Job 3 cancelled before it ran: job 5 can never run, and is cancelled with it.
        Command::ControlJob {
            token: t(30),
            id: 3,
            action: JobAction::Kill,
            by: None,
            actor: None,
        },
        // Job 7, an array of four tasks, two at a time; its first task split off as job 8.
        Command::Submit {
            token: t(31),
            spec: JobSpec {
                command: vec!["true".into()],
                array: Some("1-7:2%2".parse().unwrap()),
                ..JobSpec::default()
            },
            script: None,
        },
        Command::Dispatch {
            token: t(32),
            id: 7,
            host: "w2".into(),
        },
    ]);
    commands
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The commands applied in order to a new state, at one time.
fn applied(commands: &[Command]) -> State {
    let mut state = State::default();
    for cmd in commands.iter().cloned() {
        state.apply(1_700_000_000_000, cmd);
    }
    state
}

/// Format 6's golden bytes, as the builds of format 6 wrote them (their own golden test):
/// [`every_v6_command`] as records, and the snapshot of the state they leave.
const GOLDEN_LOG_6: &str = "130a0701046869676864010301027731048010062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c6963650480080506030102773107040101027731010501000105616c69636508060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b010101187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c010100000000000011100f01090000000104747275650000000000020000010277310100000501060000010900";
const GOLDEN_SNAPSHOT_6: &str = "0201010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636504800805050001066b696c6c65640102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c02046869676864010001066e6f726d616c3c01010001027731048010062f73706f6f6c010001000010010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd31";

/// The current format's golden bytes: [`every_command`] as one batch, and the snapshot of
/// the state they leave. They never change within a format: a change to a stored record is
/// a new format (raise `store::STORE_FORMAT`, write its migration, keep these as the older
/// format's golden bytes).
const GOLDEN_FORMAT: u32 = 13;
const GOLDEN_BATCH: &str = "8d80808080808080800180d095ffbc313c0a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c6963650280040005000000000000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c650002070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e616374697665000e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c010100000000000006000011100f01090000000104747275650000000000000000000000000000000000000002000000000102773101000005010600000000000001000000010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a613130300200010200000000000000000000000000061302027732081402010277320400011e000d1501010204126e6f20686f737420776974682039206770750012080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc31011405010100000000012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101000000000013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a1209001c06666f6c6c6f77056361726f6c000104747275650000000000000000000000000000000100000203000101000000001d06666f6c6c6f77056361726f6c00010474727565000000000000000000000000000000010202000003040000010100000000011e03000000001f0000000104747275650000000000000000000000000000000000010101070201020000062007027732120a15210701010505010000010000000000000101000015220700000001000000000000000001031523070101030301000104646176650000152407010101010101056361726f6c00021401120b0025000000010474727565000000000000000000000000000000010000010701010101010001010107020000000026000000010474727565000000000000000000000000000000010000040700000101010702000000120c0327027733010000072f73706f6f6c33000000280000046869676801047472756500000100000000000000000000000000000000000029000004686967680104747275650000010000000000000000000000000000000000022a0468696768020c2b01020d0277330e027733072c0d01027733012d0e000000082e0e0102773302186b696c6c6564206265666f7265206974207374617274656400120d002f000004686967680104747275650000010000000000000000000000000000000770687973696373000d3001010f00276e6f20686f7374207769746820312066726565206370757320286d6f737420667265653a20302901c09fbaffbc3108310d01027733000001dc0b148020160101";
const GOLDEN_SNAPSHOT: &str = "8d808080808080808001100e020000066e6f726d616c0105747261696e0000014001086770753a6131303002000102000000000000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c320000000001000000030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e6572720100000001140501010000000005000001066b696c6c656401020000000080d095ffbc31000180d095ffbc3100000000000000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc31011405010100000000050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc3100010464617665000000000000000506666f6c6c6f77056361726f6c066e6f726d616c0104747275650000010000000000000000000000000100000203000101000005000001266e65766572207361746973666965643a206a6f62203320656e6465642063616e63656c6c656401020000000080d095ffbc31000180d095ffbc31000001020000000000000606666f6c6c6f77056361726f6c066e6f726d616c010474727565000001000000000000000000000000010202000003040000010100000000000000000000000080d095ffbc31000000000101000000000000070000066e6f726d616c0104747275650000010000000000000000000000000000010101070201030000000000000000000080d095ffbc310000000000010107070101010000010000000000080000066e6f726d616c0104747275650000010000000000000000000000000000000001000000000102773201000080d095ffbc31000001072f73706f6f6c320000000107010401070201000000090000066e6f726d616c0104747275650000010000000000000000010000000000000000000000000000000080d095ffbc3100000000000001070504010702000000000a0000066e6f726d616c01047472756500000100000000000000000000000001000001070101010101000101010702000000012777616974696e6720666f722069747320646570656e64656e6379206166746572616e793a375f31010700000000000080d095ffbc310000000001000101010702000000000000000000000b0000066e6f726d616c010474727565000001000000000000000000000000010000040700000101010702000000012677616974696e6720666f722069747320646570656e64656e6379206166746572636f72723a37010700000000000080d095ffbc310000000001000102010101050702010000000000000000000c0000066e6f726d616c0104747275650000010000000000000000000000000100000407000000000001286e65766572207361746973666965643a206a6f6220375f3320656e6465642063616e63656c6c6564010700000000000080d095ffbc3100000000010200010b0304010702000000000d0000046869676801047472756500000100000000000000000000000000000000040000000100010277330101000080d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3300000000010001dc0b148020010102773380d095ffbc310180d095ffbc310100000001dc0b1480200e000004686967680104747275650000010000000000000000000000000000000005000001066b696c6c656401020102773301000080d095ffbc31000180d095ffbc3101072f73706f6f6c3300000000000000000f0000046869676801047472756500000100000000000000000000000000000007706879736963730001276e6f20686f7374207769746820312066726565206370757320286d6f737420667265653a203029010000000000000080d095ffbc31000000000000000001c09fbaffbc31000002046869676864010101066e6f726d616c3c0101000302773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c32000001027733010000072f73706f6f6c330000010031010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c61636573207468652073746174651c00051d00061e011f00072001210122012301240207326a6f6220372069732027733a206361726f6c206d617920636f6e74726f6c206f6e6c79207468656972206f776e206a6f627325000a26000b27040028000d29000e2a012b06002c012d012e012f000f30013101010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310d01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a01";

/// Format 12's golden bytes, as the builds of format 12 wrote them.
const GOLDEN_BATCH_12: &str = "8c80808080808080800180d095ffbc31370a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050000000000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c0101000000000000060011100f010900000001047472756500000000000000000000000000000000000002000000000102773101000005010600000000000001010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102000000000000000000000000061302027732081402010277320400011e0d1501010204126e6f20686f7374207769746820392067707512080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc310114050101000000012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc3101140501010000000013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a1209001c06666f6c6c6f77056361726f6c0001047472756500000000000000000000000000000001000002030001010000001d06666f6c6c6f77056361726f6c000104747275650000000000000000000000000000000102020000030400000101000000011e03000000001f00000001047472756500000000000000000000000000000000000101010702010200062007027732120a15210701010505010000010000000000000101000015220700000001000000000000000001031523070101030301000104646176650000152407010101010101056361726f6c00021401120b002500000001047472756500000000000000000000000000000001000001070101010101000101010702000000260000000104747275650000000000000000000000000000000100000407000001010107020000120c0327027733010000072f73706f6f6c3300000028000004686967680104747275650000010000000000000000000000000000000000290000046869676801047472756500000100000000000000000000000000000000022a0468696768020c2b01020d0277330e027733072c0d01027733012d0e000000082e0e0102773302186b696c6c6564206265666f72652069742073746172746564";
const GOLDEN_SNAPSHOT_12: &str = "8c8080808080808080010f0e010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c696365028004000500000000000000000000000005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c0000000001020000066e6f726d616c0105747261696e0000014001086770753a61313030020001020000000000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c320000000001030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000000011405010100000005000001066b696c6c656401020000000080d095ffbc31000180d095ffbc3100000000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101000000050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc3100010464617665000000000506666f6c6c6f77056361726f6c066e6f726d616c01047472756500000100000000000000000000000001000002030001010005000001266e65766572207361746973666965643a206a6f62203320656e6465642063616e63656c6c656401020000000080d095ffbc31000180d095ffbc31000001020000000606666f6c6c6f77056361726f6c066e6f726d616c0104747275650000010000000000000000000000000102020000030400000101000000000000000000000080d095ffbc31000000000101000000070000066e6f726d616c01047472756500000100000000000000000000000000000101010702010300000000000000000080d095ffbc310000000000010107070101010000010000080000066e6f726d616c01047472756500000100000000000000000000000000000001000000000102773201000080d095ffbc31000001072f73706f6f6c320000000107010401070201090000066e6f726d616c01047472756500000100000000000000000100000000000000000000000000000080d095ffbc3100000000000001070504010702000a0000066e6f726d616c010474727565000001000000000000000000000000010000010701010101010001010107020000012777616974696e6720666f722069747320646570656e64656e6379206166746572616e793a375f31010700000000000080d095ffbc310000000001000101010702000000000000000b0000066e6f726d616c0104747275650000010000000000000000000000000100000407000001010107020000012677616974696e6720666f722069747320646570656e64656e6379206166746572636f72723a37010700000000000080d095ffbc310000000001000102010101050702010000000000000c0000066e6f726d616c01047472756500000100000000000000000000000001000004070000000001286e65766572207361746973666965643a206a6f6220375f3320656e6465642063616e63656c6c6564010700000000000080d095ffbc3100000000010200010b0304010702000d0000046869676801047472756500000100000000000000000000000000000002000000000102773301000080d095ffbc310180d095ffbc310001072f73706f6f6c3300000000010e0000046869676801047472756500000100000000000000000000000000000005000001066b696c6c656401020102773301000080d095ffbc31000180d095ffbc3101072f73706f6f6c33000000000002046869676864010101066e6f726d616c3c0101000302773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c32000001027733010000072f73706f6f6c33000001002e010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c61636573207468652073746174651c00051d00061e011f00072001210122012301240207326a6f6220372069732027733a206361726f6c206d617920636f6e74726f6c206f6e6c79207468656972206f776e206a6f627325000a26000b27040028000d29000e2a012b06002c012d012e01010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";

/// Format 11's golden bytes, as the builds of format 11 wrote them.
const GOLDEN_BATCH_11: &str = "8b80808080808080800180d095ffbc312e0a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050000000000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c0101000000000000060011100f0109000000010474727565000000000000000000000000000000000000020000000001027731010000050106000000000000010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102000000000000000000000000061302027732081402010277320400011e0d1501010204126e6f20686f7374207769746820392067707512080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc310114050101000000012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc3101140501010000000013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a1209001c06666f6c6c6f77056361726f6c0001047472756500000000000000000000000000000001000002030001010000001d06666f6c6c6f77056361726f6c000104747275650000000000000000000000000000000102020000030400000101000000011e03000000001f00000001047472756500000000000000000000000000000000000101010702010200062007027732120a15210701010505010000010000000000000101000015220700000001000000000000000001031523070101030301000104646176650000152407010101010101056361726f6c00021401120b002500000001047472756500000000000000000000000000000001000001070101010101000101010702000000260000000104747275650000000000000000000000000000000100000407000001010107020000";
const GOLDEN_SNAPSHOT_11: &str = "8b8080808080808080010d0c010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c696365028004000500000000000000000000000005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c00000000020000066e6f726d616c0105747261696e0000014001086770753a61313030020001020000000000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3200000000030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000000011405010100000005000001066b696c6c656401020000000080d095ffbc31000180d095ffbc31000000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101000000050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc31000104646176650000000506666f6c6c6f77056361726f6c066e6f726d616c01047472756500000100000000000000000000000001000002030001010005000001266e65766572207361746973666965643a206a6f62203320656e6465642063616e63656c6c656401020000000080d095ffbc31000180d095ffbc310000010200000606666f6c6c6f77056361726f6c066e6f726d616c0104747275650000010000000000000000000000000102020000030400000101000000000000000000000080d095ffbc310000000001010000070000066e6f726d616c01047472756500000100000000000000000000000000000101010702010300000000000000000080d095ffbc3100000000000101070701010100000100080000066e6f726d616c01047472756500000100000000000000000000000000000001000000000102773201000080d095ffbc31000001072f73706f6f6c3200000001070104010702090000066e6f726d616c01047472756500000100000000000000000100000000000000000000000000000080d095ffbc31000000000000010705040107020a0000066e6f726d616c010474727565000001000000000000000000000000010000010701010101010001010107020000012777616974696e6720666f722069747320646570656e64656e6379206166746572616e793a375f31010700000000000080d095ffbc3100000000010001010107020000000000000b0000066e6f726d616c0104747275650000010000000000000000000000000100000407000001010107020000012677616974696e6720666f722069747320646570656e64656e6379206166746572636f72723a37010700000000000080d095ffbc3100000000010001020101010507020100000000000c0000066e6f726d616c01047472756500000100000000000000000000000001000004070000000001286e65766572207361746973666965643a206a6f6220375f3320656e6465642063616e63656c6c6564010700000000000080d095ffbc3100000000010200010b030401070202046869676864010001066e6f726d616c3c0101000202773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c320000010026010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c61636573207468652073746174651c00051d00061e011f00072001210122012301240207326a6f6220372069732027733a206361726f6c206d617920636f6e74726f6c206f6e6c79207468656972206f776e206a6f627325000a26000b010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310b01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";

/// Format 10's golden bytes, as the builds of format 10 wrote them.
const GOLDEN_BATCH_10: &str = "8a80808080808080800180d095ffbc312b0a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050000000000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c0101000000000000060011100f0109000000010474727565000000000000000000000000000000000000020000000001027731010000050106000000000000010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102000000000000000000000000061302027732081402010277320400011e0d1501010204126e6f20686f7374207769746820392067707512080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc310114050101000000012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc3101140501010000000013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a1209001c06666f6c6c6f77056361726f6c0001047472756500000000000000000000000000000001000002030001010000001d06666f6c6c6f77056361726f6c000104747275650000000000000000000000000000000102020000030400000101000000011e03000000001f00000001047472756500000000000000000000000000000000000101010702010200062007027732120a15210701010505010000010000000000000101000015220700000001000000000000000001031523070101030301000104646176650000152407010101010101056361726f6c00021401";

/// Format 9's golden bytes, as its builds wrote them: [`every_v9_command`] as one batch, and
/// the snapshot of the state they make.
const GOLDEN_BATCH_9: &str = "8980808080808080800180d095ffbc31260a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050000000000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c0101000000000000060011100f0109000000010474727565000000000000000000000000000000000000020000000001027731010000050106000000000000010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102000000000000000000000000061302027732081402010277320400011e0d1501010204126e6f20686f7374207769746820392067707512080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc310114050101000000012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc3101140501010000000013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a1209001c06666f6c6c6f77056361726f6c0001047472756500000000000000000000000000000001000002030001010000001d06666f6c6c6f77056361726f6c000104747275650000000000000000000000000000000102020000030400000101000000011e03000000001f00000001047472756500000000000000000000000000000000000101010702010200062007027732";
const GOLDEN_SNAPSHOT_10: &str = "8a8080808080808080010a09010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c696365028004000500000000000000000000000005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c00000000020000066e6f726d616c0105747261696e0000014001086770753a61313030020001020000000000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3200000000030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000000011405010100000005000001066b696c6c656401020000000080d095ffbc31000180d095ffbc31000000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101000000050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc31000104646176650000000506666f6c6c6f77056361726f6c066e6f726d616c01047472756500000100000000000000000000000001000002030001010005000001266e65766572207361746973666965643a206a6f62203320656e6465642063616e63656c6c656401020000000080d095ffbc31000180d095ffbc310000010200000606666f6c6c6f77056361726f6c066e6f726d616c0104747275650000010000000000000000000000000102020000030400000101000000000000000000000080d095ffbc310000000001010000070000066e6f726d616c01047472756500000100000000000000000000000000000101010702010300000000000000000080d095ffbc3100000000000101070701010100000100080000066e6f726d616c01047472756500000100000000000000000000000000000001000000000102773201000080d095ffbc31000001072f73706f6f6c3200000001070104010702090000066e6f726d616c01047472756500000100000000000000000100000000000000000000000000000080d095ffbc310000000000000107050401070202046869676864010001066e6f726d616c3c0101000202773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c320000010024010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c61636573207468652073746174651c00051d00061e011f00072001210122012301240207326a6f6220372069732027733a206361726f6c206d617920636f6e74726f6c206f6e6c79207468656972206f776e206a6f6273010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310a01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";
const GOLDEN_SNAPSHOT_9: &str = "898080808080808080010908010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c696365028004000500000000000000000000000005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c00000000020000066e6f726d616c0105747261696e0000014001086770753a61313030020001020000000000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3200000000030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000000011405010100000005000001066b696c6c656401020000000080d095ffbc31000180d095ffbc31000000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101000000050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc31000104646176650000000506666f6c6c6f77056361726f6c066e6f726d616c01047472756500000100000000000000000000000001000002030001010005000001266e65766572207361746973666965643a206a6f62203320656e6465642063616e63656c6c656401020000000080d095ffbc31000180d095ffbc310000010200000606666f6c6c6f77056361726f6c066e6f726d616c0104747275650000010000000000000000000000000102020000030400000101000000000000000000000080d095ffbc310000000001010000070000066e6f726d616c01047472756500000100000000000000000000000000000101010702010200000000000000000080d095ffbc3100000000000101030702000100000000080000066e6f726d616c01047472756500000100000000000000000000000000000001000000000102773201000080d095ffbc31000001072f73706f6f6c320000000107010401070202046869676864010001066e6f726d616c3c0101000202773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c320000010020010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c61636573207468652073746174651c00051d00061e011f00072001010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310901f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";

/// Format 8's golden bytes, as its builds wrote them: [`every_v8_command`] as one batch, and
/// the snapshot of the state they make.
const GOLDEN_BATCH_8: &str = "8880808080808080800180d095ffbc31200a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050000000000000000000006030102773107040101027731010501000105616c6963650008060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c0101000000000000060011100f0109000000010474727565000000000000000000000000000000020000000001027731010000050106000000010900001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102000000000000000000061302027732081402010277320400011e0d1501010204126e6f20686f7374207769746820392067707512080016056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000101a0dd9bffbc310114050101012523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a0017056261746368056361726f6c0001036172670000000000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc3101140501010013180301056361726f6c010772656e616d6564011101066e6f726d616c01020164013c01000100141903001400011a040000010464617665111b0f000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";
const GOLDEN_SNAPSHOT_8: &str = "888080808080808080010504010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c696365028004000500000000000000000005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c00020000066e6f726d616c0105747261696e0000014001086770753a61313030020001020000000000000000050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3200030772656e616d6564056361726f6c066e6f726d616c0103617267000002640011013c01f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000000011405010100000000000000000080d095ffbc310000000004056261746368056361726f6c066e6f726d616c01036172670000010000000001f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a010925782d256a2e6f7574010925782d256a2e65727201000001a0dd9bffbc310114050101050000011163616e63656c6c6564206279206461766501020000000080d095ffbc31000180d095ffbc310001046461766502046869676864010001066e6f726d616c3c0101000202773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c32000001001b010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501160003170004180119020a356a6f6220332069732070656e64696e673a206f6e6c7920612072756e6e696e67206a6f622063616e206265207369676e616c6c65641a011b020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd310801f165358cf94b76f77da1e9bd1479a88c6543003c54dddf17794c3e6e3a6dc52a2523212f62696e2f73680a23584345202d2d74696d6520313a30300a6563686f20222431220a";

/// Format 7's golden bytes, as its builds wrote them: [`every_v7_command`] as one batch, and the
/// snapshot of the state they leave.
const GOLDEN_BATCH_7: &str = "8780808080808080800180d095ffbc31190a070104686967686401030102773104801000062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050006030102773107040101027731010501000105616c69636508060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b01010103187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c01010000000000000611100f01090000000104747275650000000000000002000000000102773101000005010600000109001207031102773208802001086770753a6131303004072f73706f6f6c32000000120000000105747261696e0000014001086770753a6131303002000102061302027732081402010277320400011e0d1501010204126e6f20686f73742077697468203920677075";
const GOLDEN_SNAPSHOT_7: &str = "878080808080808080010302010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636502800400050005000001066b696c6c656401020102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c020000066e6f726d616c0105747261696e0000014001086770753a6131303002000102050000011a74696d65206c696d6974206f6620303a303220726561636865640103010277320100011e80d095ffbc310180d095ffbc310180d095ffbc3101072f73706f6f6c3202046869676864010001066e6f726d616c3c0101000202773104801000062f73706f6f6c0100010002773208802001086770753a6131303004072f73706f6f6c320000010015010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465110400120002130114011501010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd3107";

/// Format 6 is still written, byte for byte as before, while a cluster's version is 6: a
/// member on the older build applies what a new primary replicates, and a data dir stays
/// the older build's to read.
#[test]
fn format_6_is_written_as_its_builds_wrote_it() {
    let commands = every_v6_command();
    let old: Vec<v6::CommandRecord> = commands
        .iter()
        .cloned()
        .map(|c| downgrade_command_6(CommandRecord::from(c)).unwrap())
        .collect();
    assert_eq!(hex(&postcard::to_stdvec(&old).unwrap()), GOLDEN_LOG_6);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 6);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_6);
}

/// Format 6's bytes read as the same commands and the same state, with what format 7 adds
/// derived: a job's result from its state and reason, a pending job's code from its text.
#[test]
fn format_6_golden_bytes_migrate_to_what_applying_gives() {
    let old: Vec<v6::CommandRecord> = postcard::from_bytes(&unhex(GOLDEN_LOG_6)).unwrap();
    let read: Vec<Command> = old
        .into_iter()
        .map(|c| Command::from(upgrade_command_6(c).unwrap()))
        .collect();
    assert_eq!(read, every_v6_command());
    let state = applied(&every_v6_command());
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_6)).unwrap());
    assert_eq!(back, state);
    // The killed job's result, derived from format 6's reason, is the one apply gave it.
    let job = back.job(1).unwrap();
    assert_eq!(
        (job.state, job.reason.as_deref(), job.result),
        (JobState::Exited, Some("killed"), Some(JobResult::Cancelled))
    );
}

#[test]
fn the_stored_encoding_is_the_golden_one_of_its_format() {
    let commands = every_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: STORE_FORMAT,
        commands: commands.clone(),
    };
    let log = postcard::to_stdvec(&batch).unwrap();
    let state = applied(&commands);
    assert_eq!(state.active_version(), STORE_FORMAT);
    let snapshot = state.snapshot_bytes().unwrap();
    // The streamed encoding is exactly the record's.
    assert_eq!(
        snapshot,
        encode_marked(STORE_FORMAT, &state.clone().into_record()).unwrap()
    );
    let raise = "the stored encoding of commands or state changed: raise store::STORE_FORMAT, \
                 write the migration from the format before, keep these golden bytes as that \
                 format's, and set GOLDEN_FORMAT, GOLDEN_BATCH and GOLDEN_SNAPSHOT";
    assert_eq!(STORE_FORMAT, GOLDEN_FORMAT, "{raise}");
    assert_eq!(hex(&log), GOLDEN_BATCH, "{raise} (batch)");
    assert_eq!(hex(&snapshot), GOLDEN_SNAPSHOT, "{raise} (snapshot)");
    // And they read back as what was written.
    assert_eq!(postcard::from_bytes::<Batch>(&log).unwrap(), batch);
    let back = State::from_record(decode_state(&snapshot).unwrap());
    assert_eq!(back, state);
    // Runs are counted by reported starts from version 12: job 14, killed while it waited
    // on its host, never ran, and format 10 cannot say so.
    let runs = |id| back.job(id).map(|j| (j.attempt, j.runs, Standing::of(j)));
    assert_eq!(runs(13), Some((1, 1, Standing::Completed)));
    assert_eq!(runs(14), Some((1, 0, Standing::Unrun)));
    let never_ran = JobRecord::from(back.job(14).unwrap().clone());
    assert_eq!(migrate::downgrade_job_10(never_ran).unwrap_err().needs, 12);
    // Job 15 is charged to its account, and has its reserved start; format 12 holds neither.
    let job = back.job(15).unwrap();
    assert_eq!(
        (job.spec.account.as_str(), job.expected_start_ms),
        ("physics", Some(1_700_000_600_000))
    );
    let charged = JobRecord::from(job.clone());
    assert_eq!(migrate::downgrade_job_12(charged).unwrap_err().needs, 13);
    assert_eq!((back.job(1), back.retired_seq()), (None, 1));
    let used = back.job(13).unwrap().usage.unwrap();
    assert_eq!((used.cpu_user_ms, used.max_rss_kb), (1500, 4096));
    // The timed-out job is stored with its result: format 6 could not hold it.
    let job = back.job(2).unwrap();
    assert_eq!(job.result, Some(JobResult::Timeout));
    assert_eq!(job.reason.as_deref(), Some("time limit of 0:02 reached"));
    assert!(downgrade_job_6(JobRecord::from(job.clone())).is_err());
    // The batch job is stored with its script, once, and who cancelled the other.
    let job = back.job(3).unwrap();
    assert_eq!(
        (
            job.spec.name.as_str(),
            job.spec.hold,
            job.spec.begin_time_ms
        ),
        ("renamed", false, None)
    );
    assert_eq!(
        back.script(&job.spec.script.unwrap()).as_deref(),
        Some(SCRIPT)
    );
    assert_eq!(back.script_totals(), (1, SCRIPT.len()));
    let job = back.job(4).unwrap();
    assert_eq!(
        (job.reason.as_deref(), job.cancelled_by.as_deref()),
        (Some("cancelled by dave"), Some("dave"))
    );
    // Job 5's dependency could never be met once job 3 was cancelled: it was cancelled too.
    let job = back.job(5).unwrap();
    assert_eq!(
        (job.result, job.dependency_state, job.reason.as_deref()),
        (
            Some(JobResult::Cancelled),
            Some(DependencyState::Never),
            Some("never satisfied: job 3 ended cancelled")
        )
    );
    let job = back.job(6).unwrap();
    assert_eq!(job.dependency_state, Some(DependencyState::Satisfied));
    // The array held three more tasks (two of them taken by format 10's commands below);
    // its first is a job of its own.
    let array = back.job(7).unwrap().array.clone().unwrap();
    assert_eq!((array.pending.to_string(), array.running), ("7".into(), 1));
    let task = back.job(8).unwrap();
    assert_eq!(task.array_task.map(|t| (t.array_id, t.index)), Some((7, 1)));
    assert!(migrate::downgrade_job_8(JobRecord::from(job.clone())).is_err());
    // Format 10: task 5 split off held, task 3 killed while waiting, a new throttle.
    let array = back.job(7).unwrap();
    let progress = array.array.clone().unwrap();
    assert_eq!(
        (
            progress.pending.to_string(),
            progress.waiting,
            progress.unrun,
            array.spec.array.as_ref().and_then(|a| a.throttle)
        ),
        ("7".into(), 1, 1, Some(3))
    );
    let task = back.job(9).unwrap();
    assert_eq!(
        (task.array_task.map(|t| t.index), task.spec.hold),
        (Some(5), true)
    );
    // Format 11: job 10 waits for task 7_1; array 11's task 3 can never start (its pair
    // ended unrun) and waits as job 12, with why; the rest wait for their pairs.
    let waits = back.job(10).unwrap();
    assert_eq!(waits.dependency_state, Some(DependencyState::Waiting));
    let paired = back.job(11).unwrap();
    assert_eq!(
        (
            paired.dependency_state,
            paired.array.as_ref().map(|a| a.pending.to_string())
        ),
        (Some(DependencyState::Waiting), Some("1,5-7:2".into()))
    );
    let never = back.job(12).unwrap();
    assert_eq!(
        (
            never.array_task.map(|t| (t.array_id, t.index)),
            never.dependency_state,
            never.pend_reason.as_deref()
        ),
        (
            Some((11, 3)),
            Some(DependencyState::Never),
            Some("never satisfied: job 7_3 ended cancelled")
        )
    );
    // Format 12: host w3 (one cpu) was sent jobs 13 and 14, the second ahead of its room;
    // 13 ran there (and ended, in format 13's commands), 14 ended (killed while it waited).
    let placed = |id| back.job(id).map(|j| (j.state, j.host.clone()));
    assert_eq!(placed(13), Some((JobState::Done, Some("w3".into()))));
    assert_eq!(placed(14), Some((JobState::Exited, Some("w3".into()))));
}

/// Format 8 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 8; and its bytes read back as the same commands and state.
#[test]
fn format_8_is_written_as_its_builds_wrote_it() {
    let commands = every_v8_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 8,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_8);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 8);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_8);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_8)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_8)).unwrap());
    assert_eq!(back, state);
}

/// Format 10 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 10; and its bytes read back as the same commands and state.
#[test]
fn format_10_is_written_as_its_builds_wrote_it() {
    let commands = every_v10_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 10,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_10);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 10);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_10);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_10)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_10)).unwrap());
    assert_eq!(back, state);
}

/// Format 12 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 12; and its bytes read back as the same commands and state.
#[test]
fn format_12_is_written_as_its_builds_wrote_it() {
    let commands = every_v12_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 12,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_12);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 12);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_12);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_12)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_12)).unwrap());
    assert_eq!(back, state);
}

/// Format 11 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 11; and its bytes read back as the same commands and state.
#[test]
fn format_11_is_written_as_its_builds_wrote_it() {
    let commands = every_v11_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 11,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_11);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 11);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_11);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_11)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_11)).unwrap());
    assert_eq!(back, state);
}

/// Format 9 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 9; and its bytes read back as the same commands and state.
#[test]
fn format_9_is_written_as_its_builds_wrote_it() {
    let commands = every_v9_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 9,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_9);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 9);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_9);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_9)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_9)).unwrap());
    assert_eq!(back, state);
}

/// An action on an array's tasks is refused in a format-9 cluster, naming it.
#[test]
fn an_action_on_tasks_is_refused_by_a_format_9_cluster() {
    let cmd = Command::ControlTasks {
        token: RequestToken(1),
        array: 7,
        tasks: None,
        by: None,
        actor: None,
        op: TaskOp::Control {
            action: JobAction::Kill,
        },
    };
    let refused = migrate::fit_format(9, cmd.clone()).unwrap_err();
    assert_eq!(refused.needs, 10);
    assert!(refused.to_string().contains("array"), "{refused}");
    assert_eq!(migrate::fit_format(10, cmd.clone()).unwrap(), cmd);
}

/// What only format 9 holds is refused in a format-8 cluster, naming it.
#[test]
fn a_dependency_is_refused_by_a_format_8_cluster_naming_it() {
    let spec = JobSpec {
        command: vec!["true".into()],
        dependency: Some("afterok:1".parse().unwrap()),
        ..JobSpec::default()
    };
    let submit = |spec| Command::Submit {
        token: RequestToken(1),
        spec,
        script: None,
    };
    let refused = fit_format(8, submit(spec.clone())).unwrap_err();
    assert_eq!((refused.what, refused.needs), ("dependency", 9));
    let plain = JobSpec {
        dependency: None,
        ..spec
    };
    assert_eq!(fit_format(8, submit(plain.clone())).unwrap(), submit(plain));
}

/// Format 7 is still written, byte for byte as its builds wrote it, while a cluster's
/// version is 7; and its bytes read back as the same commands and state.
#[test]
fn format_7_is_written_as_its_builds_wrote_it() {
    let commands = every_v7_command();
    let batch = Batch {
        at_ms: 1_700_000_000_000,
        format: 7,
        commands: commands.clone(),
    };
    assert_eq!(hex(&postcard::to_stdvec(&batch).unwrap()), GOLDEN_BATCH_7);
    let state = applied(&commands);
    assert_eq!(state.active_version(), 7);
    assert_eq!(hex(&state.snapshot_bytes().unwrap()), GOLDEN_SNAPSHOT_7);
    let read: Batch = postcard::from_bytes(&unhex(GOLDEN_BATCH_7)).unwrap();
    assert_eq!(read, batch);
    let back = State::from_record(decode_state(&unhex(GOLDEN_SNAPSHOT_7)).unwrap());
    assert_eq!(back, state);
}

/// What only format 8 holds is refused in a format-7 cluster, naming it; what format 7
/// holds goes through unchanged, but for who cancelled a job (for the record only).
#[test]
fn a_command_format_7_cannot_hold_is_refused_naming_it() {
    let newer = every_v8_command().split_off(every_v7_command().len());
    let refusals: Vec<String> = newer
        .iter()
        .cloned()
        .filter_map(|c| fit_format(7, c).err())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        refusals,
        [
            "script needs cluster version 8",
            "script needs cluster version 8",
            "xce update, hold and release needs cluster version 8",
            "xce signal needs cluster version 8",
            "script needs cluster version 8",
        ]
    );
    for cmd in every_v7_command() {
        assert_eq!(fit_format(7, cmd.clone()).unwrap(), cmd);
    }
    let Command::ControlJob { actor, .. } = fit_format(7, newer[5].clone()).unwrap() else {
        panic!("a kill stays a kill");
    };
    assert_eq!(actor, None);
    // An environment over format 7's 64 KiB, which format 8 takes, and no more.
    let mut big = JobSpec {
        command: vec!["true".into()],
        env: vec![("K".into(), "v".repeat(xce_client::export::MAX_ENV_BYTES))],
        ..JobSpec::default()
    };
    let submit = |spec: JobSpec| Command::Submit {
        token: RequestToken(77),
        spec,
        script: None,
    };
    let refused = fit_format(7, submit(big.clone())).unwrap_err().to_string();
    assert_eq!(refused, "env over 64 KiB needs cluster version 8");
    assert_eq!(
        xce_client::version::needed_by(&big),
        Some((8, "env over 64 KiB"))
    );
    big.env[0].1.truncate(1000);
    assert!(fit_format(7, submit(big.clone())).is_ok());
    assert_eq!(xce_client::version::needed_by(&big), None);
}

/// What only the current format holds is refused in a format-6 cluster, naming it; what
/// both hold goes through format 6 unchanged.
#[test]
fn a_command_format_6_cannot_hold_is_refused_naming_what_needs_the_newer_version() {
    let newer = every_command().split_off(every_v6_command().len());
    let refusals: Vec<String> = newer
        .into_iter()
        .filter_map(|c| fit_format(6, c).err())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        refusals,
        [
            "gres needs cluster version 7",
            "time_limit_s needs cluster version 7",
            "a timeout needs cluster version 7",
            "script needs cluster version 8",
            "script needs cluster version 8",
            "xce update, hold and release needs cluster version 8",
            "xce signal needs cluster version 8",
            "script needs cluster version 8",
            "dependency needs cluster version 9",
            "dependency needs cluster version 9",
            "array needs cluster version 9",
            "an action on an array's tasks or on a whole array needs cluster version 10",
            "an action on an array's tasks or on a whole array needs cluster version 10",
            "an action on an array's tasks or on a whole array needs cluster version 10",
            "an action on an array's tasks or on a whole array needs cluster version 10",
            "a dependency on tasks (ID_IDX, aftercorr) needs cluster version 11",
            "a dependency on tasks (ID_IDX, aftercorr) needs cluster version 11",
            "account needs cluster version 13",
            "job retirement needs cluster version 13",
        ]
    );
    for cmd in every_v6_command() {
        assert_eq!(fit_format(6, cmd.clone()).unwrap(), cmd);
    }
    let mut limited = JobSpec {
        command: vec!["x".into()],
        ..JobSpec::default()
    };
    limited.limits.time_limit_s = Some(60);
    let e = fit_format(
        6,
        Command::Submit {
            token: RequestToken(1),
            spec: limited,
            script: None,
        },
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "time_limit_s needs cluster version 7");
}

/// How every way a job ends reads in format 6: the result `apply` gives is the one derived
/// from what format 6 stores, so a replica restarting from a format-6 snapshot agrees with
/// one that applied the log.
#[test]
fn every_way_a_job_ends_has_its_result_and_format_6_derives_the_same() {
    use crate::state::testing::*;
    // (what happens to a running job on w1, the result it ends with)
    type Ending = (&'static str, fn(&mut State), Option<JobResult>);
    let endings: Vec<Ending> = vec![
        (
            "exit 0",
            |s| drop(finish(s, 90, 1, 1, JobEnd::Exit(0))),
            Some(JobResult::Completed),
        ),
        (
            "exit 3",
            |s| drop(finish(s, 90, 1, 1, JobEnd::Exit(3))),
            Some(JobResult::Failed),
        ),
        (
            "a signal",
            |s| drop(finish(s, 90, 1, 1, JobEnd::Signal(11))),
            Some(JobResult::Failed),
        ),
        (
            "never ran",
            |s| {
                drop(finish(
                    s,
                    90,
                    1,
                    1,
                    JobEnd::Failed("command not found: x".into()),
                ))
            },
            Some(JobResult::Failed),
        ),
        (
            "the OOM killer",
            |s| drop(finish(s, 90, 1, 1, JobEnd::OutOfMemory)),
            Some(JobResult::OutOfMemory),
        ),
        (
            "a kill order",
            |s| {
                control(s, 91, 1, JobAction::Kill);
                finish(s, 90, 1, 1, JobEnd::Signal(15));
            },
            Some(JobResult::Cancelled),
        ),
        (
            "a requeue",
            |s| {
                control(s, 91, 1, JobAction::Requeue);
                finish(s, 90, 1, 1, JobEnd::Signal(15));
            },
            None,
        ),
        (
            "its host lost (queue policy exit)",
            |s| {
                s.apply(
                    2,
                    Command::SetHostAvailable {
                        name: "w1".into(),
                        available: false,
                    },
                );
                s.apply(3, Command::HostLost { name: "w1".into() });
            },
            Some(JobResult::NodeFail),
        ),
        (
            "a kill while pending",
            |s| {
                control(s, 91, 1, JobAction::Requeue);
                finish(s, 90, 1, 1, JobEnd::Signal(15));
                control(s, 92, 1, JobAction::Kill);
            },
            Some(JobResult::Cancelled),
        ),
    ];
    for (what, end, expected) in endings {
        let mut s = running_on_w1(1);
        // The job's queue ends jobs whose host is lost.
        s.queues.get_mut("normal").unwrap().on_host_lost = LostPolicy::Exit;
        end(&mut s);
        let job = s.job(1).unwrap().clone();
        assert_eq!(job.result, expected, "{what}: {job:?}");
        let v6 = downgrade_job_6(JobRecord::from(job.clone())).unwrap();
        let back = Job::from(migrate::upgrade_job_6(v6).unwrap());
        assert_eq!(back, job, "{what}: format 6 derives another result");
    }
    // A timeout exists from format 7 on only.
    let mut s = running_on_w1(1);
    finish(
        &mut s,
        90,
        1,
        1,
        JobEnd::TimedOut {
            exit_code: None,
            signal: Some(9),
        },
    );
    let job = s.job(1).unwrap();
    assert_eq!(
        (job.state, job.result, job.signal),
        (JobState::Exited, Some(JobResult::Timeout), Some(9))
    );
}

/// Task runs are stored as a plain list and read back only as written: by start, each
/// beyond the one before. Overlapping runs (never written) would cost a merge per index,
/// so a record naming them fails to decode instead (the raft fuzz target found one naming
/// 236 million indices that took minutes).
#[test]
fn task_runs_read_back_only_as_they_are_written() {
    let mut set = TaskSet::new();
    set.insert_run(Run::new(0, 1, 1).unwrap());
    set.insert_run(Run::new(4, 10, 2).unwrap());
    set.insert_run(Run::new(11, 3_000_000, 1).unwrap());
    let bytes = postcard::to_stdvec(&runs_of(&set)).unwrap();
    let plain: Vec<(u32, u32, u32)> = set.runs().map(|r| (r.start, r.end, r.step)).collect();
    assert_eq!(
        bytes,
        postcard::to_stdvec(&plain).unwrap(),
        "a plain list's bytes"
    );
    let back: RunsRecord = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(set_of(back), set);
    for bad in [
        vec![(0, 10, 1), (5, 2_000_000_000, 2)],
        vec![(20, 30, 1), (0, 1, 1)],
        vec![(0, 1, 1), (0, 1, 1)],
        vec![(0, 10, 0)],
        vec![(5, 1, 1)],
        vec![(0, 9, 2)],
    ] {
        let bytes = postcard::to_stdvec(&bad).unwrap();
        assert!(
            postcard::from_bytes::<RunsRecord>(&bytes).is_err(),
            "{bad:?} read back"
        );
    }
}

proptest! {
    /// The client asks the cluster's version first for exactly the specs a format-6 cluster
    /// refuses (`xce_client::version`): the two cannot disagree.
    #[test]
    fn the_client_knows_what_needs_a_newer_version(spec in xce_client::testing::spec()) {
        let refused = fit_format(6, Command::Submit { token: RequestToken(1), spec: spec.clone(), script: None, }).err();
        let needs = xce_client::version::needed_by(&spec);
        prop_assert_eq!(refused.map(|e| (e.needs, e.what)), needs);
    }

    /// Every job the current format holds reads back as itself; and through format 6, where
    /// it fits, it reads back the same again (the step is lossless both ways).
    #[test]
    fn any_job_round_trips_through_its_record_and_format_6(job in xce_client::testing::job()) {
        let record = JobRecord::from(job.clone());
        let bytes = postcard::to_stdvec(&record).unwrap();
        prop_assert_eq!(Job::from(postcard::from_bytes::<JobRecord>(&bytes).unwrap()), job);
        if let Ok(old) = downgrade_job_6(record.clone()) {
            let up = migrate::upgrade_job_6(old.clone()).unwrap();
            prop_assert_eq!(downgrade_job_6(up).unwrap(), old);
        }
        if let Ok(old) = migrate::downgrade_job_7(record.clone()) {
            let bytes = postcard::to_stdvec(&old).unwrap();
            let back: v7::JobRecord = postcard::from_bytes(&bytes).unwrap();
            let up = step12::upgrade_job(step10::upgrade_job(step8::upgrade_job(step7::upgrade_job(back))));
            prop_assert_eq!(migrate::downgrade_job_7(up).unwrap(), old);
        }
        if let Ok(old) = migrate::downgrade_job_8(record.clone()) {
            let bytes = postcard::to_stdvec(&old).unwrap();
            let back: v8::JobRecord = postcard::from_bytes(&bytes).unwrap();
            let up = step12::upgrade_job(step10::upgrade_job(step8::upgrade_job(back)));
            prop_assert_eq!(migrate::downgrade_job_8(up).unwrap(), old);
        }
        // Format 12 holds every job charged to no account (its reserved start is dropped),
        // and reads back so.
        let no_account = record.spec.account.is_empty();
        match migrate::downgrade_job_12(record.clone()) {
            Ok(old) => {
                let bytes = postcard::to_stdvec(&old).unwrap();
                let back: v12::JobRecord = postcard::from_bytes(&bytes).unwrap();
                prop_assert_eq!(migrate::downgrade_job_12(step12::upgrade_job(back)).unwrap(), old);
                prop_assert!(no_account);
            }
            Err(e) => {
                prop_assert!(!no_account);
                prop_assert_eq!(e.needs, 13);
            }
        }
        // Format 10 (and 11) holds every one of those whose attempts all started, and reads
        // back so.
        let all_ran = record.runs == record.attempt;
        match migrate::downgrade_job_10(record) {
            Ok(old) => {
                let bytes = postcard::to_stdvec(&old).unwrap();
                let back: v10::JobRecord = postcard::from_bytes(&bytes).unwrap();
                let up = step12::upgrade_job(step10::upgrade_job(back));
                prop_assert_eq!(migrate::downgrade_job_10(up).unwrap(), old);
                prop_assert!(all_ran && no_account);
            }
            Err(e) => {
                prop_assert!(!all_ran || !no_account);
                prop_assert!(e.needs == 12 || e.needs == 13);
            }
        }
    }

    /// Every command the current format holds reads back from a batch as itself.
    #[test]
    fn any_submit_or_join_round_trips_through_a_batch(
        spec in xce_client::testing::spec(),
        host in xce_client::testing::attributes(),
        end in xce_client::testing::end(),
        reason in xce_client::testing::pend_reason(),
    ) {
        let t = RequestToken(7);
        let commands = [
            Command::Submit { token: t, spec, script: None, },
            Command::RegisterHost { token: t, host, held: Vec::new() },
            Command::JobFinished { token: t, id: 1, attempt: 2, host: "w".into(), end, usage: None },
            Command::SetPendReasons { token: t, epoch: 3, reasons: vec![(4, reason)] },
        ];
        for format in [6, 7, 8, STORE_FORMAT] {
            let fitted: Vec<Command> = commands
                .iter()
                .filter_map(|c| fit_format(format, c.clone()).ok())
                .collect();
            let batch = Batch { at_ms: 9, format, commands: fitted };
            let bytes = postcard::to_stdvec(&batch).unwrap();
            prop_assert_eq!(postcard::from_bytes::<Batch>(&bytes).unwrap(), batch);
        }
    }
}
