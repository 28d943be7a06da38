//! Worker configuration: flags > `XCE_*` environment (both through clap, in main) > the
//! optional YAML file (`--config`), validated into one [`Settings`]. Unknown YAML keys are an
//! error naming the key. What depends on the machine (detected cpus and memory, the account
//! the worker runs as) is decided in `main`, so this stays pure and testable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use xce_client::tls::{TlsArgs, TlsError, TlsFile, TlsPaths};
use xce_client::{parse_candidates, Candidate, CandidateError};

/// The YAML file; every key optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Controller candidates, as `--peers`.
    pub peers: Option<String>,
    /// This host's name in the cluster, as `--name`.
    pub name: Option<String>,
    /// Where job output and the outbox live, as `--spool-dir`.
    pub spool_dir: Option<PathBuf>,
    /// CPUs offered (default: detected).
    pub cpus: Option<u32>,
    /// Memory offered in MiB (default: detected).
    pub mem_mb: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub kill_grace_ms: Option<u64>,
    pub resync_ms: Option<u64>,
    /// `auto` or `off`, as `--cgroups`.
    pub cgroups: Option<CgroupMode>,
    /// `user`, `worker` or `any`, as `--run-jobs-as`.
    pub run_jobs_as: Option<RunJobsAs>,
    pub allow_root_jobs: Option<bool>,
    /// Run without TLS beyond loopback, as `--insecure`.
    pub insecure: Option<bool>,
    /// Where Prometheus metrics are served (`host:port`), as `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// TLS files (`ca`, `cert`, `key`), as `--tls-ca`, `--tls-cert`, `--tls-key`.
    pub tls: TlsFile,
    /// Log format and level (`format: text|json`, `level:`); the flags win.
    pub log: xce_daemon::logging::LogFile,
}

/// Whether jobs get cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    /// A cgroup per job where the host has them.
    Auto,
    /// Process groups only: no cpu or memory limits, and no cgroup setup per job.
    Off,
}

/// Whom jobs run as (see `--run-jobs-as`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RunJobsAs {
    /// Each job as its user, with their groups (needs root).
    User,
    /// Only this account's jobs, as itself.
    Worker,
    /// Every job as this account, whoever submitted it (dev and test clusters).
    Any,
}

/// What flags and environment gave (`None` or `false`: not given).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub peers: Option<String>,
    pub name: Option<String>,
    pub spool_dir: Option<PathBuf>,
    pub cpus: Option<u32>,
    pub mem_mb: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub kill_grace_ms: Option<u64>,
    pub resync_ms: Option<u64>,
    pub cgroups: Option<CgroupMode>,
    pub run_jobs_as: Option<RunJobsAs>,
    pub allow_root_jobs: bool,
    pub insecure: bool,
    pub metrics_listen: Option<String>,
    pub tls: TlsArgs,
}

/// A validated configuration, before the machine is asked anything.
#[derive(Debug, Clone)]
pub struct Settings {
    pub name: String,
    pub peers: Vec<Candidate>,
    pub spool_dir: PathBuf,
    /// `None`: detect.
    pub cpus: Option<u32>,
    /// `None`: detect.
    pub mem_mb: Option<u64>,
    pub heartbeat: Duration,
    pub kill_grace: Duration,
    pub resync: Duration,
    pub cgroups: CgroupMode,
    /// `None`: by the account (`user` as root, `worker` otherwise).
    pub run_jobs_as: Option<RunJobsAs>,
    pub allow_root_jobs: bool,
    pub insecure: bool,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub tls: Option<TlsPaths>,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--peers: {0}")]
    Peers(CandidateError),
    #[error("--{0}: required (flag, XCE_* environment or `{1}` in the config file)")]
    Missing(&'static str, &'static str),
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

/// Heartbeat interval by default; well under the controllers' host TTL.
pub const DEFAULT_HEARTBEAT_MS: u64 = 2000;
/// SIGTERM to SIGKILL by default.
pub const DEFAULT_KILL_GRACE_MS: u64 = 10_000;
/// A re-sync without a failover by default.
pub const DEFAULT_RESYNC_MS: u64 = 60_000;

/// Reads the YAML file; an empty file is every default.
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    Ok(xce_daemon::config::read_file(path)?)
}

/// Parses the YAML text of a config file.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    xce_daemon::config::parse(text)
}

/// Layers flags and environment over the file and validates the result.
pub fn resolve(over: Overrides, file: FileConfig) -> Result<Settings, ConfigError> {
    let peers = over
        .peers
        .or(file.peers)
        .ok_or(ConfigError::Missing("peers", "peers"))?;
    let peers = parse_candidates(&peers)?;
    let name = over
        .name
        .or(file.name)
        .ok_or(ConfigError::Missing("name", "name"))?;
    xce_client::types::validate_host_name(&name)
        .map_err(|e| ConfigError::Name(e.replacen("host.name: ", "", 1)))?;
    let spool_dir = over
        .spool_dir
        .or(file.spool_dir)
        .ok_or(ConfigError::Missing("spool-dir", "spool_dir"))?;
    let cpus = over.cpus.or(file.cpus);
    if cpus == Some(0) {
        return Err(ConfigError::Invalid("--cpus must be at least 1".into()));
    }
    let mem_mb = over.mem_mb.or(file.mem_mb);
    let heartbeat_ms = over
        .heartbeat_ms
        .or(file.heartbeat_ms)
        .unwrap_or(DEFAULT_HEARTBEAT_MS);
    at_least("--heartbeat-ms", heartbeat_ms, 10)?;
    let kill_grace_ms = over
        .kill_grace_ms
        .or(file.kill_grace_ms)
        .unwrap_or(DEFAULT_KILL_GRACE_MS);
    at_most("--kill-grace-ms", kill_grace_ms, 3_600_000)?;
    let resync_ms = over
        .resync_ms
        .or(file.resync_ms)
        .unwrap_or(DEFAULT_RESYNC_MS);
    at_least("--resync-ms", resync_ms, 100)?;
    let tls = over.tls.resolve(&file.tls)?;
    let metrics_listen = match over.metrics_listen.or(file.metrics_listen) {
        Some(addr) => Some(
            xce_daemon::metrics::listen_addr("--metrics-listen", &addr)
                .map_err(ConfigError::Invalid)?,
        ),
        None => None,
    };
    Ok(Settings {
        name,
        peers,
        spool_dir,
        cpus,
        mem_mb,
        heartbeat: Duration::from_millis(heartbeat_ms),
        kill_grace: Duration::from_millis(kill_grace_ms),
        resync: Duration::from_millis(resync_ms),
        cgroups: over.cgroups.or(file.cgroups).unwrap_or(CgroupMode::Auto),
        run_jobs_as: over.run_jobs_as.or(file.run_jobs_as),
        allow_root_jobs: over.allow_root_jobs || file.allow_root_jobs.unwrap_or(false),
        insecure: over.insecure || file.insecure.unwrap_or(false),
        metrics_listen,
        tls,
    })
}

fn at_least(flag: &str, value: u64, min: u64) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::Invalid(format!(
            "{flag} must be at least {min} (got {value})"
        )));
    }
    Ok(())
}

fn at_most(flag: &str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::Invalid(format!(
            "{flag} must be at most {max} (got {value})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn minimal() -> Overrides {
        Overrides {
            peers: Some("c1=127.0.0.1:7001".into()),
            name: Some("w1".into()),
            spool_dir: Some("/tmp/spool".into()),
            ..Overrides::default()
        }
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let f = parse_file("heartbeat_ms: 500\ncgroups: off\nname: w7\ncpus: 4\n").unwrap();
        let s = resolve(
            Overrides {
                name: None,
                ..minimal()
            },
            f.clone(),
        )
        .unwrap();
        assert_eq!(s.name, "w7");
        assert_eq!(s.heartbeat, Duration::from_millis(500));
        assert_eq!(s.cgroups, CgroupMode::Off);
        assert_eq!(s.cpus, Some(4));
        assert_eq!(s.kill_grace, Duration::from_millis(DEFAULT_KILL_GRACE_MS));
        let over = Overrides {
            heartbeat_ms: Some(300),
            cgroups: Some(CgroupMode::Auto),
            ..minimal()
        };
        let s = resolve(over, f).unwrap();
        assert_eq!(s.name, "w1");
        assert_eq!(s.heartbeat, Duration::from_millis(300));
        assert_eq!(s.cgroups, CgroupMode::Auto);
    }

    #[test]
    fn the_deploy_example_is_valid() {
        let text = include_str!("../../../deploy/worker.yaml");
        let f = parse_file(text).unwrap();
        let s = resolve(Overrides::default(), f).unwrap();
        assert_eq!((s.name.as_str(), s.peers.len()), ("w1", 3));
        assert_eq!(s.run_jobs_as, Some(RunJobsAs::User));
        assert_eq!(s.heartbeat, Duration::from_millis(DEFAULT_HEARTBEAT_MS));
        assert!(s.tls.is_none());
    }

    #[test]
    fn bad_input_is_named() {
        let e = parse_file("peers: c1=127.0.0.1:7001\nheartbeat: 5\n").unwrap_err();
        assert!(e.contains("unknown field `heartbeat`"), "{e}");
        let e = parse_file("run_jobs_as: root\n").unwrap_err();
        assert!(e.contains("run_jobs_as"), "{e}");
        let e = resolve(Overrides::default(), FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("--peers: required"), "{e}");
        let no_spool = Overrides {
            spool_dir: None,
            ..minimal()
        };
        let e = resolve(no_spool, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("spool_dir"), "{e}");
        let zero = Overrides {
            cpus: Some(0),
            ..minimal()
        };
        let e = resolve(zero, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("--cpus"), "{e}");
        let fast = Overrides {
            heartbeat_ms: Some(1),
            ..minimal()
        };
        let e = resolve(fast, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("--heartbeat-ms"), "{e}");
        let bad_name = Overrides {
            name: Some("w 1".into()),
            ..minimal()
        };
        let e = resolve(bad_name, FileConfig::default()).unwrap_err();
        assert!(e.to_string().starts_with("--name:"), "{e}");
    }

    #[test]
    fn a_half_given_tls_setting_is_refused() {
        let f = parse_file("tls:\n  ca: /etc/xce/ca.pem\n").unwrap();
        let e = resolve(minimal(), f).unwrap_err();
        assert!(matches!(e, ConfigError::Tls(_)), "{e}");
    }
}
