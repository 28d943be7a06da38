//! The pipeline: **picker** → **allocator** → **publisher**, each its own task, joined by
//! bounded channels.
//!
//! - The picker owns the view: it applies events, reads what events do not carry, and, while
//!   this scheduler holds the lease, decides a round (`place::plan`), marking the placed jobs
//!   in flight (their resources reserved) until the publisher says how they fared.
//! - The allocator gives each round its requests: placements and reasons cut into batches
//!   of at most `MAX_BATCH`, each with its own request token and the lease epoch.
//! - The publisher publishes them in FIFO order through xce-client's decision-publish retry
//!   (a fresh budget per round, shutdown checked before each attempt), and tells the picker
//!   what was refused; a refusal means the world changed, so the picker re-reads those jobs
//!   and the hosts. It never re-decides a job still in flight, so nothing is placed twice.
//!
//! While publishing is stalled (an outage), the publisher stops taking requests, the
//! allocator's channel fills, and the picker stops deciding once it has no room to send; it
//! resumes by itself when the publisher drains.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::stopped;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};
use xce_client::events::StreamItem;
use xce_client::fit::Resources;
use xce_client::ops::{DispatchBatch, GetJob, SetPendReasons};
use xce_client::publish::publish_until_done;
use xce_client::types::{JobId, PendReason, Placement, Refusal, RequestToken};
use xce_client::{Client, ClientError, Status};

use crate::lease::Held;
use crate::place::plan;
use crate::view::{self, Followup, View};

/// Most placements (or reasons) in one request: the controller's bound.
pub const MAX_BATCH: usize = 4096;
/// Rounds buffered between picker and allocator, and requests between allocator and
/// publisher.
pub const ROUNDS_BUFFERED: usize = 2;
pub const REQUESTS_BUFFERED: usize = 4;
/// Unknown jobs read one by one below this many; above it, one ranged read.
const FETCH_ONE_BY_ONE: usize = 16;

/// One round of decisions, under one lease epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    pub epoch: u64,
    pub placements: Vec<Placement>,
    pub reasons: Vec<(JobId, PendReason)>,
}

/// One request for the publisher.
#[derive(Debug, Clone)]
pub enum Request {
    Dispatch(DispatchBatch),
    Reasons(SetPendReasons),
}

/// What the publisher tells the picker about a dispatch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Every job of the request: none is in flight any more.
    pub jobs: Vec<JobId>,
    /// Those not placed, and why; empty when all were.
    pub refused: Vec<Refusal>,
    /// Jobs whose pending reason was not published (to be decided again).
    pub unsent_reasons: Vec<JobId>,
}

/// The allocator: cuts each round into fenced, tokened requests, in order.
pub async fn allocator(mut rounds: mpsc::Receiver<Round>, requests: mpsc::Sender<Request>) {
    while let Some(round) = rounds.recv().await {
        for chunk in round.placements.chunks(MAX_BATCH) {
            let op = DispatchBatch {
                token: RequestToken::random(),
                epoch: round.epoch,
                placements: chunk.to_vec(),
            };
            if requests.send(Request::Dispatch(op)).await.is_err() {
                return;
            }
        }
        for chunk in round.reasons.chunks(MAX_BATCH) {
            let op = SetPendReasons {
                token: RequestToken::random(),
                epoch: round.epoch,
                reasons: chunk.to_vec(),
            };
            if requests.send(Request::Reasons(op)).await.is_err() {
                return;
            }
        }
    }
}

/// What the publisher publishes through: the real client, or a test's stand-in.
pub trait Publish: Send + Sync + 'static {
    /// Publishes one dispatch batch until it is decided; `Err` only for shutdown or a refusal
    /// of the whole batch.
    fn dispatch(
        &self,
        op: DispatchBatch,
        stop: &mut watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = Result<Vec<Refusal>, ClientError>> + Send;
    /// Publishes pending reasons.
    fn reasons(
        &self,
        op: SetPendReasons,
        stop: &mut watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = Result<(), ClientError>> + Send;
}

impl Publish for Client {
    async fn dispatch(
        &self,
        op: DispatchBatch,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Vec<Refusal>, ClientError> {
        publish_until_done(self, op, stop).await
    }

    async fn reasons(
        &self,
        op: SetPendReasons,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClientError> {
        publish_until_done(self, op, stop).await
    }
}

/// The publisher: publishes each request in order; a request whose epoch is no longer held
/// here is not sent at all (a scheduler that lost its lease stops dispatching at once).
pub async fn publisher<P: Publish>(
    target: P,
    mut requests: mpsc::Receiver<Request>,
    lease: watch::Receiver<Option<Held>>,
    feedback: mpsc::UnboundedSender<Published>,
    mut stop: watch::Receiver<bool>,
) {
    while let Some(request) = requests.recv().await {
        if *stop.borrow() {
            return;
        }
        let held = Held::epoch_now(&lease.borrow());
        match request {
            Request::Dispatch(op) => {
                let jobs: Vec<JobId> = op.placements.iter().map(|p| p.id).collect();
                let refused = if held != Some(op.epoch) {
                    debug!(
                        epoch = op.epoch,
                        "the lease is gone: dropping a batch of decisions"
                    );
                    refuse_all(
                        &op,
                        Status::Conflict,
                        "the lease was lost before publishing",
                    )
                } else {
                    match target.dispatch(op.clone(), &mut stop).await {
                        Ok(refused) => refused,
                        Err(ClientError::Shutdown) => return,
                        Err(ClientError::Status { status, message }) => {
                            warn!(%status, %message, placements = jobs.len(), "a batch of placements was refused");
                            refuse_all(&op, status, &message)
                        }
                        Err(e) => {
                            warn!(error = %e, placements = jobs.len(), "a batch of placements could not be published");
                            refuse_all(&op, Status::Internal, &e.to_string())
                        }
                    }
                };
                let answer = Published {
                    jobs,
                    refused,
                    unsent_reasons: Vec::new(),
                };
                if feedback.send(answer).is_err() {
                    return;
                }
            }
            Request::Reasons(op) => {
                let ids: Vec<JobId> = op.reasons.iter().map(|(id, _)| *id).collect();
                let sent = if held != Some(op.epoch) {
                    false
                } else {
                    match target.reasons(op, &mut stop).await {
                        Ok(()) => true,
                        Err(ClientError::Shutdown) => return,
                        Err(e) => {
                            debug!(error = %e, "pending reasons not published");
                            false
                        }
                    }
                };
                if !sent {
                    let answer = Published {
                        jobs: Vec::new(),
                        refused: Vec::new(),
                        unsent_reasons: ids,
                    };
                    if feedback.send(answer).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

fn refuse_all(op: &DispatchBatch, status: Status, message: &str) -> Vec<Refusal> {
    op.placements
        .iter()
        .map(|p| Refusal {
            id: p.id,
            status,
            message: message.to_string(),
        })
        .collect()
}

/// What the picker reads from: the view loaded at each (re)join, the event stream, the
/// publisher's answers and the lease.
pub struct PickerInputs {
    pub views: watch::Receiver<Option<view::Loaded>>,
    pub events: mpsc::Receiver<StreamItem>,
    pub feedback: mpsc::UnboundedReceiver<Published>,
    pub lease: watch::Receiver<Option<Held>>,
    pub stop: watch::Receiver<bool>,
    /// How many events the picker has applied (read by the rejoin's full re-read).
    pub events_seen: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// What an applied event touched, so that what changed during a full re-read is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touched {
    Job(JobId),
    Host,
    Queue,
}

/// Events remembered for that; a re-read that took longer than this many events is repeated.
const RECENT_EVENTS: usize = 65_536;

/// The picker's own state: the view and what is in flight.
#[derive(Default)]
struct Picker {
    view: View,
    /// Decided and not yet answered: the host and what the job reserves there (an array's
    /// several tasks of one round, one each).
    in_flight: HashMap<JobId, Vec<(String, Resources)>>,
    /// Tasks of an array the publisher confirmed placed, until the array's next event (its
    /// tasks' own events come with it, and count them on their hosts from then on) or a view
    /// read after the confirmation: what they take on each host, and when confirmed.
    tasks_unseen: HashMap<JobId, (Vec<(String, Resources)>, std::time::Instant)>,
    /// Reasons sent and not yet seen back in an event, so they are not sent twice.
    reasons_sent: HashMap<JobId, PendReason>,
    /// When the last round's earliest begin time comes (ms since the epoch): a round is due
    /// then, though no event comes.
    wake_at_ms: Option<u64>,
    unknown: HashSet<JobId>,
    hosts_stale: bool,
    queues_stale: bool,
    /// The installed view missed events it cannot name; a full re-read is on its way.
    view_stale: bool,
    /// Placements the publisher confirmed whose event has not come yet, and when the
    /// confirmation came: a view read before they applied must not make them look pending
    /// again, and one read after shows them (their event may have been lost in a failover,
    /// and the job requeued since: kept for good, it would look placed forever).
    confirmed_unseen: HashMap<JobId, (String, std::time::Instant)>,
    dirty: bool,
    /// When the cluster's version was last read while it was too old to send jobs ahead
    /// (configured so): it is raised by itself once every controller runs a newer build, and
    /// no event says so.
    version_read: Option<std::time::Instant>,
    /// Events applied so far, and what the latest of them touched.
    seen: u64,
    recent: std::collections::VecDeque<(u64, Touched)>,
}

impl Picker {
    /// What the in-flight placements will use on each host.
    fn reserved(&self) -> HashMap<String, Resources> {
        let mut reserved: HashMap<String, Resources> = HashMap::new();
        let unseen = self.tasks_unseen.values().flat_map(|(tasks, _)| tasks);
        for (host, need) in self.in_flight.values().flatten().chain(unseen) {
            let r = reserved.entry(host.clone()).or_default();
            *r = r.plus(need);
        }
        reserved
    }

    /// Installs a freshly loaded view; in-flight decisions stay reserved until answered.
    /// Events applied since the read began may or may not be in it: what they touched is
    /// read again. Returns false when too many came to know (then read everything again).
    fn install(&mut self, loaded: view::Loaded) -> bool {
        let before = std::mem::replace(&mut self.view, loaded.view);
        // A resume this view heard of outlives the re-read, whose record does not say how long
        // the job was suspended.
        for (id, job) in self.view.placed.iter_mut() {
            let heard = before.placed.get(id).and_then(|p| p.started_ms);
            if let (Some(heard), Some(read)) = (heard, job.started_ms) {
                job.started_ms = Some(heard.max(read));
            }
        }
        self.confirmed_unseen
            .retain(|_, (_, confirmed)| *confirmed > loaded.began);
        self.tasks_unseen
            .retain(|_, (_, confirmed)| *confirmed > loaded.began);
        for (id, (host, _)) in &self.confirmed_unseen {
            self.view.placed_now(*id, host.clone());
        }
        self.reasons_sent.clear();
        self.unknown.clear();
        self.hosts_stale = false;
        self.queues_stale = false;
        self.dirty = true;
        let oldest = self.recent.front().map_or(self.seen + 1, |(seq, _)| *seq);
        for (_, touched) in self
            .recent
            .iter()
            .filter(|(seq, _)| *seq > loaded.events_before)
        {
            match touched {
                Touched::Job(id) => {
                    self.unknown.insert(*id);
                }
                Touched::Host => self.hosts_stale = true,
                Touched::Queue => self.queues_stale = true,
            }
        }
        let complete = oldest <= loaded.events_before + 1;
        self.view_stale = !complete;
        complete
    }

    fn apply(&mut self, event: &xce_client::types::ClusterEvent) {
        use xce_client::types::ClusterEvent;
        self.seen += 1;
        let touched = match event {
            ClusterEvent::Job { id, .. } => {
                self.reasons_sent.remove(id);
                self.confirmed_unseen.remove(id);
                self.tasks_unseen.remove(id);
                Touched::Job(*id)
            }
            ClusterEvent::Host { .. } => Touched::Host,
            ClusterEvent::Queue { .. } => Touched::Queue,
        };
        self.recent.push_back((self.seen, touched));
        if self.recent.len() > RECENT_EVENTS {
            self.recent.pop_front();
        }
        match self.view.apply(event) {
            // A task read for its pending event is placed by now, as this one says.
            Followup::Nothing => {
                if let ClusterEvent::Job { id, .. } = event {
                    if self.view.placed.contains_key(id) {
                        self.unknown.remove(id);
                    }
                }
            }
            Followup::FetchJob(id) => {
                self.unknown.insert(id);
            }
            Followup::FetchHosts => self.hosts_stale = true,
        }
        self.dirty = true;
    }

    fn answered(&mut self, published: Published) {
        // Reasons not published are decided again at the next change (not at once: a
        // refusal that repeats would turn into a loop of requests).
        for id in &published.unsent_reasons {
            self.reasons_sent.remove(id);
        }
        if published.jobs.is_empty() {
            return;
        }
        let refused: HashSet<JobId> = published.refused.iter().map(|r| r.id).collect();
        for id in &published.jobs {
            let Some(decided) = self.in_flight.remove(id) else {
                continue;
            };
            if refused.contains(id) {
                continue;
            }
            crate::metrics::PLACEMENTS.fetch_add(decided.len() as u64, Ordering::Relaxed);
            let now = std::time::Instant::now();
            if self.view.arrays.contains_key(id) {
                // Tasks split off the array: counted on their hosts until the array's event.
                let (tasks, confirmed) = self.tasks_unseen.entry(*id).or_insert((Vec::new(), now));
                tasks.extend(decided);
                *confirmed = now;
                continue;
            }
            // Placed: count it on its host now. Its event may come after this answer, and
            // until then the job would look pending and free to place again.
            if let Some((host, _)) = decided.into_iter().next() {
                self.view.placed_now(*id, host.clone());
                self.confirmed_unseen.insert(*id, (host, now));
            }
        }
        crate::metrics::REFUSED.fetch_add(published.refused.len() as u64, Ordering::Relaxed);
        for refusal in &published.refused {
            // The world changed under the decision: read the job (and the hosts) again.
            debug!(job = refusal.id, status = %refusal.status, message = %refusal.message, "placement refused");
            if refusal.status != Status::Internal || !refusal.message.is_empty() {
                self.unknown.insert(refusal.id);
            }
            self.hosts_stale = true;
        }
        self.dirty = true;
    }

    /// Reads the cluster's version again, every few seconds, while this scheduler would send
    /// jobs ahead, or publish the starts it reserves, but the cluster does not take them yet.
    async fn read_version(&mut self, client: &Client) -> Result<(), ClientError> {
        const EVERY: std::time::Duration = std::time::Duration::from_secs(2);
        let version = self.view.version;
        let ahead = self.view.dispatch_ahead > 0 && version < xce_client::version::DISPATCH_AHEAD;
        let reserves = self.view.backfill_depth > 0 && version < xce_client::version::ACCOUNTING;
        let waits = (ahead || reserves) && self.version_read.is_none_or(|at| at.elapsed() >= EVERY);
        if !waits {
            return Ok(());
        }
        self.version_read = Some(std::time::Instant::now());
        let version = client
            .call(xce_client::ops::GetCluster)
            .await?
            .active_version;
        if version != self.view.version {
            self.view.version = version;
            self.dirty = true;
            if self.view.sends_ahead() {
                info!(
                    version,
                    "the cluster takes jobs sent ahead of hosts' free room now"
                );
            }
        }
        Ok(())
    }

    /// Reads what events did not carry: unknown jobs and, when stale, the hosts.
    async fn catch_up(&mut self, client: &Client) -> Result<(), ClientError> {
        self.read_version(client).await?;
        if self.hosts_stale {
            view::load_hosts(client, &mut self.view).await?;
            self.hosts_stale = false;
        }
        if self.queues_stale {
            view::load_queues(client, &mut self.view).await?;
            self.queues_stale = false;
        }
        if self.unknown.is_empty() {
            return Ok(());
        }
        let ids: Vec<JobId> = self.unknown.iter().copied().collect();
        if ids.len() <= FETCH_ONE_BY_ONE {
            for id in ids {
                match client.call(GetJob { id }).await {
                    Ok(job) => self.view.put_job(&job),
                    Err(ClientError::Status {
                        status: Status::NoEnt,
                        ..
                    }) => {}
                    Err(e) => return Err(e),
                }
                self.unknown.remove(&id);
            }
        } else {
            let from = ids.iter().min().copied().unwrap_or(1);
            // Jobs the read does not return have ended (or are gone): out of the view.
            for id in &ids {
                self.view.pending.remove(id);
                self.view.placed.remove(id);
            }
            let mut page_view = std::mem::take(&mut self.view);
            let read = view::read_live_jobs(client, from.saturating_sub(1), &mut page_view).await;
            self.view = page_view;
            read?;
            self.unknown.clear();
        }
        Ok(())
    }

    /// Decides one round when there is something new, the lease is held, and nothing
    /// unknown is left to read.
    fn decide(&mut self, epoch: u64) -> Option<Round> {
        if !self.dirty
            || !self.unknown.is_empty()
            || self.hosts_stale
            || self.queues_stale
            || self.view_stale
        {
            return None;
        }
        let in_flight: HashSet<JobId> = self.in_flight.keys().copied().collect();
        let mut planned = plan(&self.view, &in_flight, &self.reserved(), MAX_BATCH);
        crate::metrics::RESERVATIONS.store(
            i64::try_from(planned.reservations.len()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        self.wake_at_ms = planned.wake_at_ms;
        self.dirty = planned.placements.len() >= MAX_BATCH;
        planned
            .reasons
            .retain(|(id, r)| self.reasons_sent.get(id) != Some(r));
        for (id, r) in &planned.reasons {
            self.reasons_sent.insert(*id, r.clone());
            // What the controller will hold: a reserved start is sent again only once it moved.
            if let Some(job) = self.view.pending.get_mut(id) {
                job.expected_start_ms = r.expected_start_ms;
            }
        }
        for p in &planned.placements {
            let need = self
                .view
                .pending
                .get(&p.id)
                .map_or_else(Resources::default, |j| j.need.clone());
            self.in_flight
                .entry(p.id)
                .or_default()
                .push((p.host.clone(), need));
        }
        if planned.placements.is_empty() && planned.reasons.is_empty() {
            return None;
        }
        Some(Round {
            epoch,
            placements: planned.placements,
            reasons: planned.reasons,
        })
    }
}

/// Asks for a full re-read (the client's rejoin, whose view reaches the picker through its
/// channel) and makes it happen now: the picker or publisher may have no call to make for a
/// long while, and the rejoin runs only before a call. The call runs beside the picker, so
/// events keep being taken while the cluster is read.
fn reread_now(client: &Client) {
    client.request_rejoin();
    let client = client.clone();
    tokio::spawn(async move {
        if let Err(e) = client.call(xce_client::ops::GetCluster).await {
            debug!(error = %e, "the re-read did not run yet; the next call retries it");
        }
    });
}

/// The picker; `resync` asks for a full re-read (the client's rejoin) when the event stream
/// lost events.
pub async fn picker(
    client: Client,
    mut inputs: PickerInputs,
    rounds: mpsc::Sender<Round>,
    safety_reread: Duration,
) {
    let mut me = Picker::default();
    let mut reread = tokio::time::interval(safety_reread);
    reread.tick().await;
    loop {
        if *inputs.stop.borrow() {
            return;
        }
        if let Err(e) = me.catch_up(&client).await {
            debug!(error = %e, "could not read what the events left out; retrying");
        }
        let epoch = Held::epoch_now(&inputs.lease.borrow());
        crate::metrics::ACTIVE.store(i64::from(epoch.is_some()), Ordering::Relaxed);
        crate::metrics::PENDING.store(me.view.pending.len() as i64, Ordering::Relaxed);
        let behind = !me.unknown.is_empty() || me.hosts_stale || me.queues_stale;
        let ready = epoch.is_some() && me.dirty && !behind && !me.view_stale;
        let begins_in = me
            .wake_at_ms
            .map(|at| Duration::from_millis(at.saturating_sub(xce_client::when::now_ms())));
        tokio::select! {
            biased;
            () = stopped(&mut inputs.stop) => return,
            Ok(()) = inputs.views.changed() => {
                let loaded = inputs.views.borrow_and_update().clone();
                if let Some(loaded) = loaded {
                    let view = &loaded.view;
                    info!(pending = view.pending.len(), placed = view.placed.len(), hosts = view.hosts.len(), "read the cluster");
                    if !me.install(loaded) {
                        info!("more events came during the read than are remembered; reading again");
                        reread_now(&client);
                    }
                }
            }
            Some(answer) = inputs.feedback.recv() => me.answered(answer),
            item = inputs.events.recv() => match item {
                Some(StreamItem::Event(e)) => {
                    me.apply(&e);
                    inputs.events_seen.store(me.seen, std::sync::atomic::Ordering::Release);
                }
                Some(StreamItem::Resync { reason }) => {
                    info!(%reason, "events were lost: reading the cluster again");
                    reread_now(&client);
                }
                None => return,
            },
            Ok(()) = inputs.lease.changed() => me.dirty = true,
            // A job's begin time came.
            () = tokio::time::sleep(begins_in.unwrap_or_default()), if begins_in.is_some() && !me.dirty => {
                me.wake_at_ms = None;
                me.dirty = true;
            }
            _ = reread.tick() => reread_now(&client),
            // A catch-up that failed is tried again soon, not at the next event.
            () = tokio::time::sleep(Duration::from_millis(100)), if behind => {}
            permit = rounds.reserve(), if ready => {
                let Ok(permit) = permit else { return };
                if let Some(round) = epoch.and_then(|e| me.decide(e)) {
                    debug!(epoch = round.epoch, placements = round.placements.len(), reasons = round.reasons.len(), "decided a round");
                    permit.send(round);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use xce_client::types::JobState;

    use super::*;

    /// A publish target that holds every request until its gate opens, and records the
    /// order in which it published.
    #[derive(Clone)]
    struct Stalled {
        gate: watch::Receiver<bool>,
        published: Arc<Mutex<Vec<JobId>>>,
    }

    impl Publish for Stalled {
        async fn dispatch(
            &self,
            op: DispatchBatch,
            _stop: &mut watch::Receiver<bool>,
        ) -> Result<Vec<Refusal>, ClientError> {
            let mut gate = self.gate.clone();
            let _ = gate.wait_for(|open| *open).await;
            let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
            published.extend(op.placements.iter().map(|p| p.id));
            Ok(Vec::new())
        }

        async fn reasons(
            &self,
            _op: SetPendReasons,
            _stop: &mut watch::Receiver<bool>,
        ) -> Result<(), ClientError> {
            Ok(())
        }
    }

    fn round(epoch: u64, ids: std::ops::Range<JobId>) -> Round {
        Round {
            epoch,
            placements: ids
                .map(|id| Placement {
                    id,
                    host: "w1".into(),
                })
                .collect(),
            reasons: Vec::new(),
        }
    }

    struct Stages {
        rounds: mpsc::Sender<Round>,
        feedback: mpsc::UnboundedReceiver<Published>,
        gate: watch::Sender<bool>,
        lease: watch::Sender<Option<Held>>,
        published: Arc<Mutex<Vec<JobId>>>,
        _stop: watch::Sender<bool>,
    }

    fn stages() -> Stages {
        let (rounds_tx, rounds) = mpsc::channel(ROUNDS_BUFFERED);
        let (requests_tx, requests) = mpsc::channel(REQUESTS_BUFFERED);
        let (feedback_tx, feedback) = mpsc::unbounded_channel();
        let (gate, gate_rx) = watch::channel(false);
        let held = Held {
            epoch: 3,
            valid_until: tokio::time::Instant::now() + Duration::from_secs(3600),
        };
        let (lease, lease_rx) = watch::channel(Some(held));
        let (stop_tx, stop) = watch::channel(false);
        let published = Arc::new(Mutex::new(Vec::new()));
        let target = Stalled {
            gate: gate_rx,
            published: published.clone(),
        };
        tokio::spawn(allocator(rounds, requests_tx));
        tokio::spawn(publisher(target, requests, lease_rx, feedback_tx, stop));
        Stages {
            rounds: rounds_tx,
            feedback,
            gate,
            lease,
            published,
            _stop: stop_tx,
        }
    }

    #[tokio::test]
    async fn a_stalled_publisher_fills_the_buffers_then_drains_everything_in_order() {
        let mut s = stages();
        // With publishing stalled, the pipeline takes rounds only until its buffers are full.
        let mut sent = 0u64;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = round(3, sent * 10..sent * 10 + 10);
            match s.rounds.try_send(r) {
                Ok(()) => sent += 1,
                Err(mpsc::error::TrySendError::Full(_)) => break,
                Err(e) => panic!("{e}"),
            }
            assert!(tokio::time::Instant::now() < deadline, "never filled up");
            tokio::task::yield_now().await;
        }
        // In flight: one at the publisher, the requests buffer, one at the allocator, the
        // rounds buffer; nothing beyond.
        let most = (1 + REQUESTS_BUFFERED + 1 + ROUNDS_BUFFERED) as u64;
        assert!(sent <= most, "took {sent} rounds while stalled");
        assert!(s.published.lock().unwrap().is_empty());
        // The outage ends: everything is published, in the order it was decided.
        s.gate.send_replace(true);
        let mut answered = Vec::new();
        while answered.len() < sent as usize * 10 {
            let p = tokio::time::timeout(Duration::from_secs(10), s.feedback.recv())
                .await
                .expect("the publisher never answered")
                .expect("the publisher stopped");
            assert!(p.refused.is_empty());
            answered.extend(p.jobs);
        }
        let expected: Vec<JobId> = (0..sent * 10).collect();
        assert_eq!(answered, expected);
        assert_eq!(*s.published.lock().unwrap(), expected);
    }

    /// A pending one-cpu job of queue `normal`.
    fn one_cpu_job() -> crate::view::PendingJob {
        crate::view::PendingJob::plain("normal", 0, Resources::new(1, 0), None)
    }

    /// Regression: the publisher's answer came before the job's "dispatched" event, the job
    /// looked pending again, and the next round placed it a second time (refused at apply as
    /// a conflict, but a wasted decision).
    #[test]
    fn a_placed_job_is_not_decided_again_before_its_event_arrives() {
        use crate::view::{HostView, PendingJob, QueueView};
        let mut me = Picker::default();
        me.view.hosts.insert(
            "w1".into(),
            HostView {
                capacity: Resources::new(4, 0),
                state: xce_client::types::HostState::Ok,
                job_users: xce_client::types::JobUsers::Any,
                queues_starts: false,
            },
        );
        me.view.queues.insert(
            "normal".into(),
            QueueView {
                priority: 30,
                active: true,
            },
        );
        me.view.pending.insert(7, one_cpu_job());
        me.dirty = true;
        let first = me.decide(1).unwrap();
        assert_eq!(first.placements.len(), 1);
        let read_began = std::time::Instant::now();
        me.answered(Published {
            jobs: vec![7],
            refused: Vec::new(),
            unsent_reasons: Vec::new(),
        });
        assert_eq!(me.decide(1), None);
        assert_eq!(me.view.placed.get(&7).map(|p| p.host.as_str()), Some("w1"));
        // A full read that began before the placement applied still shows the job pending:
        // installing it must not bring the job back to be placed again.
        let mut before = me.view.clone();
        let placed = before.placed.remove(&7).unwrap();
        before.pending.insert(
            7,
            PendingJob {
                need: placed.need,
                ..one_cpu_job()
            },
        );
        assert!(me.install(view::Loaded {
            view: before.clone(),
            events_before: me.seen,
            began: read_began,
        }));
        assert_eq!(me.decide(1), None);
        assert!(me.view.placed.contains_key(&7));
        // A read that began after the confirmation shows whatever became of the job since:
        // pending again (its host lost, and its events lost in a failover), it is placed
        // again rather than looking placed forever.
        assert!(me.install(view::Loaded {
            view: before,
            events_before: me.seen,
            began: std::time::Instant::now(),
        }));
        let again = me.decide(1).expect("a requeued job stayed unplaced");
        assert_eq!(again.placements[0].id, 7);
        // A refused placement, by contrast, leaves the job to be decided again.
        me.view.pending.insert(8, one_cpu_job());
        me.dirty = true;
        let round = me.decide(1).unwrap();
        assert_eq!(round.placements[0].id, 8);
        me.answered(Published {
            jobs: vec![8],
            refused: vec![Refusal {
                id: 8,
                status: Status::Conflict,
                message: "host w1 is closed".into(),
            }],
            unsent_reasons: Vec::new(),
        });
        assert!(me.view.pending.contains_key(&8));
        assert!(me.unknown.contains(&8), "a refused job is read again");
    }

    /// An array's tasks placed in one round stay counted on their hosts from the answer
    /// until the array's event, and a task's placed event needs no read: it takes what its
    /// array's tasks take.
    #[test]
    fn an_array_s_tasks_are_counted_from_the_answer_and_read_from_their_events() {
        let mut me = Picker::default();
        me.view.hosts.insert(
            "w1".into(),
            view::HostView {
                capacity: Resources::new(3, 0),
                state: xce_client::types::HostState::Ok,
                job_users: xce_client::types::JobUsers::Any,
                queues_starts: false,
            },
        );
        me.view.queues.insert(
            "normal".into(),
            view::QueueView {
                priority: 30,
                active: true,
            },
        );
        me.view.pending.insert(
            5,
            view::PendingJob {
                array_room: Some(10),
                ..one_cpu_job()
            },
        );
        me.view.arrays.insert(
            5,
            view::ArrayView {
                need: Resources::new(1, 0),
                room: None,
                time_limit_s: None,
            },
        );
        me.dirty = true;
        let round = me.decide(1).unwrap();
        assert_eq!(round.placements.len(), 3);
        me.answered(Published {
            jobs: vec![5, 5, 5],
            refused: Vec::new(),
            unsent_reasons: Vec::new(),
        });
        // The tasks' events have not come: the host is full all the same.
        assert_eq!(me.reserved().get("w1"), Some(&Resources::new(3, 0)));
        let next = me.decide(1).unwrap();
        assert!(next.placements.is_empty(), "{next:?}");
        // Task 6's events: new (pending: read), then placed (no read needed any more).
        me.apply(&task_event(6, JobState::Pending, None));
        assert!(me.unknown.contains(&6));
        me.apply(&task_event(6, JobState::Dispatched, Some("w1")));
        assert!(!me.unknown.contains(&6));
        assert_eq!(me.view.placed.get(&6).map(|p| p.host.as_str()), Some("w1"));
        // The array's own event: its tasks count through their own events from now on (and
        // its room is read again).
        me.apply(&job_event(5, JobState::Pending));
        assert!(!me.tasks_unseen.contains_key(&5));
        assert!(me.unknown.contains(&5));
    }

    /// An event of task 0 of array 5.
    fn task_event(id: JobId, state: JobState, on: Option<&str>) -> xce_client::types::ClusterEvent {
        let mut event = job_event(id, state);
        if let xce_client::types::ClusterEvent::Job { host, task, .. } = &mut event {
            *host = on.map(String::from);
            *task = Some((5, 0));
        }
        event
    }

    fn job_event(id: JobId, state: JobState) -> xce_client::types::ClusterEvent {
        xce_client::types::ClusterEvent::Job {
            index: 0,
            id,
            state,
            host: None,
            attempt: 0,
            queue: "normal".into(),
            user: "alice".into(),
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            task: None,
        }
    }

    /// A full re-read began before some events the picker applied: the view it brings may
    /// predate them, so what they touched is read again, and nothing is decided until then.
    #[test]
    fn events_that_came_during_a_re_read_are_read_again() {
        let mut me = Picker::default();
        me.apply(&job_event(1, JobState::Done));
        let before = me.seen;
        me.apply(&job_event(2, JobState::Done));
        me.apply(&xce_client::types::ClusterEvent::Host {
            index: 0,
            name: "w1".into(),
            state: xce_client::types::HostState::Ok,
        });
        let fresh = view::Loaded {
            view: View::default(),
            events_before: before,
            began: std::time::Instant::now(),
        };
        assert!(me.install(fresh));
        assert_eq!(me.unknown, [2].into());
        assert!(me.hosts_stale && !me.queues_stale);
        assert_eq!(me.decide(1), None);
        // A read that began before the oldest event remembered must be repeated.
        me.recent.pop_front();
        me.recent.pop_front();
        let stale = view::Loaded {
            view: View::default(),
            events_before: before - 1,
            began: std::time::Instant::now(),
        };
        assert!(!me.install(stale));
    }

    #[tokio::test]
    async fn decisions_of_a_lost_lease_are_not_published() {
        let mut s = stages();
        s.gate.send_replace(true);
        s.lease.send_replace(None);
        s.rounds.send(round(3, 1..4)).await.unwrap();
        let p = tokio::time::timeout(Duration::from_secs(10), s.feedback.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p.jobs, vec![1, 2, 3]);
        assert_eq!(p.refused.len(), 3);
        assert!(s.published.lock().unwrap().is_empty());
        // Reasons of a lost lease are not sent either, and the picker hears of it (so it
        // decides them again instead of believing them published).
        let reasons = Round {
            epoch: 3,
            placements: Vec::new(),
            reasons: vec![(
                9,
                PendReason::new(
                    xce_client::types::PendCode::QueueInactive,
                    "queue normal is inactive",
                ),
            )],
        };
        s.rounds.send(reasons).await.unwrap();
        let p = s.feedback.recv().await.unwrap();
        assert_eq!(p.unsent_reasons, vec![9]);
        // And a round of an older epoch than the one held now is not published either.
        let held = Held {
            epoch: 4,
            valid_until: tokio::time::Instant::now() + Duration::from_secs(3600),
        };
        s.lease.send_replace(Some(held));
        s.rounds.send(round(3, 5..6)).await.unwrap();
        let p = s.feedback.recv().await.unwrap();
        assert_eq!(p.refused.len(), 1);
        assert!(s.published.lock().unwrap().is_empty());
    }
}
