//! Scheduler configuration: flags > `XCE_*` environment (both through clap, in main) > the
//! optional YAML file, validated into one [`Config`]. Unknown YAML keys are an error naming
//! the key.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use xce_client::tls::{TlsArgs, TlsError, TlsFile, TlsPaths};
use xce_client::{parse_candidates, Candidate, CandidateError};

/// The YAML file (`--config`); every key optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Controller candidates, as `--peers`.
    pub peers: Option<String>,
    /// This scheduler's name, as `--name`.
    pub name: Option<String>,
    /// How long the scheduler lease lasts unless renewed; a standby takes over about this
    /// long after the active scheduler died.
    pub lease_ttl_ms: Option<u64>,
    /// The slow safety timer: a full re-read of the cluster this often, events or not.
    pub reread_ms: Option<u64>,
    /// Attempts in one retry budget of the client (a decision is retried with a fresh
    /// budget after each one runs out, so this only decides how soon an outage is logged).
    pub retry_attempts: Option<u32>,
    /// TLS files (`ca`, `cert`, `key`), as `--tls-ca`, `--tls-cert`, `--tls-key`.
    pub tls: TlsFile,
    /// Where Prometheus metrics are served (`host:port`), as `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// Rounds of a host's resources sent ahead of its free room, as `--dispatch-ahead`.
    pub dispatch_ahead: Option<u32>,
    /// Blocked jobs given a reserved start each round, as `--backfill-depth`.
    pub backfill_depth: Option<u32>,
    /// What backfill adds to every job's end, as `--backfill-slack-ms`.
    pub backfill_slack_ms: Option<u64>,
    /// Log format and level (`format: text|json`, `level:`); the flags win.
    pub log: xce_daemon::logging::LogFile,
}

/// What flags and environment gave (`None`: not given).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub peers: Option<String>,
    pub name: Option<String>,
    pub lease_ttl_ms: Option<u64>,
    pub reread_ms: Option<u64>,
    pub retry_attempts: Option<u32>,
    pub metrics_listen: Option<String>,
    pub dispatch_ahead: Option<u32>,
    pub backfill_depth: Option<u32>,
    pub backfill_slack_ms: Option<u64>,
    pub tls: TlsArgs,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub peers: Vec<Candidate>,
    pub lease_ttl: Duration,
    pub reread: Duration,
    /// `None`: the client library's default budget.
    pub retry_attempts: Option<u32>,
    pub tls: Option<TlsPaths>,
    /// Where Prometheus metrics are served.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How many more rounds of its resources a host whose worker holds starts back is sent
    /// once its free room is taken, which it starts as its jobs end (from cluster version 12;
    /// at most [`xce_client::fit::MAX_AHEAD_ROUNDS`]). 0, the default, sends nothing ahead: a
    /// job sent ahead waits behind the host's jobs however long they run, even if another
    /// host frees first. For many short jobs.
    pub dispatch_ahead: u32,
    /// How many of the highest-priority jobs that do not fit yet get a reserved start each
    /// round, which later jobs may not delay ([`crate::backfill`]); 0: strict priority.
    pub backfill_depth: u32,
    /// How long past its time limit backfill counts a job as holding its room: the workers'
    /// kill grace (a job at its limit gets SIGTERM, and SIGKILL only that long after) and the
    /// lag of a start behind its dispatch. Under it, a job backfilled to end just before a
    /// reserved start could still hold its room at that start.
    pub backfill_slack_ms: u64,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--peers: {0}")]
    Peers(CandidateError),
    #[error("--peers: required (flag, XCE_PEERS or `peers` in the config file)")]
    NoPeers,
    #[error("--name: {0}")]
    Name(String),
    #[error(transparent)]
    File(#[from] xce_daemon::config::FileError),
    #[error("{0}")]
    Invalid(String),
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

/// The default name: one scheduler per host is the common case.
pub const DEFAULT_NAME: &str = "s1";
/// Lease time to live by default, and the bounds the controller accepts.
pub const DEFAULT_LEASE_TTL_MS: u64 = 3000;
const LEASE_TTL_MS: std::ops::RangeInclusive<u64> = 200..=60_000;
/// Safety re-read by default.
pub const DEFAULT_REREAD_MS: u64 = 60_000;
/// Reservations a round by default: Slurm's `bf_max_job_test` is of this order, and a round
/// over 100,000 pending jobs on 1,000 hosts stays well under a second with it.
pub const DEFAULT_BACKFILL_DEPTH: u32 = 100;
/// The most reservations a round may make: each is a search over every host's profile.
pub const MAX_BACKFILL_DEPTH: u32 = 10_000;
/// Backfill's slack by default: the workers' default kill grace (10 s) and 2 s for a start's
/// lag behind its dispatch.
pub const DEFAULT_BACKFILL_SLACK_MS: u64 = 12_000;

/// Reads the YAML file.
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    Ok(xce_daemon::config::read_file(path)?)
}

/// Parses the YAML text of a config file; an empty file is every default.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    xce_daemon::config::parse(text)
}

/// Layers flags and environment over the file and validates the result.
pub fn resolve(over: Overrides, file: FileConfig) -> Result<Config, ConfigError> {
    let peers = over.peers.or(file.peers).ok_or(ConfigError::NoPeers)?;
    let peers = parse_candidates(&peers)?;
    let name = over
        .name
        .or(file.name)
        .unwrap_or_else(|| DEFAULT_NAME.to_string());
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(ConfigError::Name(format!(
            "{name:?} must be letters, digits, '-', '_' or '.'"
        )));
    }
    let ttl = over
        .lease_ttl_ms
        .or(file.lease_ttl_ms)
        .unwrap_or(DEFAULT_LEASE_TTL_MS);
    if !LEASE_TTL_MS.contains(&ttl) {
        return Err(ConfigError::Invalid(format!(
            "lease_ttl_ms: {ttl} is outside {}..={}",
            LEASE_TTL_MS.start(),
            LEASE_TTL_MS.end()
        )));
    }
    let reread = over
        .reread_ms
        .or(file.reread_ms)
        .unwrap_or(DEFAULT_REREAD_MS);
    if reread < 1000 {
        return Err(ConfigError::Invalid(format!(
            "reread_ms: {reread} is below 1000 (a re-read is a full read of the cluster)"
        )));
    }
    let retry_attempts = over.retry_attempts.or(file.retry_attempts);
    if retry_attempts == Some(0) {
        return Err(ConfigError::Invalid(
            "retry_attempts: must be at least 1".into(),
        ));
    }
    let dispatch_ahead = over.dispatch_ahead.or(file.dispatch_ahead).unwrap_or(0);
    if dispatch_ahead > xce_client::fit::MAX_AHEAD_ROUNDS {
        return Err(ConfigError::Invalid(format!(
            "dispatch_ahead: {dispatch_ahead} rounds, at most {}",
            xce_client::fit::MAX_AHEAD_ROUNDS
        )));
    }
    let backfill_depth = over
        .backfill_depth
        .or(file.backfill_depth)
        .unwrap_or(DEFAULT_BACKFILL_DEPTH);
    if backfill_depth > MAX_BACKFILL_DEPTH {
        return Err(ConfigError::Invalid(format!(
            "backfill_depth: {backfill_depth} reservations, at most {MAX_BACKFILL_DEPTH}"
        )));
    }
    let backfill_slack_ms = over
        .backfill_slack_ms
        .or(file.backfill_slack_ms)
        .unwrap_or(DEFAULT_BACKFILL_SLACK_MS);
    let tls = over.tls.resolve(&file.tls)?;
    let metrics_listen = match over.metrics_listen.or(file.metrics_listen) {
        Some(addr) => Some(
            xce_daemon::metrics::listen_addr("--metrics-listen", &addr)
                .map_err(ConfigError::Invalid)?,
        ),
        None => None,
    };
    Ok(Config {
        name,
        peers,
        tls,
        lease_ttl: Duration::from_millis(ttl),
        reread: Duration::from_millis(reread),
        retry_attempts,
        metrics_listen,
        dispatch_ahead,
        backfill_depth,
        backfill_slack_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Result<FileConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scheduler.yaml");
        std::fs::write(&path, yaml).unwrap();
        read_file(&path)
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let f = file("peers: c1=127.0.0.1:7001\nname: s2\nlease_ttl_ms: 5000\n").unwrap();
        let c = resolve(Overrides::default(), f.clone()).unwrap();
        assert_eq!((c.name.as_str(), c.lease_ttl.as_millis()), ("s2", 5000));
        let over = Overrides {
            name: Some("s9".into()),
            ..Overrides::default()
        };
        let c = resolve(over, f).unwrap();
        assert_eq!(c.name, "s9");
        assert_eq!(c.peers.len(), 1);
        assert_eq!(c.reread.as_millis(), u128::from(DEFAULT_REREAD_MS));
        assert_eq!(c.dispatch_ahead, 0, "dispatch ahead is off by default");
        assert_eq!(c.backfill_depth, DEFAULT_BACKFILL_DEPTH);
        let deep = file("peers: c1=127.0.0.1:7001\nbackfill_depth: 10001\n").unwrap();
        let e = resolve(Overrides::default(), deep).unwrap_err();
        assert!(e.to_string().contains("backfill_depth: 10001"), "{e}");
        let strict = Overrides {
            backfill_depth: Some(0),
            ..Overrides::default()
        };
        assert_eq!(
            resolve(strict, file("peers: c1=127.0.0.1:7001\n").unwrap())
                .unwrap()
                .backfill_depth,
            0
        );
        let f = file("peers: c1=127.0.0.1:7001\ndispatch_ahead: 2\n").unwrap();
        let c = resolve(Overrides::default(), f.clone()).unwrap();
        assert_eq!(c.dispatch_ahead, 2);
        let over = Overrides {
            dispatch_ahead: Some(0),
            ..Overrides::default()
        };
        assert_eq!(resolve(over, f.clone()).unwrap().dispatch_ahead, 0);
        let over = Overrides {
            dispatch_ahead: Some(4),
            ..Overrides::default()
        };
        let e = resolve(over, f).unwrap_err();
        assert!(
            e.to_string()
                .contains("dispatch_ahead: 4 rounds, at most 3"),
            "{e}"
        );
    }

    #[test]
    fn the_deploy_example_is_valid() {
        let text = include_str!("../../../deploy/scheduler.yaml");
        let f: FileConfig = serde_yaml::from_str(text).unwrap();
        let c = resolve(Overrides::default(), f).unwrap();
        assert_eq!((c.name.as_str(), c.peers.len()), ("s1", 3));
        assert_eq!(c.lease_ttl.as_millis(), u128::from(DEFAULT_LEASE_TTL_MS));
    }

    #[test]
    fn bad_input_is_named() {
        let e = file("peers: c1=127.0.0.1:7001\nlease_ttl: 5\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `lease_ttl`"), "{e}");
        let e = resolve(Overrides::default(), FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("--peers: required"), "{e}");
        let over = Overrides {
            peers: Some("c1=nohost".into()),
            ..Overrides::default()
        };
        let e = resolve(over, FileConfig::default()).unwrap_err();
        assert!(e.to_string().starts_with("--peers:"), "{e}");
        let over = Overrides {
            peers: Some("c1=127.0.0.1:1".into()),
            lease_ttl_ms: Some(10),
            ..Overrides::default()
        };
        let e = resolve(over, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("lease_ttl_ms: 10"), "{e}");
        let over = Overrides {
            peers: Some("c1=127.0.0.1:1".into()),
            name: Some("bad name".into()),
            ..Overrides::default()
        };
        assert!(resolve(over, FileConfig::default()).is_err());
    }
}
