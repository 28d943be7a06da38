//! Pushes to workers, driven by the state machine's event stream: the ready primary carries
//! every [`Push`] an applied entry emitted (a start after a dispatch or a resync, a kill,
//! suspend or resume after an operator's command) to the host's agent. No RPC handler pushes
//! by itself, so changes the primary's own tasks propose push like any other.
//!
//! Runs on the service's `LocalSet` (agent capabilities are `!Send`). Each host has its own
//! FIFO task, so a slow or dead worker delays only its own orders and a suspend is never
//! overtaken by the resume that follows it. A push that does not arrive is repaired by the
//! worker's next resync (every join, and every `--resync-ms`); a new time limit, which no
//! resync carries, is sent again at each join ([`Agents::resend_limits`]).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};
use xce_client::types::{Job, JobOrder, JobState};
use xce_client::wire;
use xce_proto::xce_capnp::agent;
use xce_proto::Status;

use crate::node::Node;
use crate::state::{Event, Push};

/// How long the primary waits for a worker's agent to take a request.
const AGENT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The agent capability of every worker that joined this node, by host name. capnp
/// capabilities are `!Send`, so the registry lives on the service's thread and is shared by
/// its connections.
#[derive(Clone, Default)]
pub struct Agents {
    agents: Rc<RefCell<HashMap<String, agent::Client>>>,
    /// The hosts whose worker's last join said it holds starts back (dispatch ahead).
    queue_starts: Rc<RefCell<HashSet<String>>>,
    /// The hosts whose current agent answered that it has no `startJobs` (an older build):
    /// sent one start per call until their worker joins again.
    single_starts: Rc<RefCell<HashSet<String>>>,
    limits: Rc<RefCell<NewLimits>>,
}

/// The new time limits of running attempts (`xce update --time`), by host and job: each a
/// push of its own, once, which its worker may miss (cut off, or a failover between the change
/// and its push). Every node keeps them from the entries it applies, as primary or standby, so
/// whichever is primary sends a host's again at each of its joins; an attempt's goes when the
/// job ends or moves to another attempt. Few: only jobs whose limit changed while they ran.
type NewLimits = HashMap<String, HashMap<u64, (u32, Option<u32>)>>;

impl Agents {
    /// Keeps the agent a worker passed at join (replacing the one of an earlier join).
    pub fn set(&self, host: &str, agent: agent::Client) {
        self.agents.borrow_mut().insert(host.to_string(), agent);
        // A new join may come from an upgraded worker.
        self.single_starts.borrow_mut().remove(host);
    }

    /// Notes whether the worker of `host`, as it joined now, holds starts back until room
    /// frees (so that the scheduler sends it jobs ahead of its slots only then).
    pub fn set_queues_starts(&self, host: &str, queues: bool) {
        let mut hosts = self.queue_starts.borrow_mut();
        if queues {
            hosts.insert(host.to_string());
        } else {
            hosts.remove(host);
        }
    }

    /// Whether the worker of `host` said at its last join here that it holds starts back.
    pub fn queues_starts(&self, host: &str) -> bool {
        self.queue_starts.borrow().contains(host)
    }

    fn get(&self, host: &str) -> Option<agent::Client> {
        self.agents.borrow().get(host).cloned()
    }

    /// Keeps what the events of an applied entry say of new limits.
    fn note(&self, event: &Event) {
        let mut limits = self.limits.borrow_mut();
        match event {
            Event::Push(Push::TimeLimit {
                host,
                id,
                attempt,
                time_limit_s,
            }) => {
                limits
                    .entry(host.clone())
                    .or_default()
                    .insert(*id, (*attempt, *time_limit_s));
            }
            // Every applied job change comes here, on every node: nothing to look at is the
            // common case.
            Event::Job { .. } if limits.is_empty() => {}
            Event::Job {
                id, state, attempt, ..
            } => {
                for jobs in limits.values_mut() {
                    if jobs
                        .get(id)
                        .is_some_and(|(a, _)| state.is_final() || a != attempt)
                    {
                        jobs.remove(id);
                    }
                }
                limits.retain(|_, jobs| !jobs.is_empty());
            }
            _ => {}
        }
    }

    /// Sends the host's new limits again, as its join was just answered.
    pub fn resend_limits(&self, host: &str) {
        let again: Vec<(u64, u32, Option<u32>)> = self
            .limits
            .borrow()
            .get(host)
            .map(|jobs| jobs.iter().map(|(id, (a, l))| (*id, *a, *l)).collect())
            .unwrap_or_default();
        for (id, attempt, limit) in again {
            let (agents, host) = (self.clone(), host.to_string());
            tokio::task::spawn_local(async move {
                set_time_limit(&agents, &host, id, attempt, limit).await;
            });
        }
    }
}

/// Follows the event stream and hands every push to its host's queue, while this node is
/// the ready primary. Runs until the stream closes.
pub async fn run(node: Arc<Node>, agents: Agents) {
    let mut events = node.events();
    let mut hosts: HashMap<String, mpsc::UnboundedSender<Push>> = HashMap::new();
    loop {
        let published = match events.recv().await {
            Ok(p) => p,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                warn!(missed, "pushes fell behind the applied log; the workers' next resync repairs what was missed");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        for event in &published.events {
            agents.note(event);
        }
        // Entries applied as a standby, or before this primary's barrier, are not ours to
        // push: the workers rejoin the new primary and its resync re-sends what they lack.
        if node.gate().is_err() {
            continue;
        }
        for event in &published.events {
            let Event::Push(push) = event else { continue };
            let queue = hosts
                .entry(push.host().to_string())
                .or_insert_with(|| spawn_host_queue(node.clone(), agents.clone()));
            if queue.send(push.clone()).is_err() {
                warn!(host = push.host(), "push queue of the host is gone");
            }
        }
    }
}

/// One host's pushes, carried out in order; starts queued together go out in one call.
fn spawn_host_queue(node: Arc<Node>, agents: Agents) -> mpsc::UnboundedSender<Push> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Push>();
    tokio::task::spawn_local(async move {
        // The push after a run of starts, taken from the queue to end the run.
        let mut next: Option<Push> = None;
        loop {
            let push = match next.take() {
                Some(push) => push,
                None => match rx.recv().await {
                    Some(push) => push,
                    None => return,
                },
            };
            if !still_primary(&node, &push) {
                continue;
            }
            match push {
                Push::Start { host, id, attempt } => {
                    let mut run = vec![(id, attempt)];
                    while let Ok(more) = rx.try_recv() {
                        match more {
                            Push::Start { id, attempt, .. } => run.push((id, attempt)),
                            other => {
                                next = Some(other);
                                break;
                            }
                        }
                    }
                    start_all(&node, &agents, &host, &run).await
                }
                Push::Signal { host, order } => signal(&agents, &host, order).await,
                Push::SendSignal {
                    host,
                    id,
                    attempt,
                    signal,
                    leader_only,
                } => send_signal(&agents, &host, id, attempt, signal, leader_only).await,
                Push::TimeLimit {
                    host,
                    id,
                    attempt,
                    time_limit_s,
                } => set_time_limit(&agents, &host, id, attempt, time_limit_s).await,
            }
        }
    });
    tx
}

/// Whether this node may still send `push`: a push waits in its host's queue behind slower
/// ones, and a node deposed meanwhile (or frozen, past its lease) must not send it. The
/// worker may have joined the new primary, whose resync sent the job again as a newer
/// attempt; the late order would run it a second time. Says why not in the log.
fn still_primary(node: &Node, push: &Push) -> bool {
    match node.gate() {
        Ok(()) => true,
        Err(why) => {
            debug!(job = push.job(), host = push.host(), reason = %why.message, "no longer the ready primary; push dropped (the worker's resync on the new primary settles it)");
            false
        }
    }
}

/// Asks the worker on `host` to run the attempts of `run`, in order: in calls of several when
/// its worker takes them so (until it says it does not, for as long as that agent serves),
/// else one call each. A start no longer due is not sent.
async fn start_all(node: &Node, agents: &Agents, host: &str, run: &[(u64, u32)]) {
    let due: Vec<(Job, Option<Arc<[u8]>>)> = run
        .iter()
        .filter_map(|(id, attempt)| due_start(node, host, *id, *attempt))
        .collect();
    if due.is_empty() {
        return;
    }
    let Some(agent) = agents.get(host) else {
        let jobs: Vec<u64> = due.iter().map(|(job, _)| job.id).collect();
        warn!(?jobs, %host, "no agent for the host on this primary; the jobs wait for its worker to rejoin");
        return;
    };
    for chunk in in_calls(&due) {
        start_chunk(agents, &agent, host, chunk).await;
    }
}

/// Most bytes of jobs and scripts one `startJobs` call carries, far below what a worker's
/// connection reads in one message (a script alone may be 16 MiB).
const START_CALL_BYTES: usize = 8 << 20;
/// Most starts one `startJobs` call carries.
const START_CALL_JOBS: usize = 256;

/// `due` cut into runs that each fit one call: at most [`START_CALL_JOBS`] starts and, but
/// for a single start, [`START_CALL_BYTES`] of scripts, environments and commands.
fn in_calls<T: AsRef<[u8]>>(due: &[(Job, Option<T>)]) -> Vec<&[(Job, Option<T>)]> {
    let size = |(job, script): &(Job, Option<T>)| {
        let command: usize = job.spec.command.iter().map(String::len).sum();
        script.as_ref().map_or(0, |s| s.as_ref().len())
            + xce_client::export::size(&job.spec.env)
            + command
            + 1024
    };
    let mut chunks = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, start) in due.iter().enumerate() {
        let n = size(start);
        if i > from && (bytes + n > START_CALL_BYTES || i - from >= START_CALL_JOBS) {
            chunks.push(&due[from..i]);
            (from, bytes) = (i, 0);
        }
        bytes += n;
    }
    if from < due.len() {
        chunks.push(&due[from..]);
    }
    chunks
}

/// Sends one run of starts that fits a call: in one `startJobs` call when there are several
/// and the host's agent takes them so (noted in `agents` when it says it does not), else one
/// call each.
async fn start_chunk(
    agents: &Agents,
    agent: &agent::Client,
    host: &str,
    due: &[(Job, Option<Arc<[u8]>>)],
) {
    let batches = !agents.single_starts.borrow().contains(host);
    if due.len() > 1 && batches {
        let mut req = agent.start_jobs_request();
        let mut list = req.get().init_starts(due.len() as u32);
        for (i, (job, script)) in due.iter().enumerate() {
            let mut start = list.reborrow().get(i as u32);
            wire::write_job(start.reborrow().init_job(), job);
            start.set_attempt(job.attempt);
            if let Some(body) = script {
                start.set_script(body);
            }
        }
        let jobs: Vec<u64> = due.iter().map(|(job, _)| job.id).collect();
        match agent_call(req.send().promise).await {
            Ok(_) => return info!(?jobs, %host, "jobs sent to their worker in one call"),
            Err(e) if e.kind == capnp::ErrorKind::Unimplemented => {
                info!(%host, "the host's worker takes one start per call (an older build)");
                agents.single_starts.borrow_mut().insert(host.to_string());
            }
            Err(e) => {
                return warn!(?jobs, %host, error = %e, "could not send the jobs to their worker")
            }
        }
    }
    for (job, script) in due {
        start_one(agent, host, job, script.as_deref()).await;
    }
}

/// The job and its script, if `attempt` of job `id` is still due to start on `host` (the job
/// may have moved on since the entry was applied) and its script is here.
fn due_start(node: &Node, host: &str, id: u64, attempt: u32) -> Option<(Job, Option<Arc<[u8]>>)> {
    let job = node.applied_job(id)?;
    if job.state != JobState::Dispatched
        || job.host.as_deref() != Some(host)
        || job.attempt != attempt
    {
        debug!(job = id, %host, state = job.state.name(), "start no longer due; not sent");
        return None;
    }
    let script = match job.spec.script {
        Some(script) => match node.applied_script(&script) {
            Some(body) => Some(body),
            None => {
                warn!(job = id, %host, %script, "the job's script is not in this primary's state; not sent");
                return None;
            }
        },
        None => None,
    };
    Some((job, script))
}

/// Asks the worker on `host` to run one attempt.
async fn start_one(agent: &agent::Client, host: &str, job: &Job, script: Option<&[u8]>) {
    let mut req = agent.start_job_request();
    wire::write_job(req.get().init_job(), job);
    req.get().set_attempt(job.attempt);
    if let Some(body) = script {
        req.get().set_script(body);
    }
    let (id, attempt) = (job.id, job.attempt);
    match agent_call(req.send().promise).await {
        Ok(_) => info!(job = id, %host, attempt, "job sent to its worker"),
        Err(e) => warn!(job = id, %host, error = %e, "could not send the job to its worker"),
    }
}

/// Sends a committed kill, suspend or resume to the attempt's worker.
async fn signal(agents: &Agents, host: &str, order: JobOrder) {
    let Some(agent) = agents.get(host) else {
        warn!(job = order.id, %host, "no agent for the host on this primary; the signal waits for its worker to rejoin");
        return;
    };
    let mut req = agent.signal_job_request();
    wire::write_order(req.get().init_order(), &order);
    let status = agent_call(req.send().promise).await.and_then(|resp| {
        let header = resp.get()?.get_header()?;
        Ok(wire::read_header(header)?.status)
    });
    match status {
        Ok(Status::Ok) => {
            info!(job = order.id, %host, attempt = order.attempt, signal = ?order.signal, "job signalled")
        }
        Ok(_) => {
            warn!(job = order.id, %host, attempt = order.attempt, "the worker does not hold the attempt; its resync will settle it")
        }
        Err(e) => warn!(job = order.id, %host, error = %e, "could not signal the job"),
    }
}

/// Sends a committed `xce signal` to the attempt's worker, once.
async fn send_signal(
    agents: &Agents,
    host: &str,
    id: u64,
    attempt: u32,
    signal: i32,
    leader_only: bool,
) {
    let Some(agent) = agents.get(host) else {
        warn!(job = id, %host, signal, "no agent for the host on this primary; the signal is not sent");
        return;
    };
    let mut req = agent.send_signal_request();
    req.get().set_job_id(id);
    req.get().set_attempt(attempt);
    req.get().set_signal(signal);
    req.get().set_leader_only(leader_only);
    let status = agent_call(req.send().promise).await.and_then(|resp| {
        let header = resp.get()?.get_header()?;
        wire::read_header(header)
    });
    match status {
        Ok(h) if h.status == Status::Ok => {
            info!(job = id, %host, attempt, signal, "job sent a signal")
        }
        Ok(h) => {
            warn!(job = id, %host, attempt, signal, message = %h.message, "the worker did not signal the job")
        }
        Err(e) => warn!(job = id, %host, error = %e, "could not signal the job"),
    }
}

/// Sends a running attempt's new time limit to its worker. One the worker missed (down, or
/// joined another primary) is sent again at its next join ([`Agents::resend_limits`]).
async fn set_time_limit(
    agents: &Agents,
    host: &str,
    id: u64,
    attempt: u32,
    time_limit_s: Option<u32>,
) {
    let Some(agent) = agents.get(host) else {
        warn!(job = id, %host, "no agent for the host on this primary; the new time limit is not sent");
        return;
    };
    let mut req = agent.set_time_limit_request();
    req.get().set_job_id(id);
    req.get().set_attempt(attempt);
    req.get().set_time_limit_s(time_limit_s.unwrap_or(0));
    let status = agent_call(req.send().promise).await.and_then(|resp| {
        let header = resp.get()?.get_header()?;
        wire::read_header(header)
    });
    match status {
        Ok(h) if h.status == Status::Ok => {
            info!(job = id, %host, attempt, time_limit_s, "job's new time limit sent")
        }
        Ok(h) => {
            warn!(job = id, %host, attempt, message = %h.message, "the worker did not take the new time limit")
        }
        Err(e) => warn!(job = id, %host, error = %e, "could not send the new time limit"),
    }
}

/// One call to a worker's agent, bounded by [`AGENT_CALL_TIMEOUT`].
async fn agent_call<T>(
    call: impl std::future::Future<Output = Result<T, capnp::Error>>,
) -> Result<T, capnp::Error> {
    tokio::time::timeout(AGENT_CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(capnp::Error::overloaded(format!(
                "the worker did not answer within {AGENT_CALL_TIMEOUT:?}"
            )))
        })
}

#[cfg(test)]
mod tests {
    use xce_client::types::JobState;

    use super::*;

    fn sized(id: u64, script_bytes: usize) -> (Job, Option<Vec<u8>>) {
        let job = Job {
            id,
            spec: xce_client::types::JobSpec::default(),
            state: JobState::Dispatched,
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            host: Some("w1".into()),
            attempt: 1,
            runs: 1,
            exit_code: None,
            signal: None,
            submit_time_ms: 0,
            start_time_ms: None,
            end_time_ms: None,
            output_dir: None,
            cancelled_by: None,
            dependency_state: None,
            array: None,
            array_task: None,
            expected_start_ms: None,
            usage: None,
            attempts: Vec::new(),
        };
        (job, (script_bytes > 0).then(|| vec![b'x'; script_bytes]))
    }

    #[test]
    fn a_run_of_starts_is_cut_into_calls_by_count_and_bytes() {
        let lens = |due: &[(Job, Option<Vec<u8>>)]| -> Vec<usize> {
            in_calls(due).iter().map(|c| c.len()).collect()
        };
        let small: Vec<_> = (0..300).map(|i| sized(i, 0)).collect();
        assert_eq!(lens(&small), vec![256, 44]);
        let big: Vec<_> = (0..5).map(|i| sized(i, 3 << 20)).collect();
        assert_eq!(lens(&big), vec![2, 2, 1]);
        // A start larger than a call still goes, alone.
        let huge = vec![sized(1, 1 << 20), sized(2, 16 << 20), sized(3, 1 << 20)];
        assert_eq!(lens(&huge), vec![1, 1, 1]);
        assert!(in_calls::<Vec<u8>>(&[]).is_empty());
    }

    fn job_event(id: u64, state: JobState, attempt: u32) -> Event {
        Event::Job {
            id,
            state,
            host: Some("w1".into()),
            attempt,
            queue: "normal".into(),
            user: String::new(),
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            task: None,
        }
    }

    /// A running job's new limit is kept for its host's next joins until the job ends or
    /// moves on to another attempt.
    #[test]
    fn a_new_limit_is_kept_until_its_attempt_is_over() {
        let agents = Agents::default();
        let limit = |id, attempt, s| {
            Event::Push(Push::TimeLimit {
                host: "w1".into(),
                id,
                attempt,
                time_limit_s: Some(s),
            })
        };
        agents.note(&limit(1, 1, 60));
        agents.note(&limit(2, 1, 90));
        agents.note(&limit(1, 1, 120));
        agents.note(&job_event(2, JobState::Running, 1));
        let kept = |a: &Agents| a.limits.borrow().get("w1").cloned().unwrap_or_default();
        assert_eq!(kept(&agents).get(&1), Some(&(1, Some(120))));
        assert_eq!(kept(&agents).get(&2), Some(&(1, Some(90))));
        agents.note(&job_event(1, JobState::Done, 1));
        agents.note(&job_event(2, JobState::Dispatched, 2));
        assert!(
            agents.limits.borrow().is_empty(),
            "{:?}",
            agents.limits.borrow()
        );
    }
}
