//! The worker's agent: the capability a worker passes at join, through which the primary
//! reaches back into the worker (to start, signal and fence jobs as the worker issue adds
//! them). The capnp server lives on the connection's thread; it forwards every request to the
//! worker's own `Send` code through an [`AgentHandle`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use capnp::capability::Rc;
use tokio::sync::mpsc;
use xce_proto::xce_capnp::agent;

use crate::types::{Job, JobId, JobOrder};
use crate::wire::{self, ReplyHeader};

/// A request from the primary to the worker.
#[derive(Debug)]
pub enum AgentRequest {
    /// The primary checks that the agent is alive.
    Ping,
    /// Run this attempt of the job. `generation` numbers the capability it came through
    /// ([`AgentHandle::capability`]): one passed at an older join than the worker's last
    /// answered one came over a connection the worker has left (a deposed primary's late
    /// push).
    StartJob {
        job: Box<Job>,
        attempt: u32,
        generation: u64,
        /// The bytes of the job's script, for a job with one.
        script: Option<Vec<u8>>,
    },
    /// Signal one attempt's process group; the worker answers whether it holds the attempt.
    Signal {
        order: JobOrder,
        held: tokio::sync::oneshot::Sender<bool>,
    },
    /// Send `signal` to one attempt's process group, or its leading process alone (`xce
    /// signal`); the worker answers whether it holds the attempt running.
    SendSignal {
        id: JobId,
        attempt: u32,
        signal: i32,
        leader_only: bool,
        held: tokio::sync::oneshot::Sender<bool>,
    },
    /// One running attempt's new time limit (`None`: none), for its shim to keep; the worker
    /// answers whether it holds the attempt running.
    SetTimeLimit {
        id: JobId,
        attempt: u32,
        time_limit_s: Option<u32>,
        held: tokio::sync::oneshot::Sender<bool>,
    },
    /// Not from the primary: the worker's own mark ([`AgentHandle::flush`]), answered once
    /// everything queued before it has been served.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The worker's end: cheap to clone, `Send`; every joined connection gets a capability that
/// feeds the same channel.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    requests: mpsc::UnboundedSender<AgentRequest>,
    /// Capabilities handed out so far; each is numbered by the count when it was made.
    issued: Arc<AtomicU64>,
}

impl AgentHandle {
    /// A handle and the stream of requests the worker serves.
    pub fn new() -> (AgentHandle, mpsc::UnboundedReceiver<AgentRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let issued = Arc::new(AtomicU64::new(0));
        (
            AgentHandle {
                requests: tx,
                issued,
            },
            rx,
        )
    }

    /// Waits until the worker has served every request queued before this call. A call that
    /// came on the wire before a reply the caller just got is queued by then: capnp-rpc
    /// dispatches each incoming call in the same poll that reads it, and a reply reaches its
    /// caller only after that. Returns at once if the worker no longer serves requests.
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.requests.send(AgentRequest::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// The capnp capability for this handle and its number, one past the last handed out
    /// (the worker compares the numbers pushes come through with its last answered join's);
    /// call it on a connection's thread.
    pub fn capability(&self) -> (agent::Client, u64) {
        let generation = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let client = capnp_rpc::new_client(AgentServer {
            handle: self.clone(),
            generation,
        });
        (client, generation)
    }
}

struct AgentServer {
    handle: AgentHandle,
    generation: u64,
}

impl AgentServer {
    /// Hands one start, as the wire has it, to the worker.
    fn start(
        &self,
        job: xce_proto::xce_capnp::job::Reader<'_>,
        attempt: u32,
        script: &[u8],
    ) -> Result<(), capnp::Error> {
        let job = wire::read_job(job)?;
        let script = Some(script)
            .filter(|body| !body.is_empty())
            .map(<[u8]>::to_vec);
        self.handle
            .requests
            .send(AgentRequest::StartJob {
                job: Box::new(job),
                attempt,
                generation: self.generation,
                script,
            })
            .map_err(|_| capnp::Error::disconnected("the worker is shutting down".into()))
    }
}

impl agent::Server for AgentServer {
    async fn ping(
        self: Rc<Self>,
        _params: agent::PingParams,
        _results: agent::PingResults,
    ) -> Result<(), capnp::Error> {
        self.handle
            .requests
            .send(AgentRequest::Ping)
            .map_err(|_| capnp::Error::disconnected("the worker is shutting down".into()))
    }

    async fn start_job(
        self: Rc<Self>,
        params: agent::StartJobParams,
        mut results: agent::StartJobResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        self.start(p.get_job()?, p.get_attempt(), p.get_script()?)?;
        wire::write_header(results.get().init_header(), &ReplyHeader::ok());
        Ok(())
    }

    async fn start_jobs(
        self: Rc<Self>,
        params: agent::StartJobsParams,
        mut results: agent::StartJobsResults,
    ) -> Result<(), capnp::Error> {
        for start in params.get()?.get_starts()? {
            self.start(start.get_job()?, start.get_attempt(), start.get_script()?)?;
        }
        wire::write_header(results.get().init_header(), &ReplyHeader::ok());
        Ok(())
    }

    async fn signal_job(
        self: Rc<Self>,
        params: agent::SignalJobParams,
        mut results: agent::SignalJobResults,
    ) -> Result<(), capnp::Error> {
        let order = wire::read_order(params.get()?.get_order()?)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.handle
            .requests
            .send(AgentRequest::Signal { order, held: tx })
            .map_err(|_| capnp::Error::disconnected("the worker is shutting down".into()))?;
        let header = match rx.await {
            Ok(true) => ReplyHeader::ok(),
            Ok(false) => ReplyHeader::status(
                xce_proto::Status::NoEnt,
                format!("job {} attempt {}: not held here", order.id, order.attempt),
            ),
            Err(_) => {
                return Err(capnp::Error::disconnected(
                    "the worker is shutting down".into(),
                ))
            }
        };
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn send_signal(
        self: Rc<Self>,
        params: agent::SendSignalParams,
        mut results: agent::SendSignalResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let (id, attempt) = (p.get_job_id(), p.get_attempt());
        let (signal, leader_only) = (p.get_signal(), p.get_leader_only());
        let header = self
            .ask(id, attempt, |held| AgentRequest::SendSignal {
                id,
                attempt,
                signal,
                leader_only,
                held,
            })
            .await?;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn set_time_limit(
        self: Rc<Self>,
        params: agent::SetTimeLimitParams,
        mut results: agent::SetTimeLimitResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let (id, attempt) = (p.get_job_id(), p.get_attempt());
        let time_limit_s = Some(p.get_time_limit_s()).filter(|s| *s > 0);
        let header = self
            .ask(id, attempt, |held| AgentRequest::SetTimeLimit {
                id,
                attempt,
                time_limit_s,
                held,
            })
            .await?;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }
}

impl AgentServer {
    /// Hands the worker a request about one attempt and says whether it held it.
    async fn ask(
        &self,
        id: JobId,
        attempt: u32,
        request: impl FnOnce(tokio::sync::oneshot::Sender<bool>) -> AgentRequest,
    ) -> Result<ReplyHeader, capnp::Error> {
        let gone = || capnp::Error::disconnected("the worker is shutting down".into());
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.handle.requests.send(request(tx)).map_err(|_| gone())?;
        Ok(match rx.await.map_err(|_| gone())? {
            true => ReplyHeader::ok(),
            false => ReplyHeader::status(
                xce_proto::Status::NoEnt,
                format!("job {id} attempt {attempt}: not running here"),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_capability_is_numbered_one_past_the_last() {
        let (handle, _requests) = AgentHandle::new();
        let (_first, one) = handle.capability();
        let (_second, two) = handle.clone().capability();
        assert_eq!((one, two), (1, 2), "clones share one count");
    }

    /// A start names the capability it came through, so the worker can tell one over a
    /// connection it left from one over the connection of its last join.
    #[test]
    fn a_start_carries_the_number_of_its_capability() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (handle, mut requests) = AgentHandle::new();
        tokio::task::LocalSet::new().block_on(&runtime, async move {
            let (older, _) = handle.capability();
            let _newer = handle.capability();
            let mut req = older.start_job_request();
            let job = crate::wire::tests::sample_job();
            wire::write_job(req.get().init_job(), &job);
            req.get().set_attempt(3);
            req.send().promise.await.expect("the agent answers");
            match requests.recv().await {
                Some(AgentRequest::StartJob {
                    attempt,
                    generation,
                    ..
                }) => assert_eq!((attempt, generation), (3, 1)),
                other => panic!("not a start: {other:?}"),
            }
        });
    }
}
