//! The scheduler lease, as this scheduler holds it: renewed every third of its time to live.
//! A standby asks at least every second and is refused until the holder stops renewing (or
//! hands the lease back at a clean stop), then takes over at the next epoch. Locally the lease counts as held only
//! until `ttl × 4/5` after the request that granted it was *sent*, so this scheduler stops
//! deciding before the controller could grant the lease to another.

use std::time::Duration;

use crate::stopped;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use xce_client::ops::AcquireScheduler;
use xce_client::types::RequestToken;
use xce_client::{Client, ClientError, Status};

/// Who asks for the lease: the scheduler's name and this process's random instance number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub name: String,
    pub instance: u64,
}

impl Holder {
    /// This process, under `name`.
    pub fn new(name: &str) -> Holder {
        Holder {
            name: name.to_string(),
            instance: rand::random(),
        }
    }
}

/// The lease as held here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub epoch: u64,
    /// After this, this scheduler makes no more decisions under `epoch`.
    pub valid_until: Instant,
}

impl Held {
    /// The epoch, while the lease is still good here.
    pub fn epoch_now(lease: &Option<Held>) -> Option<u64> {
        lease
            .filter(|h| Instant::now() < h.valid_until)
            .map(|h| h.epoch)
    }
}

/// Keeps asking for the lease until `stop`, publishing what is held on `held`.
pub async fn run_lease(
    client: Client,
    holder: Holder,
    ttl: Duration,
    held: watch::Sender<Option<Held>>,
    mut stop: watch::Receiver<bool>,
) {
    let every = ttl / 3;
    let ttl_ms = u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX);
    let name = holder.name.clone();
    loop {
        let sent = Instant::now();
        let ask = AcquireScheduler {
            token: RequestToken::random(),
            name: name.clone(),
            instance: holder.instance,
            ttl_ms,
        };
        // No timeout of our own: the client bounds the call, and a call may carry the
        // rejoin's full re-read, which must not be cut short.
        let call = client.call(ask);
        tokio::pin!(call);
        let answer = tokio::select! {
            r = &mut call => r,
            () = stopped(&mut stop) => {
                // Let an ask in flight land first: applied after the release, it would grant
                // a stopping scheduler the lease again and lock its standby out.
                let _ = tokio::time::timeout(RELEASE_WITHIN, &mut call).await;
                return release(&client, &holder, &held).await;
            }
        };
        let was = *held.borrow();
        match answer {
            Ok(epoch) => {
                let now = Held {
                    epoch,
                    valid_until: sent + ttl * 4 / 5,
                };
                if Held::epoch_now(&was) != Some(epoch) {
                    info!(scheduler = %name, epoch, "holding the scheduler lease: this scheduler is active");
                } else {
                    debug!(scheduler = %name, epoch, "renewed the scheduler lease");
                }
                held.send_replace(Some(now));
            }
            Err(ClientError::Status {
                status: Status::Conflict,
                message,
            }) => {
                if Held::epoch_now(&was).is_some() {
                    warn!(scheduler = %name, %message, "lost the scheduler lease: standing by");
                } else {
                    debug!(scheduler = %name, %message, "standing by");
                }
                held.send_replace(None);
            }
            Err(e) => {
                warn!(scheduler = %name, error = %e, "could not renew the scheduler lease");
            }
        }
        if was.is_some() && Held::epoch_now(&held.borrow()).is_none() {
            // Ran out here without a renewal: decisions stop now (the publisher checks too).
            held.send_replace(None);
        }
        // A standby asks at least every second, so a released lease passes at once even
        // when leases are long.
        let wait = match Held::epoch_now(&held.borrow()) {
            Some(_) => every,
            None => every.min(STANDBY_ASK),
        };
        let next = (sent + wait).max(Instant::now());
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = stopped(&mut stop) => return release(&client, &holder, &held).await,
        }
    }
}

/// How often a standby asks for the lease, at most.
const STANDBY_ASK: Duration = Duration::from_secs(1);

/// How long a stopping scheduler tries to hand its lease back.
const RELEASE_WITHIN: Duration = Duration::from_secs(1);

/// Hands the lease back at a clean stop, so a standby takes over at once rather than after
/// the lease runs out. Decisions stop first: the lease counts as gone here from now on.
async fn release(client: &Client, holder: &Holder, held: &watch::Sender<Option<Held>>) {
    // Sent whatever this process believes it holds (a first grant may be in the log, or
    // the lease may have lapsed here but not yet on the controllers): releasing a lease one
    // does not hold does nothing.
    held.send_replace(None);
    let op = AcquireScheduler {
        token: RequestToken::random(),
        name: holder.name.clone(),
        instance: holder.instance,
        ttl_ms: 0,
    };
    match tokio::time::timeout(RELEASE_WITHIN, client.call(op)).await {
        Ok(Ok(_)) => info!(scheduler = %holder.name, "released the scheduler lease"),
        Ok(Err(e)) => {
            warn!(scheduler = %holder.name, error = %e, "could not release the scheduler lease; it runs out by itself")
        }
        Err(_) => {
            warn!(scheduler = %holder.name, "releasing the scheduler lease timed out; it runs out by itself")
        }
    }
}
