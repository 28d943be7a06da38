//! Controller configuration: flags and environment (in main) plus an optional YAML file,
//! validated into one [`Config`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use xce_client::tls::{TlsArgs, TlsError, TlsFile, TlsPaths};
use xce_client::{parse_candidates, Candidate, CandidateError};

use crate::node::node_id_of;
use crate::state::time_limit::QueueTime;
use crate::state::{LostPolicy, QueueDef};
use crate::store::{Identity, NodeId};

/// Raft timing and log compaction. Defaults favour fast failover on a LAN. openraft starts an
/// election after `election_timeout_max_ms` (the leader lease) plus a random timeout in
/// `[min, max)` without hearing from the primary, so with heartbeats every 50 ms a dead primary
/// is replaced 450–600 ms after it died. The price: a primary that stalls for that long (an
/// overloaded host, a stuck disk) is deposed too, which clients ride out as a failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTuning {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot (and compact the log) after this many entries since the last one.
    pub snapshot_logs: u64,
    /// Entries kept behind a snapshot for slow followers to catch up without a snapshot.
    pub logs_kept: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 50,
            election_timeout_min_ms: 150,
            election_timeout_max_ms: 300,
            snapshot_logs: 5000,
            logs_kept: 1000,
        }
    }
}

/// Worker host liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostsConfig {
    /// A host whose worker is silent this long becomes `unavailable`.
    pub heartbeat_ttl_ms: u64,
    /// A host `unavailable` this much longer is lost: its jobs are requeued (or exited, per
    /// queue policy). Long enough to ride out a worker restart; a copy that reappears later
    /// is killed by attempt fencing.
    pub lost_grace_ms: u64,
}

impl Default for HostsConfig {
    fn default() -> Self {
        HostsConfig {
            heartbeat_ttl_ms: 10_000,
            lost_grace_ms: 30_000,
        }
    }
}

/// What one controller lets clients hold (see `network::connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Most open connections; never more than the file-descriptor limit leaves room for.
    pub max_connections: usize,
    /// A connection with no call for this long is closed (controller peers excepted).
    pub idle_timeout_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_connections: 4096,
            idle_timeout_ms: 300_000,
        }
    }
}

/// When ended jobs leave the replicated state for history, and how long history keeps them
/// (`history:`), as the file gives them: durations as `300s`, `5m`, `7d`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryFile {
    /// How long after its end a job retires (Slurm's `MinJobAge`, 300 s).
    pub retire_after: String,
    /// How long history keeps a job, from its end.
    pub retention: String,
}

impl Default for HistoryFile {
    fn default() -> Self {
        HistoryFile {
            retire_after: "5m".into(),
            retention: "365d".into(),
        }
    }
}

/// [`HistoryFile`], checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRules {
    pub retire_after_ms: u64,
    pub retention_ms: u64,
}

impl Default for HistoryRules {
    fn default() -> Self {
        HistoryFile::default().rules().unwrap_or(HistoryRules {
            retire_after_ms: 300_000,
            retention_ms: 365 * 86_400_000,
        })
    }
}

impl HistoryFile {
    /// The rules, or the key whose duration does not read.
    pub fn rules(&self) -> Result<HistoryRules, ConfigError> {
        let read = |key: &str, text: &str| {
            span_ms(text).map_err(|why| ConfigError::Invalid(format!("history.{key}: {why}")))
        };
        let retention_ms = read("retention", &self.retention)?;
        if retention_ms == 0 {
            return Err(ConfigError::Invalid(
                "history.retention: 0 would purge every job as it retires; give a duration such as 365d".into(),
            ));
        }
        Ok(HistoryRules {
            retire_after_ms: read("retire_after", &self.retire_after)?,
            retention_ms,
        })
    }
}

/// A duration as the config file writes it: a number and a unit (`ms`, `s`, `m`, `h`, `d`,
/// `w`), in milliseconds.
pub fn span_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "" => {
            return Err(format!(
                "{text:?} has no unit: write it as 300s, 5m, 7d (units ms, s, m, h, d, w)"
            ))
        }
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (units ms, s, m, h, d, w)"
            ))
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 300s, 5m or 7d"))?;
    n.checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Rules for the jobs clients submit, as the file gives them (`jobs:`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsFile {
    /// The longest time limit a job may ask for, in `--time`'s forms (`365-00:00:00`).
    pub max_time_limit: String,
    /// The largest job script, in bytes (at most `state::MAX_SCRIPT_BYTES`).
    pub max_script_bytes: usize,
    /// Whether a job whose dependency can never be met is cancelled, when it does not say
    /// (`--kill-on-invalid-dep`); off by default, as in Slurm.
    pub kill_on_invalid_dep: bool,
    /// The most tasks one array may hold (`--array`).
    pub max_array_tasks: u64,
    /// The most jobs one user may have submitted and not yet ended (Slurm's
    /// `MaxSubmitJobs`): an array counts once, plus each of its tasks while placed. None:
    /// no limit.
    pub max_submitted_per_user: Option<u64>,
}

impl Default for JobsFile {
    fn default() -> Self {
        JobsFile {
            max_time_limit: xce_client::time_limit::format(
                crate::state::time_limit::DEFAULT_MAX_TIME_LIMIT_S,
            ),
            max_script_bytes: xce_client::script::DEFAULT_MAX_SCRIPT_BYTES,
            kill_on_invalid_dep: false,
            max_array_tasks: xce_client::array::DEFAULT_MAX_TASKS,
            max_submitted_per_user: None,
        }
    }
}

/// Rules for the jobs clients submit, checked before a submit is proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRules {
    /// The longest time limit a job may ask for, in seconds.
    pub max_time_limit_s: u32,
    /// Each queue's time rules, by queue name (none: no default, no maximum of its own).
    pub queue_time: BTreeMap<String, QueueTime>,
    /// The largest job script, in bytes.
    pub max_script_bytes: usize,
    /// A dependent job's `--kill-on-invalid-dep` when it does not say.
    pub kill_on_invalid_dep: bool,
    /// The most tasks one array may hold.
    pub max_array_tasks: u64,
    /// The most jobs one user may have submitted and not yet ended (`State::submits_of`).
    pub max_submitted_per_user: Option<u64>,
    /// Who a job may be charged to (`accounts:` and `users:`).
    pub accounts: crate::state::accounts::Accounts,
}

impl Default for JobRules {
    fn default() -> Self {
        JobRules {
            max_time_limit_s: crate::state::time_limit::DEFAULT_MAX_TIME_LIMIT_S,
            queue_time: BTreeMap::new(),
            max_script_bytes: xce_client::script::DEFAULT_MAX_SCRIPT_BYTES,
            kill_on_invalid_dep: false,
            max_array_tasks: xce_client::array::DEFAULT_MAX_TASKS,
            max_submitted_per_user: None,
            accounts: crate::state::accounts::Accounts::default(),
        }
    }
}

impl JobRules {
    /// The time rules of queue `name`.
    pub fn queue_time(&self, name: &str) -> QueueTime {
        self.queue_time.get(name).copied().unwrap_or_default()
    }
}

/// A queue as the file gives it: its definition (replicated by each primary's barrier) and
/// its time rules (applied where a submit is judged).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueFile {
    pub name: String,
    pub priority: i32,
    /// What becomes of this queue's jobs when their host is lost.
    #[serde(default)]
    pub on_host_lost: LostPolicy,
    /// The time limit of a job that asks for none, in `--time`'s forms.
    #[serde(default)]
    pub default_time: Option<String>,
    /// The longest time limit a job of this queue may ask for, in `--time`'s forms.
    #[serde(default)]
    pub max_time: Option<String>,
}

impl QueueFile {
    fn def(&self) -> QueueDef {
        QueueDef {
            name: self.name.clone(),
            priority: self.priority,
            on_host_lost: self.on_host_lost,
        }
    }

    /// Its time rules: each one a limit (not `UNLIMITED`), the default no longer than the
    /// maximum, and neither over the cluster's.
    fn time(&self, cluster_max_s: u32) -> Result<QueueTime, ConfigError> {
        let parse = |key: &str, text: &Option<String>| -> Result<Option<u32>, ConfigError> {
            let Some(text) = text else { return Ok(None) };
            let invalid = |why: String| {
                ConfigError::Invalid(format!("queues: queue {:?}: {key}: {why}", self.name))
            };
            let seconds = xce_client::time_limit::parse(text)
                .map_err(|e| invalid(e.to_string()))?
                .ok_or_else(|| invalid(format!("{text:?} is no limit; leave it out for none")))?;
            if seconds > cluster_max_s {
                return Err(invalid(format!(
                    "{text:?} is over jobs.max_time_limit ({})",
                    xce_client::time_limit::format(cluster_max_s)
                )));
            }
            Ok(Some(seconds))
        };
        let time = QueueTime {
            default_s: parse("default_time", &self.default_time)?,
            max_s: parse("max_time", &self.max_time)?,
        };
        if let (Some(d), Some(m)) = (time.default_s, time.max_s) {
            if d > m {
                return Err(ConfigError::Invalid(format!(
                    "queues: queue {:?}: default_time is over its max_time",
                    self.name
                )));
            }
        }
        Ok(time)
    }
}

impl JobsFile {
    fn rules(&self, queues: &[QueueFile]) -> Result<JobRules, ConfigError> {
        let max = xce_client::time_limit::parse(&self.max_time_limit)
            .map_err(|e| ConfigError::Invalid(format!("jobs.max_time_limit: {e}")))?
            .unwrap_or(u32::MAX);
        let queue_time = queues
            .iter()
            .map(|q| Ok((q.name.clone(), q.time(max)?)))
            .collect::<Result<_, ConfigError>>()?;
        let most = crate::state::MAX_ARRAY_TASKS;
        if self.max_array_tasks == 0 || self.max_array_tasks > most {
            return Err(ConfigError::Invalid(format!(
                "jobs.max_array_tasks: {} is outside 1..={most}",
                self.max_array_tasks
            )));
        }
        if self.max_submitted_per_user == Some(0) {
            return Err(ConfigError::Invalid(
                "jobs.max_submitted_per_user: 0 would take no job (leave it out for no limit)"
                    .into(),
            ));
        }
        let hard = crate::state::MAX_SCRIPT_BYTES;
        if self.max_script_bytes == 0 || self.max_script_bytes > hard {
            return Err(ConfigError::Invalid(format!(
                "jobs.max_script_bytes: {} is outside 1..={hard}",
                self.max_script_bytes
            )));
        }
        Ok(JobRules {
            max_time_limit_s: max,
            queue_time,
            max_script_bytes: self.max_script_bytes,
            kill_on_invalid_dep: self.kill_on_invalid_dep,
            max_array_tasks: self.max_array_tasks,
            max_submitted_per_user: self.max_submitted_per_user,
            accounts: crate::state::accounts::Accounts::default(),
        })
    }
}

/// The optional YAML file (`--config`). Unknown keys are an error naming the key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// This controller's name in `peers`, as `--name` (which wins).
    pub name: Option<String>,
    /// Every candidate, as `--peers` (which wins).
    pub peers: Option<String>,
    /// Where the Raft log, vote and snapshots live, as `--data-dir` (which wins).
    pub data_dir: Option<PathBuf>,
    /// Queues beside the default `normal` (which may be listed, for its time rules).
    pub queues: Vec<QueueFile>,
    pub raft: RaftTuning,
    pub hosts: HostsConfig,
    pub limits: LimitsConfig,
    /// Rules for submitted jobs.
    pub jobs: JobsFile,
    /// The account tree jobs are charged to (`NAME: {shares, users, accounts}`); none: any
    /// account name is a label.
    pub accounts: BTreeMap<String, crate::state::accounts::AccountFile>,
    /// Users' settings (`NAME: {default_account}`).
    pub users: BTreeMap<String, crate::state::accounts::UserFile>,
    /// When ended jobs retire to history, and how long it keeps them.
    pub history: HistoryFile,
    /// Keep the cluster at this version even once every member runs a newer build, so that
    /// a rollback to the older build stays possible (as CockroachDB's
    /// `preserve_downgrade_option`); remove it to let the primary raise the version.
    pub hold_version: Option<u32>,
    /// TLS files (`ca`, `cert`, `key`); the `--tls-*` flags win over them.
    pub tls: TlsFile,
    /// Where Prometheus metrics are served (`host:port`); none by default.
    pub metrics_listen: Option<String>,
    /// Log format and level (`format: text|json`, `level:`); the flags win.
    pub log: xce_daemon::logging::LogFile,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--peers: {0}")]
    Peers(CandidateError),
    #[error("--name {name:?} is not in --peers (known: {known})")]
    UnknownName { name: String, known: String },
    #[error("--peers: every candidate needs a name (name=host:port); {entry:?} has none")]
    UnnamedPeer { entry: String },
    #[error(transparent)]
    File(#[from] xce_daemon::config::FileError),
    #[error("config file: {0}")]
    Invalid(String),
    #[error("--raft-addrs: {0}")]
    RaftAddrs(String),
    #[error("{0}")]
    Tls(#[from] TlsError),
}

/// By hand, not `#[from]`, which would also make the candidate error the source: printed
/// with its chain (`{:#}`), the message would say it twice.
impl From<CandidateError> for ConfigError {
    fn from(e: CandidateError) -> Self {
        ConfigError::Peers(e)
    }
}

/// A validated controller configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub node_id: NodeId,
    /// This controller's position in `peers`.
    pub index: usize,
    /// A controller added to a running cluster (`--join`): it never forms a cluster of its
    /// own, and its node id comes from its name (`node::members`).
    pub join: bool,
    pub peers: Vec<Candidate>,
    pub data_dir: PathBuf,
    pub queues: Vec<QueueDef>,
    pub raft: RaftTuning,
    pub hosts: HostsConfig,
    pub limits: LimitsConfig,
    pub jobs: JobRules,
    /// When ended jobs retire to history, and how long it keeps them.
    pub history: HistoryRules,
    /// The version the cluster is held at, if any (`hold_version`).
    pub hold_version: Option<u32>,
    pub write_timeout: Duration,
    pub read_timeout: Duration,
    /// How long a request waits for a primary during an election before `noMaster`.
    pub hold: Duration,
    /// Where this controller reaches a peer for Raft when that differs from the peer's
    /// `--peers` address (a separate peer network, NAT, or a test's fault link).
    pub raft_addrs: BTreeMap<NodeId, String>,
    /// TLS for every connection, in and out: flags over the file's `tls:` keys.
    pub tls: Option<TlsPaths>,
    tls_file: TlsFile,
    /// Where Prometheus metrics are served (`--metrics-listen`, or `metrics_listen`).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The file's `log:` keys, for `main`'s log setup.
    pub log: xce_daemon::logging::LogFile,
}

impl Config {
    /// Validates the flags and the optional file.
    pub fn new(
        name: &str,
        peers: &str,
        data_dir: &Path,
        file: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        Config::load(Some(name), Some(peers), Some(data_dir), file)
    }

    /// The settings that identify this controller from the flags (and their `XCE_*`
    /// variables) or, for what they leave out, the file; then as [`Config::from_file`].
    pub fn load(
        name: Option<&str>,
        peers: Option<&str>,
        data_dir: Option<&Path>,
        file: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        // The flags first: their errors are named before the file's.
        if let (Some(name), Some(peers)) = (name, peers) {
            check_peers(name, peers)?;
        }
        let file = match file {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let missing = |what: &str| {
            ConfigError::Invalid(format!(
                "no {what}: give --{flag}, XCE_{var} or `{key}:` in the config file",
                flag = what.replace('_', "-"),
                var = what.to_uppercase(),
                key = what
            ))
        };
        let name = name
            .map(str::to_string)
            .or_else(|| file.name.clone())
            .ok_or_else(|| missing("name"))?;
        let peers = peers
            .map(str::to_string)
            .or_else(|| file.peers.clone())
            .ok_or_else(|| missing("peers"))?;
        let data_dir = data_dir
            .map(Path::to_path_buf)
            .or_else(|| file.data_dir.clone())
            .ok_or_else(|| missing("data_dir"))?;
        Config::from_file(&name, &peers, &data_dir, file)
    }

    /// Validates the flags and a parsed file.
    pub fn from_file(
        name: &str,
        peers: &str,
        data_dir: &Path,
        file: FileConfig,
    ) -> Result<Config, ConfigError> {
        let (peers, index) = check_peers(name, peers)?;
        validate_file(&file)?;
        let tls = TlsArgs::default().resolve(&file.tls)?;
        let metrics_listen = match &file.metrics_listen {
            Some(addr) => Some(metrics_addr("metrics_listen", addr)?),
            None => None,
        };
        Ok(Config {
            name: name.to_string(),
            node_id: node_id_of(index),
            index,
            join: false,
            peers,
            data_dir: data_dir.to_path_buf(),
            queues: file.queues.iter().map(QueueFile::def).collect(),
            raft: file.raft,
            hosts: file.hosts,
            limits: file.limits,
            jobs: crate::state::accounts::Accounts::new(&file.accounts, &file.users)
                .map_err(ConfigError::Invalid)
                .and_then(|accounts| {
                    let mut rules = file.jobs.rules(&file.queues)?;
                    rules.accounts = accounts;
                    Ok(rules)
                })?,
            history: file.history.rules()?,
            hold_version: file.hold_version,
            write_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(3),
            // Long enough to cover a whole election (lease plus timeout) and the new barrier.
            hold: Duration::from_millis(2 * file.raft.election_timeout_max_ms + 200),
            raft_addrs: BTreeMap::new(),
            tls,
            tls_file: file.tls,
            metrics_listen,
            log: file.log,
        })
    }

    /// How long a primary may go unacknowledged by a majority before it stops answering:
    /// the standbys cannot elect another primary sooner than openraft's leader lease
    /// (`election_timeout_max_ms`) plus the shortest election timeout after the last
    /// acknowledgement; one heartbeat less leaves room for timer jitter. 400 ms by default.
    pub fn primary_lease(&self) -> Duration {
        let t = self.raft;
        Duration::from_millis(
            (t.election_timeout_max_ms + t.election_timeout_min_ms).saturating_sub(t.heartbeat_ms),
        )
    }

    /// How long a connect or a call to a peer may run in the background: a few election
    /// timeouts (1.2 s by default), so that a link with a round trip of several hundred
    /// milliseconds still connects (TCP, a first round trip and a join) and answers, while a
    /// dead peer is retried about once a second.
    pub fn peer_budget(&self) -> Duration {
        Duration::from_millis(4 * self.raft.election_timeout_max_ms)
    }

    /// When a standby may stand for election (see `node::election`): openraft's timing.
    pub fn election_timing(&self) -> crate::node::election::ElectionTiming {
        crate::node::election::ElectionTiming {
            lease: Duration::from_millis(self.raft.election_timeout_max_ms),
            timeout_min: Duration::from_millis(self.raft.election_timeout_min_ms),
            timeout_max: Duration::from_millis(self.raft.election_timeout_max_ms),
        }
    }

    /// Adds `--raft-addrs` (`name=host:port,...`): every name must be another controller in
    /// `--peers`.
    pub fn with_raft_addrs(mut self, spec: &str) -> Result<Config, ConfigError> {
        for route in parse_candidates(spec)? {
            let index = self
                .peers
                .iter()
                .position(|c| c.name == route.name)
                .ok_or_else(|| {
                    ConfigError::RaftAddrs(format!("{:?} is not in --peers", route.name))
                })?;
            if route.name == self.name || route.name == route.addr() {
                return Err(ConfigError::RaftAddrs(format!(
                    "{:?} must name another controller (name=host:port)",
                    route.addr()
                )));
            }
            // Under its `--peers` position and, should it be a controller added at run time,
            // under its joined id (`node::members`): whichever the membership holds.
            self.raft_addrs.insert(node_id_of(index), route.addr());
            let joined = crate::node::members::joined_id(&route.name);
            self.raft_addrs.insert(joined, route.addr());
        }
        Ok(self)
    }

    /// Applies the `--tls-*` flags (or `XCE_TLS_*`) over the file's `tls:` keys.
    pub fn with_tls(mut self, flags: &TlsArgs) -> Result<Config, ConfigError> {
        self.tls = flags.resolve(&self.tls_file)?;
        Ok(self)
    }

    /// Applies `--metrics-listen` over the file's `metrics_listen`.
    pub fn with_metrics_listen(mut self, addr: &str) -> Result<Config, ConfigError> {
        self.metrics_listen = Some(metrics_addr("--metrics-listen", addr)?);
        Ok(self)
    }

    /// This controller's own candidate entry.
    pub fn me(&self) -> &Candidate {
        &self.peers[self.index]
    }

    /// Makes this a controller that joins a running cluster (`--join`): it waits to be added
    /// (`xce admin members add`) instead of forming a cluster, under its joined node id.
    pub fn joining(mut self) -> Config {
        self.join = true;
        self.node_id = crate::node::members::joined_id(&self.name);
        self
    }

    /// The record that ties the data directory to this controller.
    pub fn identity(&self) -> Identity {
        Identity {
            name: self.name.clone(),
            node_id: self.node_id,
            peers: self.peers.iter().map(ToString::to_string).collect(),
            format: crate::store::STORE_FORMAT,
        }
    }

    /// openraft's configuration.
    pub fn openraft(&self) -> Result<openraft::Config, ConfigError> {
        let t = self.raft;
        let config = openraft::Config {
            cluster_name: "xce".into(),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_timeout_min_ms,
            election_timeout_max: t.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(t.snapshot_logs),
            max_in_snapshot_log_to_keep: t.logs_kept,
            // Entries per append-entries message: with batches of at most ~512 KiB this bounds
            // a message to ~32 MiB, half of capnp's limit.
            max_payload_entries: 64,
            // Elections are ours, behind a pre-vote (`node::election`).
            enable_elect: false,
            ..Default::default()
        };
        config
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("raft: {e}")))
    }
}

fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    Ok(xce_daemon::config::read_file(path)?)
}

/// A metrics address, or an error naming `key`.
fn metrics_addr(key: &str, addr: &str) -> Result<std::net::SocketAddr, ConfigError> {
    xce_daemon::metrics::listen_addr(key, addr).map_err(ConfigError::Invalid)
}

/// The candidates, and where this controller (`name`) is among them.
fn check_peers(name: &str, peers: &str) -> Result<(Vec<Candidate>, usize), ConfigError> {
    let peers = parse_candidates(peers)?;
    if let Some(c) = peers.iter().find(|c| c.name == c.addr()) {
        return Err(ConfigError::UnnamedPeer { entry: c.addr() });
    }
    let index =
        peers
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| ConfigError::UnknownName {
                name: name.to_string(),
                known: peers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
    Ok((peers, index))
}

/// Parses the YAML text of a config file.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    xce_daemon::config::parse(text)
}

fn validate_file(file: &FileConfig) -> Result<(), ConfigError> {
    if let Some(v) = file.hold_version {
        use crate::store::{OLDEST_FORMAT, STORE_FORMAT};
        if !(OLDEST_FORMAT..=STORE_FORMAT).contains(&v) {
            return Err(ConfigError::Invalid(format!(
                "hold_version: {v} is not a version this build runs ({OLDEST_FORMAT} to {STORE_FORMAT})"
            )));
        }
    }
    if file.limits.max_connections < 16 {
        return Err(ConfigError::Invalid(
            "limits.max_connections must be at least 16 (peers and workers need room)".into(),
        ));
    }
    if file.limits.idle_timeout_ms < 1000 {
        return Err(ConfigError::Invalid(
            "limits.idle_timeout_ms must be at least 1000".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for q in &file.queues {
        let valid = !q.name.is_empty()
            && q.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(ConfigError::Invalid(format!(
                "queues: invalid queue name {:?}",
                q.name
            )));
        }
        if !seen.insert(q.name.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "queues: queue {:?} is defined twice",
                q.name
            )));
        }
    }
    let t = file.raft;
    if file.hosts.heartbeat_ttl_ms < 100 {
        return Err(ConfigError::Invalid(
            "hosts.heartbeat_ttl_ms must be at least 100".into(),
        ));
    }
    if t.snapshot_logs == 0 {
        return Err(ConfigError::Invalid(
            "raft.snapshot_logs must be at least 1".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEERS: &str = "c1=127.0.0.1:7101,c2=127.0.0.1:7102,c3=127.0.0.1:7103";

    #[test]
    fn raft_addrs_name_other_controllers() {
        let c = Config::new("c1", PEERS, Path::new("/d"), None).unwrap();
        let routed = c.clone().with_raft_addrs("c2=127.0.0.1:9").unwrap();
        assert_eq!(
            routed.raft_addrs.get(&2).map(String::as_str),
            Some("127.0.0.1:9")
        );
        let e = c.clone().with_raft_addrs("c7=127.0.0.1:9").unwrap_err();
        assert_eq!(e.to_string(), "--raft-addrs: \"c7\" is not in --peers");
        assert!(c.clone().with_raft_addrs("c1=127.0.0.1:9").is_err());
        assert!(c.with_raft_addrs("127.0.0.1:9").is_err());
    }

    #[test]
    fn node_ids_follow_the_peers_list() {
        let c = Config::new("c2", PEERS, Path::new("/tmp/x"), None).unwrap();
        assert_eq!(c.node_id, 2);
        assert_eq!(c.me().port, 7102);
    }

    #[test]
    fn bad_flags_name_the_problem() {
        let e = Config::new("c9", PEERS, Path::new("/d"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--name \"c9\" is not in --peers (known: c1, c2, c3)"
        );
        let e = Config::new("c1", "c1=h:1,,c2=h:2", Path::new("/d"), None).unwrap_err();
        assert!(e.to_string().contains("candidate 2 is empty"), "{e}");
        let e = Config::new("c1", "c1=h:1,h:2", Path::new("/d"), None).unwrap_err();
        assert!(e.to_string().contains("\"h:2\" has none"), "{e}");
    }

    #[test]
    fn file_rejects_unknown_keys_and_bad_queues() {
        assert!(parse_file("queues: []\nbogus: 1\n")
            .unwrap_err()
            .contains("bogus"));
        assert!(parse_file("raft:\n  heartbeat: 5\n")
            .unwrap_err()
            .contains("heartbeat"));
        let f =
            parse_file("queues:\n  - {name: high, priority: 50}\n  - {name: high, priority: 1}\n")
                .unwrap();
        assert!(validate_file(&f).unwrap_err().to_string().contains("twice"));
        let f = parse_file("queues:\n  - {name: \"a b\", priority: 1}\n").unwrap();
        assert!(validate_file(&f).unwrap_err().to_string().contains("a b"));
    }

    #[test]
    fn a_queue_s_time_rules_are_limits_its_default_within_its_maximum() {
        let rules = |text: &str| {
            let f = parse_file(text).unwrap();
            f.jobs.rules(&f.queues).map_err(|e| e.to_string())
        };
        let ok = rules(
            "queues:\n  - {name: short, priority: 9, default_time: \"10\", max_time: \"1:00:00\"}\n",
        )
        .unwrap();
        assert_eq!(
            ok.queue_time("short"),
            QueueTime {
                default_s: Some(600),
                max_s: Some(3600)
            }
        );
        assert_eq!(ok.queue_time("normal"), QueueTime::default());
        for (text, says) in [
            (
                "queues:\n  - {name: q, priority: 1, default_time: \"2:00:00\", max_time: \"1:00:00\"}\n",
                "default_time is over its max_time",
            ),
            (
                "queues:\n  - {name: q, priority: 1, max_time: UNLIMITED}\n",
                "max_time: \"UNLIMITED\" is no limit",
            ),
            (
                "jobs:\n  max_time_limit: \"1:00:00\"\nqueues:\n  - {name: q, priority: 1, default_time: \"2:00:00\"}\n",
                "is over jobs.max_time_limit (1:00:00)",
            ),
            (
                "queues:\n  - {name: q, priority: 1, max_time: soon}\n",
                "queue \"q\": max_time",
            ),
        ] {
            let e = rules(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_example_config_is_valid() {
        let text = include_str!("../../../deploy/controller.yaml");
        let f = parse_file(text).unwrap();
        validate_file(&f).unwrap();
        assert!(f.queues.iter().any(|q| q.name == "high"));
    }
}
