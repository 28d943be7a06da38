//! The apiserver's one way to the cluster. Handlers ask a [`Backend`] for a [`Call`] on
//! behalf of a [`Caller`] and get an [`Answer`]; [`ClusterBackend`] makes each call through
//! one shared xce-client (concurrent calls, no head-of-line lock) on the capability `actAs`
//! returns for the caller's token (the first call pipelined on it, later ones on the kept
//! capability), so the controller applies the caller's own permissions. Tests put a
//! scripted backend behind the same trait.
//!
//! Health: the client's degraded breaker makes requests fail fast (503) once a call found no
//! primary; [`ClusterBackend::watch`] probes the cluster in the background, which rejoins
//! after a failover that no request noticed and clears the breaker as soon as a primary
//! serves again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use xce_client::ops::{
    self, ActAs, ControlHost, ControlJob, ControlQueue, ControlTasks, GetCluster, GetJob,
    GetScript, GetTask, ListHosts, ListJobs, ListQueues, Op, SignalJob, SubmitJob, Submitted,
    UpdateJob,
};
use xce_client::tokens::Token;
use xce_client::types::{
    ClusterInfo, Host, HostAction, Job, JobAction, JobChanges, JobFilter, JobId, JobPage, JobSpec,
    Queue, QueueAction, RequestToken, Role,
};
use xce_client::{Client, ClientConfig, ClientError, ConnectOptions};

use crate::config::Config;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Whom a request acts for.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The person a user token names; the controller checks it on every call.
    Token(Token),
    /// No token: only with authentication off, where the controller lets it act as an
    /// operator with no user.
    Anonymous,
}

impl Caller {
    /// What tells callers apart for an `Idempotency-Key`: the token's id (public), or
    /// nobody's.
    pub fn key(&self) -> &str {
        match self {
            Caller::Token(t) => t.id(),
            Caller::Anonymous => "",
        }
    }

    fn token_text(&self) -> Arc<str> {
        match self {
            Caller::Token(t) => t.reveal().into(),
            Caller::Anonymous => "".into(),
        }
    }
}

/// What a handler asks of the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Submit {
        token: RequestToken,
        /// Boxed: a spec is far larger than any other call.
        spec: Box<JobSpec>,
        /// The bytes of `spec.script`.
        script: Option<Arc<[u8]>>,
    },
    GetJob(JobId),
    GetScript(JobId),
    UpdateJob {
        id: JobId,
        changes: JobChanges,
    },
    SignalJob {
        id: JobId,
        signal: i32,
        leader_only: bool,
    },
    ListJobs {
        filter: JobFilter,
        after: JobId,
        limit: u32,
    },
    /// A page of retired jobs (`/v1/history`).
    ListHistory {
        filter: xce_client::history::HistoryFilter,
        after: JobId,
        limit: u32,
    },
    ControlJob {
        id: JobId,
        action: JobAction,
    },
    /// Task `index` of an array (`/v1/jobs/42_7`).
    GetTask {
        array: JobId,
        index: u32,
    },
    /// An action on tasks of an array (`/v1/jobs/42_[1-5]/kill`), or on a whole array.
    ControlTasks {
        array: JobId,
        tasks: Option<xce_client::array::TaskSet>,
        op: xce_client::types::TaskOp,
    },
    ListQueues,
    ControlQueue {
        name: String,
        action: QueueAction,
    },
    ListHosts,
    ControlHost {
        name: String,
        action: HostAction,
    },
    Cluster,
}

/// What the cluster answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Submitted(Submitted),
    Job(Job),
    Script(Vec<u8>),
    Jobs(JobPage),
    History(xce_client::history::HistoryPage),
    Done,
    Queues(Vec<Queue>),
    Hosts(Vec<Host>),
    Cluster(ClusterInfo),
}

/// What `/readyz` reports of the backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Requests fail fast for this much longer (the last call found no primary).
    pub degraded_for: Option<Duration>,
    /// A failover happened and the apiserver has not joined the new primary yet.
    pub rejoin_due: bool,
    /// The controller the backend connection is open to.
    pub connected_to: Option<String>,
    /// Whether requests must carry a user token (TLS to the cluster is on).
    pub authentication: bool,
    /// Whether the last health check found a primary that serves.
    pub serving: bool,
    /// The controllers the backend tries (`name=host:port`): the cluster's members as the
    /// primary last reported them, which may no longer be those it was started with.
    pub controllers: Vec<String>,
}

/// The cluster, as handlers see it.
pub trait Backend: std::fmt::Debug + Send + Sync + 'static {
    /// Makes `call` for `caller`.
    fn call(&self, caller: &Caller, call: Call) -> BoxFuture<Result<Answer, ClientError>>;
    /// The backend's health, without I/O.
    fn health(&self) -> Health;
}

/// The production backend: one xce-client for every handler.
#[derive(Debug, Clone)]
pub struct ClusterBackend {
    client: Client,
    authentication: bool,
    serving: Arc<AtomicBool>,
}

impl ClusterBackend {
    /// A backend over `config`'s controllers. Its rejoin joins with role apiserver (with
    /// TLS the certificate proves it; without, it is claimed).
    pub fn new(config: &Config, tls: Option<Arc<xce_client::tls::Tls>>) -> ClusterBackend {
        let authentication = tls.is_some();
        let client = Client::new(
            config.peers.clone(),
            ClientConfig {
                connect: ConnectOptions {
                    tls,
                    ..ConnectOptions::default()
                },
                retry: config.retry,
                degraded_ttl: config.degraded_ttl,
                fail_fast_when_degraded: true,
                ..ClientConfig::default()
            },
        );
        ops::claim_role(&client, Role::Apiserver);
        ClusterBackend {
            client,
            authentication,
            serving: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The shared client (for the event subscription's settings and for tests).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Probes the cluster every `every` until dropped: the degraded breaker's half-open
    /// probe. A probe runs the rejoin first when one is due, so an apiserver that no request
    /// reached during a failover still joins the new primary; a success clears the breaker.
    /// Each successful probe also reads the cluster info, from which the client takes the
    /// current controllers: an apiserver outlives every controller it was started with,
    /// as long as they are replaced one at a time.
    pub async fn watch(self, every: Duration) {
        let mut was_ok = true;
        loop {
            let ok = match self.client.probe(ListQueues).await {
                Ok(_) => true,
                Err(e) => {
                    debug!(error = %e, "backend probe failed");
                    false
                }
            };
            if ok {
                if let Err(e) = self.client.probe(GetCluster).await {
                    debug!(error = %e, "could not read the cluster's members");
                }
            }
            self.serving.store(ok, Ordering::Release);
            if ok != was_ok {
                if ok {
                    info!(controller = ?self.client.connected_to(), "backend serves again");
                } else {
                    warn!("backend probe found no primary: requests answer 503 until it does");
                }
                was_ok = ok;
            }
            tokio::time::sleep(every).await;
        }
    }

    async fn act<O: Op>(client: Client, caller: Arc<str>, op: O) -> Result<O::Output, ClientError> {
        client.call(ActAs { token: caller, op }).await
    }
}

impl Backend for ClusterBackend {
    fn call(&self, caller: &Caller, call: Call) -> BoxFuture<Result<Answer, ClientError>> {
        let (client, who) = (self.client.clone(), caller.token_text());
        Box::pin(async move {
            Ok(match call {
                Call::Submit {
                    token,
                    spec,
                    script,
                } => {
                    // A primary of an older build would drop what it does not know.
                    xce_client::version::check(&client, &spec).await?;
                    Answer::Submitted(
                        Self::act(
                            client,
                            who,
                            SubmitJob {
                                token,
                                spec: *spec,
                                script,
                            },
                        )
                        .await?,
                    )
                }
                Call::GetJob(id) => Answer::Job(Self::act(client, who, GetJob { id }).await?),
                Call::GetScript(id) => {
                    Answer::Script(Self::act(client, who, GetScript { id }).await?)
                }
                Call::UpdateJob { id, changes } => {
                    let op = UpdateJob {
                        token: RequestToken::random(),
                        id,
                        changes,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::SignalJob {
                    id,
                    signal,
                    leader_only,
                } => {
                    let op = SignalJob {
                        token: RequestToken::random(),
                        id,
                        signal,
                        leader_only,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::ListJobs {
                    filter,
                    after,
                    limit,
                } => Answer::Jobs(
                    Self::act(
                        client,
                        who,
                        ListJobs {
                            filter,
                            after,
                            limit,
                        },
                    )
                    .await?,
                ),
                Call::GetTask { array, index } => {
                    Answer::Job(Self::act(client, who, GetTask { array, index }).await?)
                }
                Call::ListHistory {
                    filter,
                    after,
                    limit,
                } => Answer::History(
                    Self::act(
                        client,
                        who,
                        ops::ListHistory {
                            filter,
                            after,
                            limit,
                        },
                    )
                    .await?,
                ),
                Call::ControlTasks { array, tasks, op } => {
                    let op = ControlTasks {
                        token: RequestToken::random(),
                        array,
                        tasks,
                        op,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::ControlJob { id, action } => {
                    let op = ControlJob {
                        token: RequestToken::random(),
                        id,
                        action,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::ListQueues => Answer::Queues(Self::act(client, who, ListQueues).await?),
                Call::ControlQueue { name, action } => {
                    let op = ControlQueue {
                        token: RequestToken::random(),
                        name,
                        action,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::ListHosts => Answer::Hosts(Self::act(client, who, ListHosts).await?),
                Call::ControlHost { name, action } => {
                    let op = ControlHost {
                        token: RequestToken::random(),
                        name,
                        action,
                    };
                    Self::act(client, who, op).await?;
                    Answer::Done
                }
                Call::Cluster => Answer::Cluster(Self::act(client, who, GetCluster).await?),
            })
        })
    }

    fn health(&self) -> Health {
        Health {
            degraded_for: self.client.degraded_for(),
            rejoin_due: self.client.needs_rejoin(),
            connected_to: self.client.connected_to(),
            authentication: self.authentication,
            serving: self.serving.load(Ordering::Acquire),
            controllers: self
                .client
                .candidates()
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}
