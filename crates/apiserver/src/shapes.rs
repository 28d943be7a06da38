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
    /// The command line: the program (not blank), then its arguments; with `script`, the
    /// script's arguments (may be empty).
    #[serde(default)]
    #[schema(schema_with = command_schema)]
    pub command: Vec<String>,
    /// A job script (text, at most the controllers' `jobs.max_script_bytes`, 4 MiB by
    /// default), run with its `#!` line or `/bin/sh`, with `command` as its arguments. Its
    /// `#XCE` lines are for the CLI: here every option is a field.
    #[serde(default)]
    #[schema(min_length = 1, pattern = r"^[^\u0000]+$")]
    pub script: Option<String>,
    /// Where its stdout goes, relative to `cwd`: `%j` (id), `%x` (name), `%u` (user), `%N`
    /// (host), `%%`. Default `xce-%j.out`.
    #[serde(default)]
    #[schema(pattern = r"^([^%\u0000]|%%|%(10|[0-9])?[jxuNAa])+$")]
    pub stdout: Option<String>,
    /// Where its stderr goes (default: into the stdout file).
    #[serde(default)]
    #[schema(pattern = r"^([^%\u0000]|%%|%(10|[0-9])?[jxuNAa])+$")]
    pub stderr: Option<String>,
    /// Default: the first attempt truncates, a requeued job's later ones append.
    #[serde(default)]
    #[schema(pattern = "^(append|truncate)$")]
    pub open_mode: Option<String>,
    /// Submit it held: it starts once released (`POST /v1/jobs/{id}/release`).
    #[serde(default)]
    pub hold: Option<bool>,
    /// It starts no sooner: RFC 3339, `now+N[s|m|h|d|w]`, `HH:MM` (the next), ... (the
    /// server reads every form `xce submit --begin` does); a time past is now, empty none.
    #[serde(default)]
    #[schema(schema_with = begin_schema)]
    pub begin_time: Option<String>,
    /// `[B:]SIG[@SECONDS]`: the signal it gets that long (default 60 s) before its time
    /// limit.
    #[serde(default)]
    #[schema(schema_with = warning_schema)]
    pub signal: Option<String>,
    /// Whether it runs again when its host is lost (default true; false: it ends
    /// `node_fail`).
    #[serde(default)]
    pub requeue: Option<bool>,
    /// What it waits for, in `--dependency`'s syntax: `afterok:12:13,after:14` (all of
    /// them) or `afterany:12?afternotok:13` (any), with `after`, `afterany`, `afterok`,
    /// `afternotok`, `aftercorr` and `singleton`; each id an existing job's.
    #[serde(default)]
    #[schema(schema_with = dependency_schema)]
    pub dependency: Option<String>,
    /// Cancel it once its dependency can never be met (default: the cluster's,
    /// `jobs.kill_on_invalid_dep`).
    #[serde(default)]
    pub kill_on_invalid_dep: Option<bool>,
    /// An array of tasks, in `--array`'s syntax: `0-999`, `1,3,5-7`, `1-99:2`, with `%N`
    /// to run at most N at once; each task a job of its own once it starts (`ID_IDX`).
    #[serde(default)]
    #[schema(schema_with = array_schema)]
    pub array: Option<String>,
    /// The account the job's use is charged to (as Slurm's `--account`); none or `""`: the
    /// user's default account where the cluster has accounts, else none.
    #[serde(default)]
    #[schema(pattern = r"^[A-Za-z0-9._-]{0,64}$")]
    pub account: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Default: the cluster's default queue (`normal`).
    #[serde(default)]
    pub queue: Option<String>,
    /// Default 1.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub cpus: Option<i32>,
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub mem_mb: Option<i64>,
    #[serde(default, deserialize_with = "whole_number")]
    pub priority: Option<i32>,
    /// Environment variables the job gets (names neither empty nor holding `=`).
    #[serde(default)]
    #[schema(schema_with = env_schema)]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory (default: the home, on its host, of the account the job runs as:
    /// its user's, or the worker's own where a worker runs jobs as itself).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The job's user, honoured only while authentication is off; with it on, a job is its
    /// token's user's.
    #[serde(default)]
    #[schema(pattern = r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")]
    pub user: Option<String>,
    /// Wall-clock seconds the job may run, not counting time suspended (0 or none: no
    /// limit). At most the cluster's maximum: the controllers' `jobs.max_time_limit`, whose
    /// default (365 days) this document states; a cluster configured lower refuses more.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 0, maximum = 31536000)]
    pub time_limit_s: Option<u32>,
}

/// An optional integer that may be written as a number with no fraction (`5.0`): JSON
/// has one number type, and JSON Schema counts such numbers as integers.
fn whole_number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let whole = n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    });
    whole
        .and_then(|i| T::try_from(i).ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("{n} is not an integer in range")))
}

/// A command line's schema: at least one element, the first (the program) not blank.
fn command_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .prefix_items([ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"\S"))
            .build()])
        .items(ObjectBuilder::new().schema_type(Type::String).build())
        .build()
}

/// An environment's schema: string values under names neither empty nor holding `=`, or
/// null (none).
fn env_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, SchemaType, Type};
    let string = ObjectBuilder::new().schema_type(Type::String).build();
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[^=]+$")),
        ))
        .additional_properties(Some(AdditionalProperties::RefOr(string.into())))
        .build()
}

/// A comma-separated list of job states: its pattern made from the names of the cluster's
/// own enum, so the document cannot list a state the cluster does not know, or miss one.
fn job_states_schema() -> utoipa::openapi::schema::Object {
    names_list_schema(xce_client::types::JobState::NAMES)
}

/// A comma-separated list of job results, from the cluster's own enum likewise.
fn job_results_schema() -> utoipa::openapi::schema::Object {
    names_list_schema(xce_client::types::JobResult::NAMES)
}

fn names_list_schema(names: &[&str]) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let one = format!("({})", names.join("|"));
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^({one}(,{one})*)?$")))
        .build()
}

/// The forms of `since` the document promises (the server reads more: every form of
/// `xce_client::when`): each one a time that parses, bounded so none falls before 1970; empty
/// is no bound, as an absent one.
pub const SINCE_PATTERN: &str = concat!(
    r"^(now(\+[0-9]{1,6}[smhdw]?|-[0-9]{1,4}[smhd]?)?|today|tomorrow|midnight|noon",
    r"|([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?",
    r"|(19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])",
    r"(T([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](Z|[+-](0[0-9]|1[0-3]):[0-5][0-9])?)?)?)?$",
);

fn begin_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::Array(vec![
            Type::String,
            Type::Null,
        ]))
        .pattern(Some(SINCE_PATTERN))
        .build()
}

/// An array spec as the document promises it.
fn array_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let run = "[0-9]{1,9}(-[0-9]{1,9}(:[1-9][0-9]{0,3})?)?";
    ObjectBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::String, Type::Null]))
        .pattern(Some(format!(
            "^{run}(,{run}){{0,15}}(%[1-9][0-9]{{0,5}})?$"
        )))
        .build()
}

/// A dependency as the document promises it: Slurm's syntax, one level of `,` or `?`.
fn dependency_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let id = r"[0-9]{1,19}(_[0-9]{1,10}|_\[[0-9,:\-]{1,64}\])?";
    let term = format!("(singleton|(after|afterany|afterok|afternotok|aftercorr)(:{id}){{1,8}})");
    ObjectBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::String, Type::Null]))
        .pattern(Some(format!("^{term}([,?]{term}){{0,15}}$")))
        .build()
}

/// A signal as the document promises it: a name, upper case, with or without `SIG`, or a
/// number from 1 to 64 (the server reads any case).
pub fn signal_pattern() -> String {
    let names: Vec<&str> = xce_client::signals::names().collect();
    format!("(SIG)?({})|[1-9]|[1-5][0-9]|6[0-4]", names.join("|"))
}

fn signal_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^({})$", signal_pattern())))
        .build()
}

/// `[B:]SIG[@SECONDS]`, the seconds at most 65535.
fn warning_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let seconds = "[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]";
    ObjectBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::String, Type::Null]))
        .pattern(Some(format!(
            "^(B:)?({})(@({seconds}))?$",
            signal_pattern()
        )))
        .build()
}

/// What a submit must hold beside its other fields: a script, or a command whose program is
/// given (`command` then not empty). Joined to the request's own schema by
/// [`crate::routes::openapi`], since a struct's derived schema cannot say "one of two".
pub fn submit_needs() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, Type};
    let script = ObjectBuilder::new()
        .property("script", ObjectBuilder::new().schema_type(Type::String))
        .required("script");
    let command = ObjectBuilder::new()
        .property("command", ArrayBuilder::new().min_items(Some(1)))
        .required("command");
    AnyOfBuilder::new()
        .item(script)
        .item(command)
        .build()
        .into()
}

fn since_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(SINCE_PATTERN))
        .build()
}

/// The most jobs one page may hold (the cluster's cap).
pub const MAX_LIMIT: u32 = 5000;

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
    #[param(schema_with = job_states_schema)]
    pub state: Option<String>,
    pub queue: Option<String>,
    pub user: Option<String>,
    /// Only jobs of exactly this name.
    pub name: Option<String>,
    /// Only jobs that ended with these results, comma-separated (`failed,timeout`).
    #[param(schema_with = job_results_schema)]
    pub result: Option<String>,
    /// Only jobs submitted at or after this time: RFC 3339 (`2026-12-24T08:00:00Z`), or
    /// `now-1h`, `today`, `YYYY-MM-DD` and the other forms of `xce jobs --since`, read in
    /// the apiserver's time zone.
    #[param(schema_with = since_schema)]
    pub since: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page.
    #[param(pattern = r"^[0-9]{0,19}$")]
    pub cursor: Option<String>,
    /// Most jobs in the page (0 or none: the cluster's default page).
    #[param(minimum = 0, maximum = 5000)]
    pub limit: Option<u32>,
}

/// One page of retired jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HistoryPageJson {
    pub jobs: Vec<JobJson>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
    /// Retired jobs the answering controller's history does not hold yet (it is catching
    /// up): the page may lack some.
    pub behind: u64,
    /// History records read for this page: one that read the controller's bound holds fewer
    /// jobs than asked, and a cursor to go on from.
    pub scanned: u64,
}

/// `GET /v1/history` filters and paging, as `xce history` takes them.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    pub user: Option<String>,
    pub account: Option<String>,
    pub queue: Option<String>,
    /// Only jobs of exactly this name.
    pub name: Option<String>,
    /// Job states, comma-separated (`done,exited`).
    #[param(schema_with = job_states_schema)]
    pub state: Option<String>,
    /// Only jobs that ended with these results, comma-separated (`failed,timeout`).
    #[param(schema_with = job_results_schema)]
    pub result: Option<String>,
    /// Only an array's own record and its tasks': the array's id.
    #[param(pattern = r"^([1-9][0-9]{0,18})?$")]
    pub array: Option<String>,
    /// Only these ids: `ID` or `FIRST-LAST` (either end may be left out).
    #[param(pattern = r"^([0-9]{1,19}|[0-9]{0,19}-[0-9]{0,19})?$")]
    pub id: Option<String>,
    /// Only jobs whose `time_of` time is at or after this (the forms of `since` in
    /// `GET /v1/jobs`).
    #[param(schema_with = since_schema)]
    pub since: Option<String>,
    /// Only jobs whose `time_of` time is at or before this (the same forms).
    #[param(schema_with = since_schema)]
    pub until: Option<String>,
    /// Which time `since` and `until` bound: `submit`, `start` or `end` (the default).
    #[param(pattern = r"^(submit|start|end)?$")]
    pub time_of: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page.
    #[param(pattern = r"^[0-9]{0,19}$")]
    pub cursor: Option<String>,
    /// Most jobs in the page (0 or none: 100; at most 1000).
    #[param(minimum = 0, maximum = 1000)]
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

/// `PATCH /v1/jobs/{id}`: what to change; the fields not given are kept. A pending job takes
/// any; a running one only `time_limit_s` (a user lowers their job's priority and time
/// only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    pub priority: Option<i32>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub cpus: Option<u32>,
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 0)]
    pub mem_mb: Option<u64>,
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1, maximum = 31536000)]
    pub time_limit_s: Option<u32>,
    #[serde(default)]
    pub hold: Option<bool>,
    /// As a submit's; a time past (or empty) is now.
    #[serde(default)]
    #[schema(schema_with = begin_schema)]
    pub begin_time: Option<String>,
    /// An array's new limit of tasks running at once (its `%N`), on the whole array only.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub throttle: Option<u32>,
}

/// `POST /v1/jobs/{id}/signal`: a signal for a running job's processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A name (`USR1`, `SIGUSR1`) or a number, 1 to 64.
    #[schema(schema_with = signal_schema)]
    pub signal: String,
    /// To its leading process (the batch shell) alone, not its whole process group.
    #[serde(default)]
    pub leader_only: bool,
}

/// `GET /v1/jobs/{id}/script`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScriptJson {
    pub id: u64,
    /// The script as submitted (bytes that are not UTF-8 replaced).
    pub script: String,
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
    /// The controllers it tries (`name=host:port`): the cluster's members as the primary
    /// last reported them, learned as they change.
    pub controllers: Vec<String>,
    /// What an operator should know even while ready (authentication off).
    pub warning: Option<String>,
}

/// `/healthz`: the process is alive (it says nothing of the cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthJson {
    pub status: String,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Every `since` the document allows is one the server reads.
        #[test]
        fn every_since_the_document_allows_parses(
            since in proptest::string::string_regex(
                super::SINCE_PATTERN.trim_start_matches('^').trim_end_matches('$'),
            ).unwrap(),
        ) {
            if since.is_empty() {
                return Ok(());
            }
            let now = xce_client::when::now_ms();
            let read = xce_client::when::parse(&since, now, xce_client::when::TimeOfDay::Last);
            prop_assert!(read.is_ok(), "{since:?}: {read:?}");
        }
    }
}
