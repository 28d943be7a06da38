//! Apiserver configuration: flags > `XCE_*` environment (both through clap, in main) > the
//! YAML file (`--config`), validated into one [`Config`]. Unknown YAML keys are an error naming
//! the key. The backend is a candidate list however it is given: `backend.peers` (the same
//! parser as `--peers`) or `backend.address` + `backend.port`, which is written as a list of
//! one and parsed by that same parser.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use xce_client::backoff::RetryPolicy;
use xce_client::candidates::format_addr;
use xce_client::tls::{TlsArgs, TlsError, TlsFile, TlsPaths};
use xce_client::{parse_candidates, Candidate, CandidateError};

/// The YAML file; every key optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Where to serve HTTP (`host:port`), as `--listen`.
    pub listen: Option<String>,
    pub backend: BackendFile,
    /// The apiserver's cluster certificate (role apiserver) for its backend connection, as
    /// `--tls-ca`, `--tls-cert`, `--tls-key`.
    pub tls: TlsFile,
    /// HTTPS for the listener, as `--https-cert`, `--https-key`.
    pub https: HttpsFile,
    pub limits: LimitsFile,
    /// Plain HTTP or backend connections beyond loopback, as `--insecure`.
    pub insecure: Option<bool>,
    /// Log format and level (`format: text|json`, `level:`); the flags win.
    pub log: xce_daemon::logging::LogFile,
}

/// `backend:` keys.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BackendFile {
    /// Controller candidates, as `--peers`.
    pub peers: Option<String>,
    /// One controller, with `port`: the same as `peers: ADDRESS:PORT`.
    pub address: Option<String>,
    pub port: Option<u16>,
    pub retry: RetryFile,
    /// How long requests fail fast with 503 after the backend found no primary.
    pub degraded_ttl_ms: Option<u64>,
    /// Every request's deadline.
    pub request_timeout_ms: Option<u64>,
}

/// `backend.retry:` keys: the per-request retry budget (shorter than the daemons').
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryFile {
    pub attempts: Option<u32>,
    pub initial_ms: Option<u64>,
    pub max_ms: Option<u64>,
}

/// `https:` keys.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpsFile {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// `limits:` keys: what one client may hold of the listener.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    pub max_connections: Option<usize>,
    pub idle_timeout_ms: Option<u64>,
    pub max_body_bytes: Option<usize>,
}

/// What flags and environment gave.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub peers: Option<String>,
    pub tls: TlsArgs,
    pub https_cert: Option<PathBuf>,
    pub https_key: Option<PathBuf>,
    pub insecure: bool,
}

/// The listener's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A request body over this is refused with 413 before it is read.
    pub max_body_bytes: usize,
}

/// HTTPS certificate and key for the listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Https {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub peers: Vec<Candidate>,
    pub retry: RetryPolicy,
    pub degraded_ttl: Duration,
    pub request_timeout: Duration,
    pub tls: Option<TlsPaths>,
    pub https: Option<Https>,
    pub limits: Limits,
    pub insecure: bool,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("backend.peers: {0}")]
    Peers(CandidateError),
    #[error("backend: no controllers given (--peers, XCE_PEERS, backend.peers, or backend.address and backend.port)")]
    NoPeers,
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

/// Where the apiserver listens by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The per-request budget by default: a few short backoffs, so that a request answers
/// well within a client's patience while a failover (about 0.6 s) is ridden out.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 6,
    initial: Duration::from_millis(50),
    multiplier: 2.0,
    max_delay: Duration::from_millis(1000),
};
/// How long requests fail fast after the backend found no primary, by default.
pub const DEFAULT_DEGRADED_TTL_MS: u64 = 2000;
/// Every request's deadline by default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// Reads the YAML file; an empty file is every default.
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    Ok(xce_daemon::config::read_file(path)?)
}

/// Parses the YAML text of a config file.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    xce_daemon::config::parse(text)
}

/// Layers flags and environment over the file and validates the result.
pub fn resolve(over: Overrides, file: FileConfig) -> Result<Config, ConfigError> {
    let listen_text = over
        .listen
        .or(file.listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let listen: SocketAddr = listen_text.parse().map_err(|e| {
        ConfigError::Invalid(format!(
            "listen: {listen_text:?} is not an address (host:port, e.g. {DEFAULT_LISTEN}): {e}"
        ))
    })?;
    let peers = candidates(over.peers, &file.backend)?;
    let retry = retry_policy(&file.backend.retry)?;
    let degraded_ttl_ms = file
        .backend
        .degraded_ttl_ms
        .unwrap_or(DEFAULT_DEGRADED_TTL_MS);
    in_range("backend.degraded_ttl_ms", degraded_ttl_ms, 100..=600_000)?;
    let request_timeout_ms = file
        .backend
        .request_timeout_ms
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    in_range(
        "backend.request_timeout_ms",
        request_timeout_ms,
        100..=600_000,
    )?;
    let tls = over.tls.resolve(&file.tls)?;
    let https = match (
        over.https_cert.or(file.https.cert),
        over.https_key.or(file.https.key),
    ) {
        (Some(cert), Some(key)) => Some(Https { cert, key }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::Invalid(
                "https: a cert without a key (give https.key or --https-key)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::Invalid(
                "https: a key without a cert (give https.cert or --https-cert)".into(),
            ))
        }
    };
    let limits = limits(&file.limits)?;
    Ok(Config {
        listen,
        peers,
        retry,
        degraded_ttl: Duration::from_millis(degraded_ttl_ms),
        request_timeout: Duration::from_millis(request_timeout_ms),
        tls,
        https,
        limits,
        insecure: over.insecure || file.insecure.unwrap_or(false),
    })
}

/// The one way to the candidate list: `--peers`, `backend.peers`, or `address` + `port`
/// written as a list of one.
fn candidates(flag: Option<String>, file: &BackendFile) -> Result<Vec<Candidate>, ConfigError> {
    let single = match (&file.address, file.port) {
        (Some(address), Some(port)) => Some(format_addr(address, port)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::Invalid(
                "backend.address: given without backend.port".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::Invalid(
                "backend.port: given without backend.address".into(),
            ))
        }
    };
    if file.peers.is_some() && single.is_some() {
        return Err(ConfigError::Invalid(
            "backend: give either peers or address and port, not both".into(),
        ));
    }
    let text = flag
        .or(file.peers.clone())
        .or(single)
        .ok_or(ConfigError::NoPeers)?;
    Ok(parse_candidates(&text)?)
}

fn retry_policy(file: &RetryFile) -> Result<RetryPolicy, ConfigError> {
    let policy = RetryPolicy {
        max_attempts: file.attempts.unwrap_or(DEFAULT_RETRY.max_attempts),
        initial: file
            .initial_ms
            .map_or(DEFAULT_RETRY.initial, Duration::from_millis),
        multiplier: DEFAULT_RETRY.multiplier,
        max_delay: file
            .max_ms
            .map_or(DEFAULT_RETRY.max_delay, Duration::from_millis),
    };
    in_range(
        "backend.retry.attempts",
        u64::from(policy.max_attempts),
        1..=100,
    )?;
    in_range(
        "backend.retry.initial_ms",
        policy.initial.as_millis() as u64,
        1..=60_000,
    )?;
    in_range(
        "backend.retry.max_ms",
        policy.max_delay.as_millis() as u64,
        1..=600_000,
    )?;
    if policy.max_delay < policy.initial {
        return Err(ConfigError::Invalid(
            "backend.retry.max_ms: below backend.retry.initial_ms".into(),
        ));
    }
    Ok(policy)
}

fn limits(file: &LimitsFile) -> Result<Limits, ConfigError> {
    let max_connections = file.max_connections.unwrap_or(4096);
    in_range(
        "limits.max_connections",
        max_connections as u64,
        16..=1_000_000,
    )?;
    let idle = file.idle_timeout_ms.unwrap_or(300_000);
    in_range("limits.idle_timeout_ms", idle, 1000..=86_400_000)?;
    let body = file.max_body_bytes.unwrap_or(1 << 20);
    in_range("limits.max_body_bytes", body as u64, 1024..=(64 << 20))?;
    Ok(Limits {
        max_connections,
        idle_timeout: Duration::from_millis(idle),
        max_body_bytes: body,
    })
}

fn in_range(
    key: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "{key}: {value} is outside {}..={}",
        range.start(),
        range.end()
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn with_peers() -> Overrides {
        Overrides {
            peers: Some("c1=127.0.0.1:7101".into()),
            ..Overrides::default()
        }
    }

    #[test]
    fn the_deploy_example_is_valid() {
        let f = parse_file(include_str!("../../../deploy/apiserver.yaml")).unwrap();
        let c = resolve(Overrides::default(), f).unwrap();
        assert_eq!(c.peers.len(), 3);
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(
            c.degraded_ttl,
            Duration::from_millis(DEFAULT_DEGRADED_TTL_MS)
        );
    }

    #[test]
    fn address_and_port_are_a_list_of_one_through_the_same_parser() {
        let f = parse_file("backend:\n  address: 127.0.0.1\n  port: 7101\n").unwrap();
        let c = resolve(Overrides::default(), f).unwrap();
        assert_eq!(c.peers, parse_candidates("127.0.0.1:7101").unwrap());
        let f = parse_file("backend:\n  address: \"::1\"\n  port: 7101\n").unwrap();
        let c = resolve(Overrides::default(), f).unwrap();
        assert_eq!(c.peers[0].addr(), "[::1]:7101");
        // A bad address is named by the one parser.
        let f = parse_file("backend:\n  address: \"\"\n  port: 7101\n").unwrap();
        let e = resolve(Overrides::default(), f).unwrap_err();
        assert!(e.to_string().starts_with("backend.peers:"), "{e}");
    }

    #[test]
    fn flags_beat_the_file() {
        let f = parse_file("listen: 127.0.0.1:9000\nbackend:\n  peers: c1=127.0.0.1:1\n").unwrap();
        let over = Overrides {
            listen: Some("127.0.0.1:9001".into()),
            peers: Some("c9=127.0.0.1:2".into()),
            ..Overrides::default()
        };
        let c = resolve(over, f).unwrap();
        assert_eq!(c.listen.port(), 9001);
        assert_eq!(c.peers[0].name, "c9");
    }

    #[test]
    fn bad_input_is_named() {
        let e = parse_file("backend:\n  peer: c1=h:1\n").unwrap_err();
        assert!(e.contains("unknown field `peer`"), "{e}");
        let e = parse_file("listen: 1\nlimts: {}\n").unwrap_err();
        assert!(e.contains("unknown field `limts`"), "{e}");
        let e = resolve(Overrides::default(), FileConfig::default()).unwrap_err();
        assert!(matches!(e, ConfigError::NoPeers), "{e}");
        let f = parse_file("backend:\n  peers: \"c1=h:1,,c2=h:2\"\n").unwrap();
        let e = resolve(Overrides::default(), f).unwrap_err();
        assert!(e.to_string().contains("candidate 2 is empty"), "{e}");
        let f = parse_file("backend:\n  peers: c1=h:1\n  address: h\n  port: 2\n").unwrap();
        let e = resolve(Overrides::default(), f).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        let f = parse_file("backend:\n  address: h\n").unwrap();
        let e = resolve(Overrides::default(), f).unwrap_err();
        assert!(e.to_string().contains("backend.port"), "{e}");
        let over = Overrides {
            listen: Some("nowhere".into()),
            ..with_peers()
        };
        let e = resolve(over, FileConfig::default()).unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
        let f = parse_file("backend:\n  retry:\n    attempts: 0\n").unwrap();
        let e = resolve(with_peers(), f).unwrap_err();
        assert!(e.to_string().contains("backend.retry.attempts: 0"), "{e}");
        let f = parse_file("https:\n  cert: /x.pem\n").unwrap();
        let e = resolve(with_peers(), f).unwrap_err();
        assert!(e.to_string().contains("https.key"), "{e}");
    }
}
