//! What `State::apply` emits besides its outcome: every change a daemon or a user may care
//! about, and every order the primary must carry to a worker. They come from the transition
//! helpers in `mod.rs` (one per resource), so no command can change a job, host or queue
//! without its event; the state-machine store publishes them with their log index.

use xce_client::types::{HostState, JobId, JobOrder, JobResult, JobState, PendCode};

/// One change, in apply order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A job was created, or its state, host, attempt or reasons changed.
    Job {
        id: JobId,
        state: JobState,
        host: Option<String>,
        attempt: u32,
        queue: String,
        user: String,
        pend_reason: Option<String>,
        pend_code: Option<PendCode>,
        reason: Option<String>,
        result: Option<JobResult>,
        /// A task of an array: the array's id and the task's index (`ID_IDX`).
        task: Option<(JobId, u32)>,
    },
    /// A host registered, or its reported state changed.
    Host { name: String, state: HostState },
    /// A queue was defined, or its priority or flags changed.
    Queue {
        name: String,
        priority: i32,
        open: bool,
        active: bool,
    },
    /// Something the ready primary must ask a worker's agent to do.
    Push(Push),
    /// A job left the state for history, numbered `seq` (`retire`); with its script's
    /// bytes, which the state may drop. The state machine writes it to the history store.
    Retired {
        seq: u64,
        job: std::sync::Arc<xce_client::types::Job>,
        script: Option<std::sync::Arc<[u8]>>,
    },
}

/// An order for a worker, carried out by the ready primary after the change is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// Run attempt `attempt` of job `id` (a dispatch, or a start its worker never got).
    Start {
        host: String,
        id: JobId,
        attempt: u32,
    },
    /// Kill, suspend or resume one attempt's process group.
    Signal { host: String, order: JobOrder },
    /// Send `signal` to one attempt's process group (or its leading process alone).
    SendSignal {
        host: String,
        id: JobId,
        attempt: u32,
        signal: i32,
        leader_only: bool,
    },
    /// One attempt's time limit changed while it runs (`None`: unlimited).
    TimeLimit {
        host: String,
        id: JobId,
        attempt: u32,
        time_limit_s: Option<u32>,
    },
}

impl Push {
    /// The host whose worker gets the order.
    pub fn host(&self) -> &str {
        match self {
            Push::Start { host, .. }
            | Push::Signal { host, .. }
            | Push::SendSignal { host, .. }
            | Push::TimeLimit { host, .. } => host,
        }
    }

    /// The job the order is about.
    pub fn job(&self) -> u64 {
        match self {
            Push::Start { id, .. } | Push::SendSignal { id, .. } | Push::TimeLimit { id, .. } => {
                *id
            }
            Push::Signal { order, .. } => order.id,
        }
    }
}
