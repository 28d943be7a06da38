//! Mutual TLS for every capnp connection (DESIGN §7), with rustls and its ring provider only.
//!
//! One [`Tls`] per process, loaded from three PEM files (the cluster's CA, this process's
//! certificate and its key), serves both sides: a connection's client side checks the
//! server's certificate against the CA and the host name it dialled; a server requires a
//! certificate from the same CA of every peer. Who a peer is comes from its certificate
//! ([`Identity`]: the subject's common name is its name, the organizational unit its role),
//! never from what it claims. [`Tls::reload`] swaps in new files (on SIGHUP) for the
//! connections opened after it; open connections keep theirs, so the cluster stays up.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls_pki_types::pem::PemObject;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::types::Role;

/// Where a process's TLS material is: `--tls-ca`, `--tls-cert`, `--tls-key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsPaths {
    /// The three paths, all given or none: a partial setting is an error naming what is
    /// missing, never a silent plaintext fallback.
    pub fn from_parts(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<TlsPaths>, TlsError> {
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(TlsPaths { ca, cert, key })),
            (ca, cert, key) => {
                let missing: Vec<&str> = [
                    (ca.is_none(), "tls-ca"),
                    (cert.is_none(), "tls-cert"),
                    (key.is_none(), "tls-key"),
                ]
                .into_iter()
                .filter_map(|(gone, name)| gone.then_some(name))
                .collect();
                Err(TlsError::Incomplete(missing.join(", ")))
            }
        }
    }
}

/// The TLS flags every daemon and the CLI take, with their `XCE_TLS_*` variables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// The cluster's CA certificate (PEM): peers' certificates must be signed by it.
    #[arg(long = "tls-ca", global = true, env = "XCE_TLS_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// This process's certificate (PEM), signed by the CA; it names the role and name.
    #[arg(
        long = "tls-cert",
        global = true,
        env = "XCE_TLS_CERT",
        value_name = "PEM"
    )]
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long = "tls-key",
        global = true,
        env = "XCE_TLS_KEY",
        value_name = "PEM"
    )]
    pub key: Option<PathBuf>,
}

/// The `tls:` section of a daemon's YAML (`ca`, `cert`, `key`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsFile {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl TlsArgs {
    /// The paths to use: each flag (or its variable) wins over the file's key.
    pub fn resolve(&self, file: &TlsFile) -> Result<Option<TlsPaths>, TlsError> {
        let pick = |flag: &Option<PathBuf>, key: &Option<PathBuf>| flag.clone().or(key.clone());
        TlsPaths::from_parts(
            pick(&self.ca, &file.ca),
            pick(&self.cert, &file.cert),
            pick(&self.key, &file.key),
        )
    }
}

/// Who a certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub role: Role,
    pub name: String,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.role, self.name)
    }
}

/// Why TLS material could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error(
        "TLS is half configured: {0} not given (give all of tls-ca, tls-cert and tls-key, or none)"
    )]
    Incomplete(String),
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("certificate of {path}: {reason}")]
    Identity { path: PathBuf, reason: String },
    #[error("TLS setup: {0}")]
    Setup(String),
    #[error("{addr} is not a loopback address, and without TLS anyone who reaches it is trusted with whatever role they claim: give --tls-ca, --tls-cert and --tls-key (xce tls init makes them), or --insecure to run without authentication")]
    Insecure { addr: String },
}

/// What one load of the files gave.
struct Loaded {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
    identity: Identity,
}

/// A process's TLS setup; shared by all its connections.
pub struct Tls {
    paths: TlsPaths,
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("paths", &self.paths).finish()
    }
}

impl Tls {
    /// Loads the three files; every problem names the file.
    pub fn load(paths: TlsPaths) -> Result<Arc<Tls>, TlsError> {
        let loaded = load(&paths)?;
        Ok(Arc::new(Tls {
            paths,
            current: RwLock::new(Arc::new(loaded)),
        }))
    }

    /// Reads the files again for the connections opened from now on. On an error the
    /// setup in use stays as it was. A new certificate must keep the process's identity.
    pub fn reload(&self) -> Result<Identity, TlsError> {
        let loaded = load(&self.paths)?;
        let before = self.identity();
        if loaded.identity != before {
            return Err(TlsError::Identity {
                path: self.paths.cert.clone(),
                reason: format!(
                    "names {}, but this process is {before}: a reload cannot change who a process is",
                    loaded.identity
                ),
            });
        }
        let identity = loaded.identity.clone();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
        Ok(identity)
    }

    fn current(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Who this process's own certificate says it is.
    pub fn identity(&self) -> Identity {
        self.current().identity.clone()
    }

    /// The files it was loaded from.
    pub fn paths(&self) -> &TlsPaths {
        &self.paths
    }

    /// The client side of a connection to `host` (a DNS name or an IP address, as dialled).
    pub fn connector(&self) -> TlsConnector {
        self.current().connector.clone()
    }

    /// The server side of an accepted connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current().acceptor.clone()
    }
}

/// Whether `addr` (`host:port`, IPv6 in brackets) is on this host's loopback.
pub fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Secure by default: a daemon without TLS may only listen on and connect to loopback
/// addresses, unless `insecure`. Either way it warns, once, that authentication is off.
pub fn allow_plaintext<'a>(
    daemon: &str,
    addrs: impl IntoIterator<Item = &'a str>,
    insecure: bool,
) -> Result<(), TlsError> {
    if !insecure {
        if let Some(addr) = addrs.into_iter().find(|a| !is_loopback(a)) {
            return Err(TlsError::Insecure {
                addr: addr.to_string(),
            });
        }
    }
    tracing::warn!(
        daemon,
        "TLS is off, so authentication is off: every connection is trusted with the role it claims"
    );
    Ok(())
}

/// Takes over SIGHUP now (inside a runtime) and returns what reloads `tls` on every one
/// until it is dropped; a failed reload keeps the certificates in use and says why. Without
/// TLS a SIGHUP (`systemctl reload`) only says there is nothing to reload: every daemon calls
/// this before it is ready, since the signal's default action would end the process.
pub fn reload_on_hangup(tls: Option<Arc<Tls>>) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hangups = signal(SignalKind::hangup());
    async move {
        let mut hangups = match hangups {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP; TLS certificates will not be reloaded");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            let Some(tls) = &tls else {
                tracing::info!("SIGHUP: no TLS, nothing to reload");
                continue;
            };
            match tls.reload() {
                Ok(identity) => tracing::info!(%identity, "TLS certificates reloaded"),
                Err(e) => {
                    tracing::warn!(error = %e, "TLS reload failed; the certificates in use stay")
                }
            }
        }
    }
}

/// The name a server's certificate must carry for an address `host:port` (IPv6 in
/// brackets): its host part, as a DNS name or an IP address.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| TlsError::Setup(format!("{host:?} is not a host name TLS can check: {e}")))
}

/// Who a peer's certificate (the first of its chain, already verified against the CA) says
/// it is.
pub fn identity_of(cert: &CertificateDer<'_>) -> Result<Identity, String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|n| !n.is_empty())
        .ok_or("its subject has no common name (the holder's name)")?;
    let role = subject
        .iter_organizational_unit()
        .next()
        .and_then(|ou| ou.as_str().ok())
        .ok_or("its subject has no organizational unit (the holder's role)")?;
    let role: Role = role.parse().map_err(|e| format!("{e}"))?;
    Ok(Identity {
        role,
        name: name.to_string(),
    })
}

fn load(paths: &TlsPaths) -> Result<Loaded, TlsError> {
    let file_error = |path: &Path, reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let ca = read_certs(&paths.ca)?;
    let certs = read_certs(&paths.cert)?;
    let key = PrivateKeyDer::from_pem_file(&paths.key)
        .map_err(|e| file_error(&paths.key, format!("no private key: {e}")))?;
    let identity = identity_of(&certs[0]).map_err(|reason| TlsError::Identity {
        path: paths.cert.clone(),
        reason,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for c in ca {
        roots
            .add(c)
            .map_err(|e| file_error(&paths.ca, format!("not a usable CA certificate: {e}")))?;
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let setup = |e: rustls::Error| TlsError::Setup(e.to_string());
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(setup)?
        .with_root_certificates(roots.clone())
        .with_client_auth_cert(certs.clone(), key.clone_key())
        .map_err(|e| {
            file_error(
                &paths.key,
                format!("does not go with {}: {e}", paths.cert.display()),
            )
        })?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| file_error(&paths.ca, format!("cannot verify clients with it: {e}")))?;
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(setup)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| {
            file_error(
                &paths.key,
                format!("does not go with {}: {e}", paths.cert.display()),
            )
        })?;
    Ok(Loaded {
        connector: TlsConnector::from(Arc::new(client)),
        acceptor: TlsAcceptor::from(Arc::new(server)),
        identity,
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(error("holds no certificate".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_is_all_three_files_or_none() {
        assert_eq!(TlsPaths::from_parts(None, None, None), Ok(None));
        let err = TlsPaths::from_parts(Some("ca".into()), None, Some("k".into())).unwrap_err();
        assert_eq!(err, TlsError::Incomplete("tls-cert".into()));
        assert!(err.to_string().contains("tls-cert not given"), "{err}");
    }

    #[test]
    fn plaintext_is_refused_beyond_loopback_unless_insecure() {
        for addr in ["127.0.0.1:1", "127.3.4.5:1", "[::1]:7", "localhost:9"] {
            assert!(is_loopback(addr), "{addr}");
        }
        for addr in ["0.0.0.0:1", "10.0.0.1:1", "[::]:7", "ctl.example:9"] {
            assert!(!is_loopback(addr), "{addr}");
        }
        assert_eq!(
            allow_plaintext("t", ["127.0.0.1:1", "[::1]:2"], false),
            Ok(())
        );
        let refused = allow_plaintext("t", ["127.0.0.1:1", "10.1.1.1:7"], false).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("10.1.1.1:7 is not a loopback"),
            "{refused}"
        );
        assert_eq!(allow_plaintext("t", ["10.1.1.1:7"], true), Ok(()));
    }

    #[test]
    fn server_names_are_the_dialled_host() {
        assert!(matches!(
            server_name("127.0.0.1:7000"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]:7000"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("c1.example:7000"),
            Ok(ServerName::DnsName(_))
        ));
    }
}
