//! A CA and a certificate for every daemon and person of a small cluster (`xce tls init`,
//! `xce dev --tls`, the tests). Each certificate names its holder: the subject's common name
//! is the name, its organizational unit the role (what [`xce_client::tls::identity_of`]
//! reads); its subject alternative names are the name, `localhost`, 127.0.0.1 and ::1, and
//! any extra host given, so a client that dials a controller by any of those can check it.
//!
//! Written to `DIR/ca.pem`, `DIR/ca-key.pem` and, per name, `DIR/NAME.pem` and
//! `DIR/NAME-key.pem`; keys are readable by their owner only. A later run in the same `DIR`
//! signs with the CA already there, so holders can be added without reissuing the others.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use xce_client::tls::TlsPaths;
use xce_client::types::Role;

/// How long the certificates are valid.
pub const VALID_DAYS: i64 = 825;

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{0:?} is not a usable name (letters, digits, '-' and '.'; starting with a letter or digit)")]
    BadName(String),
    #[error("{0:?} is named twice")]
    Duplicate(String),
    #[error("{0:?} is not a host name or IP address")]
    BadHost(String),
    #[error("{0} exists: remove it (and its key) to issue a new certificate for that name")]
    Exists(PathBuf),
    #[error("{0}: found without ca-key.pem beside it, so no certificate can be added to this CA")]
    NoCaKey(PathBuf),
    #[error("{path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("make a certificate: {0}")]
    Make(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Who gets a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub role: Role,
    pub name: String,
}

impl Holder {
    pub fn new(role: Role, name: &str) -> Holder {
        Holder {
            role,
            name: name.to_string(),
        }
    }
}

/// The files of one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where `name`'s certificate and key are in `dir`.
pub fn files_of(dir: &Path, name: &str) -> Issued {
    Issued {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    }
}

/// The CA certificate in `dir`.
pub fn ca_of(dir: &Path) -> PathBuf {
    dir.join("ca.pem")
}

/// The TLS files holder `name` of the CA in `dir` runs with.
pub fn paths_of(dir: &Path, name: &str) -> TlsPaths {
    let files = files_of(dir, name);
    TlsPaths {
        ca: ca_of(dir),
        cert: files.cert,
        key: files.key,
    }
}

/// Makes a certificate for every holder, valid for `hosts` too, signed by the CA in `dir`:
/// the one already there (so certificates issued earlier stay valid), or a new one. A holder
/// whose files exist is an error rather than a silent replacement.
pub fn init(dir: &Path, holders: &[Holder], hosts: &[String]) -> Result<(), CertError> {
    let mut seen = std::collections::HashSet::new();
    for h in holders {
        if !valid_name(&h.name) {
            return Err(CertError::BadName(h.name.clone()));
        }
        if !seen.insert(h.name.as_str()) {
            return Err(CertError::Duplicate(h.name.clone()));
        }
    }
    for h in holders {
        let files = files_of(dir, &h.name);
        if let Some(existing) = [files.cert, files.key].into_iter().find(|p| p.exists()) {
            return Err(CertError::Exists(existing));
        }
    }
    let extra: Vec<SanType> = hosts.iter().map(|h| san(h)).collect::<Result<_, _>>()?;
    std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let (not_before, not_after) = validity();
    let (ca_cert, ca_key) = ca_in(dir)?;
    for h in holders {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name
            .push(DnType::CommonName, h.name.as_str());
        p.distinguished_name
            .push(DnType::OrganizationalUnitName, h.role.name());
        p.subject_alt_names = [h.name.as_str(), "localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|s| san(s))
            .collect::<Result<Vec<_>, _>>()?;
        p.subject_alt_names.extend(extra.iter().cloned());
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        (p.not_before, p.not_after) = (not_before, not_after);
        let cert = p.signed_by(&key, &ca_cert, &ca_key)?;
        let files = files_of(dir, &h.name);
        write(&files.cert, &cert.pem(), false)?;
        write(&files.key, &key.serialize_pem(), true)?;
    }
    Ok(())
}

/// The CA of `dir` as an issuer: the existing one (its key from `ca-key.pem`; `ca.pem` is
/// left as it is, and what it signs verifies against it, having the same subject and key),
/// or a new one written there.
fn ca_in(dir: &Path) -> Result<(rcgen::Certificate, KeyPair), CertError> {
    let (ca_pem, key_pem) = (ca_of(dir), dir.join("ca-key.pem"));
    let key = match std::fs::read_to_string(&key_pem) {
        Ok(text) => Some(KeyPair::from_pem(&text).map_err(|e| CertError::Read {
            path: key_pem.clone(),
            reason: e.to_string(),
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(CertError::Read {
                path: key_pem,
                reason: e.to_string(),
            })
        }
    };
    let fresh = key.is_none();
    if fresh && ca_pem.exists() {
        return Err(CertError::NoCaKey(ca_pem));
    }
    let key = match key {
        Some(key) => key,
        None => KeyPair::generate()?,
    };
    let (not_before, not_after) = validity();
    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "xce cluster CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (ca.not_before, ca.not_after) = (not_before, not_after);
    let cert = ca.self_signed(&key)?;
    if fresh {
        write(&ca_pem, &cert.pem(), false)?;
        write(&key_pem, &key.serialize_pem(), true)?;
    }
    Ok((cert, key))
}

/// From an hour ago (clocks differ a little) for [`VALID_DAYS`].
fn validity() -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::hours(1),
        now + time::Duration::days(VALID_DAYS),
    )
}

fn valid_name(name: &str) -> bool {
    name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
}

fn san(host: &str) -> Result<SanType, CertError> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    if !valid_name(host) {
        return Err(CertError::BadHost(host.to_string()));
    }
    let name = host
        .try_into()
        .map_err(|_| CertError::BadHost(host.to_string()))?;
    Ok(SanType::DnsName(name))
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), CertError> {
    let error = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(error)?;
    f.write_all(text.as_bytes()).map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use xce_client::socket;
    use xce_client::tls::{Identity, Tls};

    fn tls(dir: &Path, name: &str) -> Arc<Tls> {
        Tls::load(paths_of(dir, name)).unwrap()
    }

    fn cluster(dir: &Path) {
        let holders = [
            Holder::new(Role::Controller, "c1"),
            Holder::new(Role::Worker, "w1"),
            Holder::new(Role::Admin, "alice"),
        ];
        init(dir, &holders, &["ctl.example".into()]).unwrap();
    }

    /// Connects `client` (or plaintext) to a server holding `server`; returns what each side
    /// concluded.
    async fn handshake(
        server: Arc<Tls>,
        client: Option<Arc<Tls>>,
    ) -> (Result<Option<Identity>, String>, Result<(), String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let served = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            socket::accept(tcp, Some(&server)).await.map(|(_, id)| id)
        });
        let connected = socket::connect(&addr, std::time::Duration::from_secs(5), client.as_ref())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        (served.await.unwrap(), connected)
    }

    #[tokio::test]
    async fn a_certificate_of_the_cluster_proves_its_holder_and_nothing_else_gets_in() {
        let dir = tempfile::tempdir().unwrap();
        cluster(dir.path());
        let other = tempfile::tempdir().unwrap();
        init(other.path(), &[Holder::new(Role::Admin, "alice")], &[]).unwrap();
        let controller = tls(dir.path(), "c1");
        assert_eq!(
            controller.identity(),
            Identity {
                role: Role::Controller,
                name: "c1".into()
            }
        );

        let (server, client) = handshake(controller.clone(), Some(tls(dir.path(), "w1"))).await;
        assert_eq!(client, Ok(()));
        assert_eq!(
            server,
            Ok(Some(Identity {
                role: Role::Worker,
                name: "w1".into()
            }))
        );

        // Another CA's certificate, and plaintext, are refused by the server.
        let (server, _) = handshake(controller.clone(), Some(tls(other.path(), "alice"))).await;
        assert!(server.is_err(), "{server:?}");
        let (server, _) = handshake(controller.clone(), None).await;
        assert!(server.is_err(), "{server:?}");

        // A client refuses a server that is not a controller, even one of its own CA.
        let (_, client) = handshake(tls(dir.path(), "w1"), Some(tls(dir.path(), "alice"))).await;
        let refused = client.unwrap_err();
        assert!(refused.contains("not a controller"), "{refused}");
    }

    /// A TLS client that trusts the cluster's CA but presents no certificate of its own
    /// completes no handshake with a controller.
    #[tokio::test]
    async fn a_client_without_a_certificate_is_refused() {
        use rustls_pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        cluster(dir.path());
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca_of(dir.path())).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let controller = tls(dir.path(), "c1");
        let served = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            socket::accept(tcp, Some(&controller))
                .await
                .map(|(_, id)| id)
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        // TLS 1.3: the client may finish before it hears the refusal; the server decides.
        let _ = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await;
        let refused = served.await.unwrap().unwrap_err();
        assert!(refused.contains("TLS handshake"), "{refused}");
    }

    #[test]
    fn keys_are_private_and_bad_names_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        cluster(dir.path());
        for name in ["c1", "w1", "alice"] {
            let files = files_of(dir.path(), name);
            let mode = std::fs::metadata(&files.key).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{name}'s key is readable by others");
            assert!(files.cert.exists());
        }
        let e = init(dir.path(), &[Holder::new(Role::Worker, "w 1")], &[]).unwrap_err();
        assert!(e.to_string().contains("\"w 1\""), "{e}");
        let twice = [
            Holder::new(Role::Worker, "w1"),
            Holder::new(Role::Admin, "w1"),
        ];
        let e = init(dir.path(), &twice, &[]).unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
        let e = init(dir.path(), &[], &["bad host!".into()]).unwrap_err();
        assert!(e.to_string().contains("bad host!"), "{e}");
    }

    #[tokio::test]
    async fn a_later_run_adds_holders_to_the_same_ca_and_replaces_no_one() {
        let dir = tempfile::tempdir().unwrap();
        cluster(dir.path());
        let ca = std::fs::read(ca_of(dir.path())).unwrap();
        let c1 = std::fs::read(files_of(dir.path(), "c1").cert).unwrap();
        init(dir.path(), &[Holder::new(Role::Admin, "bob")], &[]).unwrap();
        assert_eq!(std::fs::read(ca_of(dir.path())).unwrap(), ca);
        // The new holder and the earlier ones trust each other.
        let (server, client) = handshake(tls(dir.path(), "c1"), Some(tls(dir.path(), "bob"))).await;
        assert_eq!(client, Ok(()));
        assert_eq!(server.unwrap().unwrap().name, "bob");
        // An existing holder is not silently reissued.
        let e = init(dir.path(), &[Holder::new(Role::Controller, "c1")], &[]).unwrap_err();
        assert!(e.to_string().contains("c1.pem exists"), "{e}");
        assert_eq!(std::fs::read(files_of(dir.path(), "c1").cert).unwrap(), c1);
        // A CA certificate without its key cannot be added to.
        std::fs::remove_file(dir.path().join("ca-key.pem")).unwrap();
        let e = init(dir.path(), &[Holder::new(Role::Admin, "carol")], &[]).unwrap_err();
        assert!(e.to_string().contains("without ca-key.pem"), "{e}");
    }

    #[test]
    fn a_reload_keeps_the_identity_and_a_broken_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        cluster(dir.path());
        let c1 = tls(dir.path(), "c1");
        let files = files_of(dir.path(), "c1");
        std::fs::write(&files.cert, "garbage").unwrap();
        let e = c1.reload().unwrap_err();
        assert!(e.to_string().contains("c1.pem"), "{e}");
        assert_eq!(c1.identity().name, "c1");
        // A certificate for someone else is refused on reload.
        let w1 = files_of(dir.path(), "w1");
        std::fs::copy(&w1.cert, &files.cert).unwrap();
        std::fs::copy(&w1.key, &files.key).unwrap();
        let e = c1.reload().unwrap_err();
        assert!(e.to_string().contains("cannot change who"), "{e}");
        // A fresh one for the same holder is taken.
        std::fs::remove_file(&files.cert).unwrap();
        std::fs::remove_file(&files.key).unwrap();
        init(dir.path(), &[Holder::new(Role::Controller, "c1")], &[]).unwrap();
        assert_eq!(c1.reload().map(|id| id.name), Ok("c1".to_string()));
    }
}
