//! Decision-publish retry: a decision (the scheduler's dispatch) must never be dropped just
//! because one retry budget ran out during a long outage. It is retried, a fresh budget per
//! round, until it succeeds or shutdown is requested; shutdown is checked before every round
//! and interrupts a round in progress. Callers publish in order and await each publish, so
//! ordering is preserved.

use futures::FutureExt;
use tokio::sync::watch;
use tracing::warn;

use crate::client::{Client, ClientError};
use crate::ops::Op;
use crate::transport::Transport;

/// Rounds published after the first, by every `publish_until_done` of this process: a
/// decision that needed a fresh budget (an outage longer than one). For a daemon's metrics.
pub static EXTENDED_ROUNDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Publishes `op` until it succeeds, a terminal status comes back, or `shutdown` turns true
/// (then `ClientError::Shutdown`). Re-sends carry the op's own request token, so a publish that
/// landed during a lost round is answered `dupJob` and counts as done.
pub async fn publish_until_done<T: Transport, O: Op>(
    client: &Client<T>,
    op: O,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<O::Output, ClientError> {
    let mut rounds = 0u32;
    loop {
        if *shutdown.borrow() {
            return Err(ClientError::Shutdown);
        }
        // A round whose reply was lost may have applied the decision: later rounds are
        // re-sends, for which `dupJob` means done.
        let attempt = if rounds == 0 {
            client.call(op.clone()).boxed()
        } else {
            client.call_again(op.clone()).boxed()
        };
        let result = tokio::select! {
            r = attempt => r,
            _ = shutdown.wait_for(|stop| *stop) => return Err(ClientError::Shutdown),
        };
        match result {
            Ok(value) => {
                if rounds > 0 {
                    warn!(
                        op = O::NAME,
                        rounds = rounds + 1,
                        "decision published after extended retry"
                    );
                }
                return Ok(value);
            }
            Err(ClientError::ClusterNotReady { .. }) => {
                rounds += 1;
                EXTENDED_ROUNDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                warn!(
                    op = O::NAME,
                    rounds, "no primary yet; retrying the decision with a fresh budget"
                );
            }
            Err(ClientError::Degraded { remaining }) => {
                // A fail-fast client: wait out the breaker instead of spinning on it.
                rounds += 1;
                EXTENDED_ROUNDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::select! {
                    () = tokio::time::sleep(remaining) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return Err(ClientError::Shutdown),
                }
            }
            Err(other) => return Err(other),
        }
    }
}
