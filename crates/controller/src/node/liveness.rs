//! Host liveness, primary-local: heartbeats answered without touching the log, and the task
//! that marks silent hosts unavailable and, after the grace period, loses their jobs. Only
//! its conclusions (`SetHostAvailable`, `HostLost`) are Raft entries.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::Node;
use crate::state::Command;

impl Node {
    /// A worker's heartbeat: fire-and-forget, so it is answered at once (no hold). `noEnt`
    /// tells a worker it must join again: this primary does not know its host, or marked it
    /// unavailable (a host comes back only through a join, whose resync fences what it ran
    /// while it was away).
    pub fn heartbeat(&self, name: &str) -> ReplyHeader {
        if let Err(h) = self.gate() {
            return h;
        }
        // A heartbeat is answered without touching the log; a primary cut off from its
        // majority must not vouch for a worker that another primary may be declaring lost:
        // the gate's lease check covers that.
        match self.state.read().state.host(name) {
            Some(h) if h.available => {}
            Some(_) => {
                return ReplyHeader::status(
                    Status::NoEnt,
                    format!("host {name:?}: marked unavailable; join again to resync"),
                )
            }
            None => {
                return ReplyHeader::status(
                    Status::NoEnt,
                    format!("host {name:?}: unknown to this primary; join again"),
                )
            }
        }
        self.saw_host(name);
        self.metrics.heartbeats.inc();
        ReplyHeader::ok()
    }

    /// How long after its last heartbeat a worker's jobs are declared lost (TTL + grace):
    /// told to workers at join so that a cut-off worker stops its jobs before they are
    /// requeued elsewhere.
    pub fn host_lost_after(&self) -> Duration {
        self.timeouts.host_ttl + self.timeouts.host_lost_grace
    }

    /// Records that a host is alive (a heartbeat or a join).
    pub fn saw_host(&self, name: &str) {
        self.heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), tokio::time::Instant::now());
    }
}

/// Marks hosts unavailable when their worker has not heartbeated to this primary for the
/// TTL, and loses their jobs when they stay unavailable beyond the grace period. Both clocks
/// start no earlier than when this node became a ready primary, so a new primary gives each
/// worker a whole TTL (and grace) to find it.
pub(super) async fn run_liveness(node: Arc<Node>) {
    let period = (node.timeouts.host_ttl / 4).max(Duration::from_millis(50));
    let mut ready_term = node.ready_term.subscribe();
    let mut serving_since: Option<(u64, tokio::time::Instant)> = None;
    // When this primary first saw each host unavailable with jobs on it.
    let mut unavailable_since = std::collections::HashMap::<String, tokio::time::Instant>::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            r = ready_term.changed() => if r.is_err() { return },
        }
        if node.gate().is_err() {
            serving_since = None;
            continue;
        }
        let term = *node.ready_term.borrow();
        let since = match serving_since {
            Some((t, since)) if t == term => since,
            _ => {
                let now = tokio::time::Instant::now();
                serving_since = Some((term, now));
                now
            }
        };
        let stale: Vec<String> = {
            let available = node.state.read().state.available_hosts();
            let seen = node.heartbeats.lock().unwrap_or_else(|p| p.into_inner());
            available
                .into_iter()
                .filter(|h| {
                    let last = seen.get(h).copied().unwrap_or(since).max(since);
                    last.elapsed() > node.timeouts.host_ttl
                })
                .collect()
        };
        for name in stale {
            warn!(host = %name, ttl = ?node.timeouts.host_ttl, "host stopped heartbeating; marking it unavailable");
            let cmd = Command::SetHostAvailable {
                name,
                available: false,
            };
            if let Err(h) = node.write(cmd).await {
                warn!(message = %h.message, "could not mark the host unavailable");
            }
        }
        let unavailable = node.state.read().state.unavailable_hosts_with_jobs();
        unavailable_since.retain(|h, _| unavailable.contains(h));
        for name in unavailable {
            let first_seen = *unavailable_since
                .entry(name.clone())
                .or_insert_with(tokio::time::Instant::now);
            if first_seen.max(since).elapsed() <= node.timeouts.host_lost_grace {
                continue;
            }
            warn!(host = %name, grace = ?node.timeouts.host_lost_grace, "host stayed unavailable; its jobs are lost");
            match node.write(Command::HostLost { name: name.clone() }).await {
                Ok(_) => {
                    unavailable_since.remove(&name);
                }
                Err(h) => {
                    warn!(host = %name, message = %h.message, "could not mark the host's jobs lost")
                }
            }
        }
    }
}
