//! The shutdown signal every daemon obeys: SIGTERM (systemd, `xce dev`) or SIGINT (Ctrl-C).

use std::future::Future;

/// Resolves on the first SIGTERM or SIGINT. The handlers are installed when it is first
/// polled; without them (which only fails when the runtime has no signal driver) it never
/// resolves and the default actions apply.
pub async fn signal() {
    listen().await
}

/// Installs the SIGTERM and SIGINT handlers now (inside a runtime) and returns what resolves
/// on the first of them: for a program that must not be killed by a signal that arrives
/// between telling the world it is up and waiting for the signal.
pub fn listen() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
