//! The HTTP listener: HTTP/1.1 over TCP or TLS (rustls with ring), with the limits every
//! xce listener has. At most `max_connections` are served at once (one more is answered 503
//! and closed, so a flood cannot pin the apiserver), a connection that sends no complete
//! request header within `idle_timeout` is closed (idle keep-alive and slow-header clients
//! alike), headers are bounded, and bodies are bounded by the router (413).

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, RwLock};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::config::{Https, Limits};

/// Largest request head (request line and headers) read.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The HTTPS certificate, reloadable.
#[derive(Clone)]
pub struct HttpsAcceptor {
    files: Https,
    current: Arc<RwLock<TlsAcceptor>>,
}

impl std::fmt::Debug for HttpsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsAcceptor")
            .field("files", &self.files)
            .finish()
    }
}

impl HttpsAcceptor {
    /// Loads the certificate and key.
    pub fn load(files: Https) -> anyhow::Result<HttpsAcceptor> {
        let acceptor = acceptor(&files.cert, &files.key)?;
        Ok(HttpsAcceptor {
            files,
            current: Arc::new(RwLock::new(acceptor)),
        })
    }

    /// Reloads the files on every SIGHUP; a broken file leaves the current certificate.
    pub async fn reload_on_hangup(self) {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            warn!("cannot watch SIGHUP: the HTTPS certificate will not be reloaded");
            return;
        };
        while hangups.recv().await.is_some() {
            match acceptor(&self.files.cert, &self.files.key) {
                Ok(fresh) => {
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                    info!(cert = %self.files.cert.display(), "HTTPS certificate reloaded");
                }
                Err(e) => {
                    warn!(error = %e, "HTTPS certificate not reloaded; the current one stays")
                }
            }
        }
    }

    fn get(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: not PEM certificates: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{}: holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("{}: no private key: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("https: the key does not go with the certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    https: Option<HttpsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let accept = async {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                debug!(%peer, "connection limit reached: answered 503");
                tokio::spawn(refuse(stream, https.is_some()));
                continue;
            };
            let (app, https) = (app.clone(), https.clone());
            tokio::spawn(async move {
                let _slot = slot;
                match https {
                    None => connection(TokioIo::new(stream), app, limits).await,
                    Some(tls) => {
                        let handshake =
                            tokio::time::timeout(limits.idle_timeout, tls.get().accept(stream));
                        match handshake.await {
                            Ok(Ok(stream)) => connection(TokioIo::new(stream), app, limits).await,
                            Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                }
            });
        }
    };
    tokio::select! {
        () = accept => {}
        () = shutdown => {}
    }
}

async fn connection<I>(io: TokioIo<I>, app: Router, limits: Limits)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(io, service)
        .await;
    if let Err(e) = served {
        debug!(error = %e, "HTTP connection ended");
    }
}

/// Answers a connection over the limit with 503 (plain HTTP), or just closes it (TLS, where
/// an answer would first cost a handshake).
async fn refuse(mut stream: TcpStream, tls: bool) {
    if !tls {
        let body = r#"{"error":{"code":"unavailable","message":"the apiserver is at its connection limit"}}"#;
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            stream.write_all(answer.as_bytes()),
        )
        .await;
    }
    let _ = stream.shutdown().await;
}
