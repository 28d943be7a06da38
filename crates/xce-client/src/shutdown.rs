//! The shutdown signal every daemon obeys: SIGTERM (systemd, `xce dev`) or SIGINT (Ctrl-C).

/// Resolves on the first SIGTERM or SIGINT. Without signal handlers (which only fails when
/// the runtime has no signal driver) it never resolves and the default actions apply.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
