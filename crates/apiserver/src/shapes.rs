//! The HTTP API's own request and response types (the resources themselves are the shared
//! shapes of `xce_client::json`). Typed, so that the OpenAPI document is generated from them
//! and cannot drift.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use xce_client::json::JobJson;

/// `POST /v1/jobs`: a job to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The command line: the program, then its arguments.
    pub command: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Default: the cluster's default queue (`normal`).
    #[serde(default)]
    pub queue: Option<String>,
    /// Default 1.
    #[serde(default)]
    pub cpus: Option<i32>,
    #[serde(default)]
    pub mem_mb: Option<i64>,
    #[serde(default)]
    pub priority: Option<i32>,
    /// Environment variables the job gets.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory (default: the user's home on the host).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The job's user, honoured only while authentication is off; with it on, a job is its
    /// token's user's.
    #[serde(default)]
    pub user: Option<String>,
}

/// What a submit made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmitResponse {
    pub id: u64,
    /// The job right after the submit.
    pub job: Option<JobJson>,
}

/// One page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobPageJson {
    pub jobs: Vec<JobJson>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /v1/jobs` filters and paging.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListJobsQuery {
    /// Job states, comma-separated (`pending,running`).
    pub state: Option<String>,
    pub queue: Option<String>,
    pub user: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Most jobs in the page (the cluster caps it).
    pub limit: Option<u32>,
}

/// `GET /v1/events` filters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only this job's events.
    pub job: Option<u64>,
    /// Only the events of this user's jobs.
    pub user: Option<String>,
    /// Kinds, comma-separated (`job,host,queue`); resync items always come.
    pub kind: Option<String>,
}

/// An action taken on a job, queue or host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ActionJson {
    /// The job id, queue name or host name.
    pub target: String,
    pub action: String,
}

/// `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReadyJson {
    pub ready: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// Whether requests need a user token. `false` is a development setup: anyone who
    /// reaches the apiserver acts as an operator.
    pub authentication: bool,
    /// The controller the apiserver is connected to.
    pub connected_to: Option<String>,
    /// What an operator should know even while ready (authentication off).
    pub warning: Option<String>,
}

/// `/healthz`: the process is alive (it says nothing of the cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthJson {
    pub status: String,
}
