//! The apiserver kind: its command line and its readiness probe (`/readyz` answers 200).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `xce-apiserver`'s arguments, then `extra` flags.
pub(crate) fn args(port: u16, peers: &str, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--peers".to_string(),
        peers.to_string(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// The status code of `GET path` on `addr`, within `timeout` (`None`: no answer). Enough
/// HTTP/1.1 for a probe: one request, `Connection: close`, the status line read.
pub async fn get_status(addr: &str, path: &str, timeout: Duration) -> Option<u16> {
    let probe = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 64];
        let mut read = 0;
        while read < 12 {
            let n = stream.read(&mut head[read..]).await.ok()?;
            if n == 0 {
                break;
            }
            read += n;
        }
        let line = std::str::from_utf8(&head[..read]).ok()?;
        line.split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(timeout, probe).await.ok().flatten()
}

/// Whether the apiserver at `addr` says it is ready.
pub async fn ready(addr: &str) -> bool {
    get_status(addr, "/readyz", Duration::from_secs(1)).await == Some(200)
}
