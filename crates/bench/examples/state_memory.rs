//! Where a controller's memory goes per job, measured in one process without a cluster:
//! `cargo run --release -p xce-bench --example state_memory -- 200000`.
//!
//! Builds the same pieces a controller holds for N submitted jobs, one after the other, and
//! prints how much each one grew this process's RSS (so glibc malloc's own overhead counts, as
//! it does in a controller): the submits as they sit in the in-memory Raft log, the applied
//! `State` (jobs, the derived indexes and the request-token window), the snapshot encoding, the
//! clone a snapshot build takes, and a state decoded from the snapshot with and without its
//! indexes, and then that snapshot written into and read back from a redb file as the store
//! does (redb keeps up to 1 GiB of pages cached by default). Each step mostly allocates (little
//! is freed before the next, and glibc may reuse what is), so each delta is about that step's
//! memory. Every job is the one `xce-bench scale` submits.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use redb::ReadableDatabase;
use xce_client::types::{Job, JobFilter, JobSpec, RequestToken};
use xce_controller::state::{Command, State, TOKEN_WINDOW};

fn rss_bytes() -> anyhow::Result<f64> {
    let text = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    let kb: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024.0)
}

struct Meter {
    n: f64,
    last: f64,
    since: Instant,
}

impl Meter {
    /// Prints how much RSS grew since the last step, in MiB and bytes per job, and how long
    /// the step took.
    fn step(&mut self, what: &str) -> anyhow::Result<()> {
        let now = rss_bytes()?;
        let grew = now - self.last;
        println!(
            "{what:<58} {:>8.1} MiB {:>6.0} B/job {:>7.0} ms",
            grew / (1024.0 * 1024.0),
            grew / self.n,
            self.since.elapsed().as_secs_f64() * 1000.0
        );
        self.last = now;
        self.since = Instant::now();
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().context("the argument is the number of jobs")?,
        None => 200_000,
    };
    let spec = JobSpec {
        name: "bench".into(),
        user: "bench".into(),
        command: vec!["true".into()],
        ..JobSpec::default()
    };
    println!(
        "{n} jobs (token window {TOKEN_WINDOW}); RSS growth per step, as glibc malloc hands it out"
    );
    let mut meter = Meter {
        n: n as f64,
        last: rss_bytes()?,
        since: Instant::now(),
    };

    let commands: Vec<Command> = (0..n)
        .map(|_| Command::Submit {
            token: RequestToken::random(),
            spec: spec.clone(),
        })
        .collect();
    meter.step("submit commands (the in-memory Raft log holds these)")?;

    let mut state = State::default();
    for (i, cmd) in commands.iter().enumerate() {
        state.apply(1_700_000_000_000 + i as u64, cmd.clone());
    }
    meter.step("applied State (jobs + indexes + token window)")?;

    let mut jobs: BTreeMap<u64, Job> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = state.jobs_page(&JobFilter::default(), after, 5000);
        jobs.extend(page.jobs.into_iter().map(|j| (j.id, j)));
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    meter.step("  of which: the jobs alone, BTreeMap<JobId, Job> (a copy)")?;
    anyhow::ensure!(jobs.len() == n, "{} jobs in the state", jobs.len());

    let encoded = bincode::serialize(&state).context("encode the state")?;
    meter.step("snapshot encoding (bincode, as build_snapshot makes it)")?;
    println!(
        "{:<58} {:>8.1} MiB {:>6.0} B/job",
        "  its length",
        encoded.len() as f64 / (1024.0 * 1024.0),
        encoded.len() as f64 / n as f64
    );

    let copy = state.clone();
    meter.step("State clone (build_snapshot clones the state first)")?;

    let decoded: State = bincode::deserialize(&encoded).context("decode the state")?;
    meter.step("State decoded from the snapshot, no indexes yet")?;
    let restored = decoded.restored();
    meter.step("  its indexes (State::restored)")?;

    anyhow::ensure!(restored == copy, "the restored state differs");

    // The controller stores the snapshot in its redb file (opened with redb's default cache).
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let db = redb::Database::create(dir.path().join("xce.redb")).context("create a store")?;
    let txn = db.begin_write().context("begin a write")?;
    {
        let mut table = txn.open_table(META).context("open the table")?;
        table
            .insert("snapshot_data", encoded.as_slice())
            .context("store the snapshot")?;
    }
    txn.commit().context("commit")?;
    meter.step("redb: the snapshot written and committed (its page cache)")?;
    drop(db);
    meter.step("  after closing the database")?;
    let db = redb::Database::open(dir.path().join("xce.redb")).context("open the store")?;
    let len = {
        let txn = db.begin_read().context("begin a read")?;
        let table = txn.open_table(META).context("open the table")?;
        let value = table.get("snapshot_data").context("read the snapshot")?;
        value.map(|v| v.value().len())
    };
    anyhow::ensure!(len == Some(encoded.len()), "the stored snapshot differs");
    meter.step("redb: the snapshot read back once and dropped (cached)")?;

    println!(
        "sizes: Job {} B, JobSpec {} B, Command {} B (inline, before their strings)",
        std::mem::size_of::<Job>(),
        std::mem::size_of::<JobSpec>(),
        std::mem::size_of::<Command>()
    );
    drop((commands, jobs, copy, restored, db));
    Ok(())
}

const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
