//! The ready primary's retirement of ended jobs (`state::retire`): every few seconds it
//! proposes `RetireJobs` for jobs that ended `history.retire_after` ago, a batch at a time.
//! It stops while its own history store holds jobs it could not write (a full disk): jobs
//! then stay live, and retiring resumes once the store writes again.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::Node;
use crate::state::retire::MAX_RETIRE_BATCH;
use crate::state::Command;

/// How often the primary looks for jobs to retire.
const PERIOD: Duration = Duration::from_secs(2);

pub(super) async fn run_retirement(node: Arc<Node>) {
    let mut stalled = false;
    // A full batch retired: more may be due at once.
    let mut more = false;
    loop {
        if !more {
            tokio::time::sleep(PERIOD).await;
        }
        more = false;
        if node.gate().is_err() || node.active_version() < xce_client::version::ACCOUNTING {
            continue;
        }
        let unwritten = node.history.unwritten();
        if unwritten > 0 {
            if !stalled {
                warn!(unwritten, "history: not retiring jobs while this controller's history store cannot write; they stay live");
            }
            stalled = true;
            // A write of nothing retries what is kept.
            let history = node.history.clone();
            let _ = tokio::task::spawn_blocking(move || history.write(Vec::new())).await;
            continue;
        }
        if stalled {
            info!("history: this controller's history store writes again; retiring jobs");
            stalled = false;
        }
        let before = xce_client::when::now_ms().saturating_sub(node.history_rules.retire_after_ms);
        let ids = node
            .state
            .read()
            .state
            .retire_candidates(before, MAX_RETIRE_BATCH);
        if ids.is_empty() {
            continue;
        }
        let count = ids.len();
        match node.write(Command::RetireJobs { ids }).await {
            Ok(_) => {
                info!(jobs = count, "retired ended jobs to history");
                more = count == MAX_RETIRE_BATCH;
            }
            Err(h) => warn!(reason = %h.message, "retiring jobs to history failed; trying again"),
        }
    }
}
