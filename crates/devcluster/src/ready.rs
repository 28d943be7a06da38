//! The one wait-for-ready loop: probe the cluster through a failover client until a
//! condition holds, failing early (with its log's end) when a daemon dies meanwhile.

use std::future::Future;
use std::time::{Duration, Instant};

use xce_client::{parse_candidates, Client};

use crate::{apiserver, controller, scheduler, worker, DevCluster, LaunchError};

/// How long one probe may take before the loop checks the daemons again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between probes.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How much of a dead daemon's log an error quotes.
const LOG_TAIL_LINES: usize = 20;

impl DevCluster {
    /// Waits until a primary serves and every worker has registered and is `ok`; returns the
    /// primary's name.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<String, LaunchError> {
        let workers: Vec<String> = self.workers.iter().map(|w| w.name.clone()).collect();
        let schedulers = !self.schedulers.is_empty();
        let apiservers: Vec<String> = self.apiservers.iter().map(|a| a.addr()).collect();
        let mut what = "a primary at its newest version".to_string();
        if !workers.is_empty() {
            what += &format!(", workers {}", workers.join(", "));
        }
        if schedulers {
            what += ", an active scheduler";
        }
        if !apiservers.is_empty() {
            what += ", ready apiservers";
        }
        self.wait_until(&what, timeout, |client| {
            let workers = workers.clone();
            let apiservers = apiservers.clone();
            async move {
                let primary = controller::primary_at_newest_version(&client).await?;
                if !worker::all_up(&client, &workers).await {
                    return None;
                }
                if schedulers && scheduler::active(&client).await.is_none() {
                    return None;
                }
                for addr in &apiservers {
                    if !apiserver::ready(addr).await {
                        return None;
                    }
                }
                Some(primary)
            }
        })
        .await
    }

    /// Probes with `check` (given a failover client over the controllers) until it returns
    /// `Some`, for at most `timeout`. Fails at once when a daemon that was started exits.
    pub async fn wait_until<T, F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> Result<T, LaunchError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let client = Client::new(parse_candidates(self.peers())?, self.client_config()?);
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive(what)?;
            if let Ok(Some(v)) = tokio::time::timeout(PROBE_TIMEOUT, check(client.clone())).await {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(LaunchError::NotReady {
                    what: what.to_string(),
                    after: timeout,
                });
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// An error naming the first daemon that has exited, with the end of its log.
    pub fn check_alive(&mut self, what: &str) -> Result<(), LaunchError> {
        for d in self.daemons_mut() {
            if let Some(status) = d.exited() {
                let log = std::fs::read_to_string(&d.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
                return Err(LaunchError::Exited {
                    name: d.name.clone(),
                    status,
                    what: what.to_string(),
                    log_tail: tail,
                });
            }
        }
        Ok(())
    }
}
