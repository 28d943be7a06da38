//! The user commands: each builds one typed op and runs it through the failover client.

use std::time::Duration;

use clap::Args;
use xce_client::events::EventStream;
use xce_client::ops::{
    claim_role, list_jobs, ControlHost, ControlJob, ControlQueue, ControlTasks, Dispatch,
    GetCluster, GetJob, GetScript, GetTask, ListHosts, ListQueues, SignalJob, Submit, UpdateJob,
};
use xce_client::transport::CapnpTransport;
use xce_client::types::{
    EventFilter, EventKind, HostAction, JobAction, JobChanges, JobFilter, JobResult, JobSpec,
    JobState, Limits, RequestToken, Resources, Role, TaskOp,
};
use xce_client::when;
use xce_client::{parse_candidates, Client, ClientConfig, ClientError};

use crate::columns;
use crate::hint::Hint;
use crate::output::{self, fail};
use crate::{Cli, Command, Format};

/// Submit a job: xce submit [options] SCRIPT [ARGS...] | < SCRIPT | --wrap CMD | -- CMD [ARGS...]
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SubmitArgs {
    /// Queue (default: the cluster's default queue, `normal`).
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// CPUs the job needs.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    cpus: i64,
    /// Memory the job needs, in MiB.
    #[arg(long = "mem-mb", default_value_t = 0, allow_negative_numbers = true)]
    mem_mb: i64,
    /// Wall-clock time the job may run, not counting time suspended: MM, MM:SS, HH:MM:SS,
    /// D-HH, D-HH:MM or D-HH:MM:SS (as Slurm's --time; a bare number is minutes); 0 or
    /// UNLIMITED for none. At the limit it gets SIGTERM, then SIGKILL after the worker's
    /// kill grace, and ends `exited` with result `timeout`.
    #[arg(long, short = 't', value_name = "TIME")]
    time: Option<String>,
    /// Job name.
    #[arg(long, short = 'J')]
    name: Option<String>,
    /// Priority within the queue; higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Working directory (default: the current directory).
    #[arg(long)]
    cwd: Option<String>,
    /// An environment variable for the job, NAME=VALUE (repeatable); set after --export's.
    #[arg(long = "env", short = 'e', value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Which of this shell's variables the job gets: ALL (the default: all but those bound
    /// to this host or session, like HOSTNAME, SSH_AUTH_SOCK, DISPLAY), NONE, or a list of
    /// NAME and NAME=VALUE items, which may begin with ALL (as Slurm's --export).
    #[arg(long, value_name = "ALL|NONE|NAME[=VALUE],...")]
    export: Option<String>,
    /// Wait until the job has ended and exit with its exit code (128 + the signal that killed
    /// it; 1, with the reason, when it was killed, lost or never ran).
    #[arg(long)]
    wait: bool,
    /// Print the job id alone (what scripts parse, as `sbatch --parsable`).
    #[arg(long)]
    parsable: bool,
    /// Run CMD as a `#!/bin/sh` script (as `sbatch --wrap`).
    #[arg(long, value_name = "CMD")]
    wrap: Option<String>,
    /// Where the job's stdout goes, relative to its working directory: %j (job id), %x
    /// (name), %u (user), %N (host), %% (default: xce-%j.out, as Slurm's slurm-%j.out).
    #[arg(long, value_name = "PATTERN")]
    stdout: Option<String>,
    /// Where its stderr goes, with the same letters (default: into the stdout file).
    #[arg(long, value_name = "PATTERN")]
    stderr: Option<String>,
    /// append or truncate the output files (default: the first attempt truncates them, a
    /// requeued job's later attempts append).
    #[arg(long, value_name = "append|truncate", value_parser = open_modes())]
    open_mode: Option<xce_client::types::OpenMode>,
    /// Submit the job held: it starts only once `xce release` lets it.
    #[arg(long)]
    hold: bool,
    /// Start no sooner than TIME: now+N[s|m|h|d|w], HH:MM[:SS] (the next one), today,
    /// tomorrow, YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (local time) or RFC 3339. A time past is
    /// now.
    #[arg(long, value_name = "TIME")]
    begin: Option<String>,
    /// Send SIG that many seconds (default 60) before the time limit; B: to the job's
    /// leading process (the batch shell) alone, as Slurm's --signal.
    #[arg(long, value_name = "[B:]SIG[@SECONDS]")]
    signal: Option<String>,
    /// Run the job again when its host is lost (the default).
    #[arg(long, overrides_with = "no_requeue")]
    requeue: bool,
    /// End the job node_fail when its host is lost, rather than run it again.
    #[arg(long, overrides_with = "requeue")]
    no_requeue: bool,
    /// Start only once these jobs have gone their way (as Slurm's --dependency):
    /// after:ID (started), afterany:ID (ended), afterok:ID (completed), afternotok:ID
    /// (ended otherwise, having run), singleton (no other job of this name and user
    /// running); several ids as afterok:1:2; joined by , (all) or ? (any).
    #[arg(long, short = 'd', value_name = "TYPE:ID[:ID...][,|?...]")]
    dependency: Option<String>,
    /// yes: cancel the job once its dependency can never be met; no: leave it pending,
    /// saying why (default: the cluster's, jobs.kill_on_invalid_dep).
    #[arg(long, value_name = "yes|no", value_parser = yes_no)]
    kill_on_invalid_dep: Option<bool>,
    /// Submit an array of tasks, one per index (as Slurm's --array): 0-999, 1,3,5-7,
    /// 1-99:2, with %N to run at most N at once. Each task sees XCE_ARRAY_TASK_ID; %A and %a
    /// in --stdout name the array and the task.
    #[arg(long, short = 'a', value_name = "INDICES[%N]")]
    array: Option<String>,
    /// Charge the job's use to this account (as Slurm's --account); default: your default
    /// account where the cluster has accounts.
    #[arg(long, short = 'A', value_name = "ACCOUNT")]
    account: Option<String>,
    /// The job script (read now: it may be gone once submitted) and its arguments; without
    /// one, the script is read from standard input.
    #[arg(value_name = "SCRIPT", allow_hyphen_values = true)]
    script: Vec<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `xce submit`'s options as a command of their own: what a script's `#XCE` directives are
/// parsed as, together, a later one overriding an earlier one.
#[derive(Debug, clap::Parser)]
#[command(name = "submit", args_override_self = true)]
pub struct SubmitOptions {
    #[command(flatten)]
    pub args: SubmitArgs,
}

/// The submit arguments of a script's directives and the command line's options: a
/// directive holds options only. For tests: parses `command_line` as `xce submit`'s.
#[cfg(test)]
pub fn submit_args_of(
    script: &str,
    command_line: &[String],
) -> Result<SubmitArgs, crate::directives::ParseError> {
    use clap::{CommandFactory, FromArgMatches};
    let line = std::iter::once("submit".to_string()).chain(command_line.iter().cloned());
    let matches = SubmitOptions::command()
        .try_get_matches_from(line)
        .map_err(crate::directives::ParseError::CommandLine)?;
    let given = SubmitOptions::from_arg_matches(&matches)
        .map_err(crate::directives::ParseError::CommandLine)?;
    with_directives(script, given.args, &matches)
}

/// `given` (the command line, as `matches` parsed it) over the options of `script`'s
/// directives: an option given on the command line overrides the script's, a repeatable one
/// (`-e`) adds to them, as if the command line came after the directives.
pub fn with_directives(
    script: &str,
    given: SubmitArgs,
    matches: &clap::ArgMatches,
) -> Result<SubmitArgs, crate::directives::ParseError> {
    use crate::directives::{extract, parse_with, ParseError};
    let directives = extract(script).map_err(ParseError::Directive)?;
    if directives.is_empty() {
        return Ok(given);
    }
    let options_only = |o: &SubmitOptions| match (&o.args.command[..], &o.args.script[..]) {
        ([], []) if o.args.wrap.is_none() => Ok(()),
        _ => Err("a directive holds options only, never the command or a script".to_string()),
    };
    let written = parse_with(&directives, &[], options_only).map(|o: SubmitOptions| o.args)?;
    Ok(overridden(written, given, matches))
}

/// The script's options, each replaced by the command line's where the command line gave it.
fn overridden(written: SubmitArgs, line: SubmitArgs, matches: &clap::ArgMatches) -> SubmitArgs {
    let given = |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    // Every field named: one added to the options fails to compile here until it is merged.
    let SubmitArgs {
        queue,
        cpus,
        mem_mb,
        time,
        name,
        priority,
        cwd,
        env,
        export,
        wait,
        parsable,
        wrap,
        stdout,
        stderr,
        open_mode,
        hold,
        begin,
        signal,
        requeue,
        no_requeue,
        dependency,
        kill_on_invalid_dep,
        array,
        account,
        script,
        command,
    } = line;
    macro_rules! pick {
        ($field:ident) => {
            if given(stringify!($field)) {
                $field
            } else {
                written.$field
            }
        };
    }
    // The pair overrides as one: the last of them said wins.
    let requeue_given = given("requeue") || given("no_requeue");
    SubmitArgs {
        queue: pick!(queue),
        cpus: pick!(cpus),
        mem_mb: pick!(mem_mb),
        time: pick!(time),
        name: pick!(name),
        priority: pick!(priority),
        cwd: pick!(cwd),
        env: written.env.into_iter().chain(env).collect(),
        export: pick!(export),
        wait: pick!(wait),
        parsable: pick!(parsable),
        wrap,
        stdout: pick!(stdout),
        stderr: pick!(stderr),
        open_mode: pick!(open_mode),
        hold: pick!(hold),
        begin: pick!(begin),
        signal: pick!(signal),
        requeue: if requeue_given {
            requeue
        } else {
            written.requeue
        },
        no_requeue: if requeue_given {
            no_requeue
        } else {
            written.no_requeue
        },
        dependency: pick!(dependency),
        kill_on_invalid_dep: pick!(kill_on_invalid_dep),
        array: pick!(array),
        account: pick!(account),
        script,
        command,
    }
}

/// List jobs.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs in this queue.
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// Only jobs in these states (repeatable).
    #[arg(long, value_parser = job_states())]
    state: Vec<JobState>,
    /// Only jobs of this user.
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Only jobs of exactly this name.
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Only jobs that ended with these results (repeatable).
    #[arg(long, value_parser = job_results())]
    result: Vec<JobResult>,
    /// Only jobs submitted at or after TIME: now-1h, today, 08:00 (the last one), YYYY-MM-DD,
    /// YYYY-MM-DDTHH:MM[:SS] (local time) or RFC 3339.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// The text table's columns, comma-separated, as `sacct --format`: any of id, name,
    /// state, result, queue, user, host, cpus, mem_mb, time_limit, priority, submit, start,
    /// end, expected_start, account, attempt, runs, exit_code, elapsed, cpu_time,
    /// max_rss_mb, pend_code, reason, command.
    #[arg(long, value_name = "COLUMNS", default_value = columns::DEFAULT)]
    format: String,
    /// Pending jobs with when each is expected to start, where the scheduler reserved it a
    /// start (as `squeue --start`): columns id, user, queue, expected_start, pend_code, reason.
    #[arg(long, conflicts_with_all = ["state", "format"])]
    start: bool,
    /// At most this many jobs (the lowest ids first); all of them by default.
    #[arg(long)]
    limit: Option<usize>,
    /// Each task still waiting in an array on a line of its own (ARRAY_INDEX), as squeue
    /// --array does, instead of one line for them all (ARRAY_[INDICES]).
    #[arg(long, short = 'r')]
    expand: bool,
}

/// Stream state changes (jobs, hosts, queues) until Ctrl-C, across failovers; with -o json
/// one JSON object per line, a `resync` line after a failover.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only these kinds (repeatable): job, host, queue.
    #[arg(long)]
    kind: Vec<EventKind>,
}

/// The CLI's client budget: patient enough to ride out a failover, short enough that a dead
/// cluster is reported within seconds (about 10 s with the default backoff).
pub fn cli_client_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.retry.max_attempts = 8;
    config
}

/// The client settings every command shares: `--tls-*` and the caller's token (`XCE_TOKEN`
/// or the token file), each failing the command with a message naming the bad input.
fn client_config(cli: &Cli, mut config: ClientConfig) -> ClientConfig {
    config.connect.tls = tls_of(cli);
    config.token = xce_client::tokens::load_token()
        .unwrap_or_else(|e| fail(cli.output, "auth", &e.to_string()));
    config
}

/// A client over `--peers`, started at the candidate that answered the last command given the
/// same list (the primary hint), and that hint, to be updated once the command has an answer.
pub(crate) fn client(cli: &Cli) -> (Client, Hint) {
    let Some(peers) = cli.peers.as_deref() else {
        fail(
            cli.output,
            "invalid",
            "no controllers given: use --peers or set XCE_PEERS (xce dev prints it)",
        )
    };
    match parse_candidates(peers) {
        Ok(list) => {
            let config = client_config(cli, cli_client_config());
            let claims = config.connect.tls.is_none() && config.token.is_none();
            let transport = CapnpTransport {
                connect: config.connect.clone(),
                on_caller_thread: true,
            };
            let client = Client::with_transport(list, config, transport);
            if let Some(role) = claims.then(|| claimed_role(&cli.command)).flatten() {
                // Authentication is off (no certificate, no token): the CLI says who it is.
                claim_role(&client, role);
            }
            let hint = Hint::load(peers);
            if let Some(addr) = &hint.addr {
                client.set_hint(addr);
            }
            (client, hint)
        }
        Err(e) => fail(cli.output, "invalid", &format!("--peers: {e}")),
    }
}

/// The CLI's TLS setup from `--tls-*` / `XCE_TLS_*`; a bad setting ends the command with a
/// message naming the file.
fn tls_of(cli: &Cli) -> Option<std::sync::Arc<xce_client::tls::Tls>> {
    let loaded = cli
        .tls
        .resolve(&xce_client::tls::TlsFile::default())
        .and_then(|paths| paths.map(xce_client::tls::Tls::load).transpose());
    loaded.unwrap_or_else(|e| fail(cli.output, "invalid", &e.to_string()))
}

/// Remembers which candidate answered, for the next command.
pub(crate) fn remember(c: &Client, hint: &Hint) {
    if let Some(addr) = c.connected_to() {
        hint.store(&addr);
    }
}

pub(crate) fn check<T>(format: Format, r: Result<T, ClientError>) -> T {
    r.unwrap_or_else(|e| match format {
        Format::Json => fail(format, e.code(), &e.message()),
        Format::Text => fail(format, e.code(), &e.to_string()),
    })
}

/// Runs the parsed command line (`submit`: what its command line gave, to put over a
/// script's directives); returns the process exit code.
pub async fn run(cli: Cli, submit_matches: Option<&clap::ArgMatches>) -> i32 {
    let f = cli.output;
    match &cli.command {
        Command::Dev(args) => return crate::dev::run(args, f).await,
        Command::Tls(TlsCommand::Init(args)) => return tls_init(args, f),
        Command::Submit(args) => return submit(&cli, args, submit_matches).await,
        Command::Events(args) => return events(&cli, args).await,
        Command::Token(cmd) => return crate::tokens::run(&cli, cmd).await,
        Command::Admin(cmd) => return crate::admin::run(&cli, cmd).await,
        Command::History(args) => return crate::history::run(&cli, args).await,
        _ => {}
    }
    let (c, hint) = client(&cli);
    match cli.command {
        Command::Jobs(args) => {
            let format = if args.start {
                columns::START
            } else {
                &args.format
            };
            let columns = columns::parse(format).unwrap_or_else(|e| fail(f, "invalid", &e));
            let since = args.since.as_deref().map(|text| {
                when::parse(text, when::now_ms(), when::TimeOfDay::Last)
                    .unwrap_or_else(|e| fail(f, "invalid", &format!("since: {e}")))
            });
            let filter = JobFilter {
                queue: args.queue,
                states: if args.start {
                    vec![JobState::Pending]
                } else {
                    args.state
                },
                user: args.user,
                name: args.name,
                results: args.result,
                submitted_since_ms: since,
            };
            let mut printer = output::JobsPrinter::new(f, columns);
            if args.expand {
                printer = printer.expanded();
            }
            let listed = list_jobs(&c, filter, args.limit, |page| printer.page(page)).await;
            if listed.is_err() {
                // What was printed stays a whole listing; the error follows it.
                printer.abort();
            } else {
                printer.finish();
            }
            check(f, listed);
        }
        Command::Job { id, script: false } => {
            let job = job_of(&c, f, &id).await;
            output::job(f, &job);
            if f == Format::Text {
                if let Some(expr) = &job.spec.dependency {
                    conditions(&c, &job, expr).await;
                }
            }
        }
        Command::Job { id, script: true } => {
            let id = job_of(&c, f, &id).await.id;
            let body = check(f, c.call(GetScript { id }).await);
            output::script(f, id, &body);
        }
        Command::Kill { id, signal: None } => control(&c, f, &id, JobAction::Kill, "killed").await,
        Command::Kill {
            id,
            signal: Some(signal),
        } => send_signal(&c, f, &id, &signal).await,
        Command::Signal { id, signal } => send_signal(&c, f, &id, &signal).await,
        Command::Hold { ids } => {
            for id in ids {
                let changes = JobChanges {
                    hold: Some(true),
                    ..JobChanges::default()
                };
                update(&c, f, &id, changes, "held").await;
            }
        }
        Command::Release { ids } => {
            for id in ids {
                let changes = JobChanges {
                    hold: Some(false),
                    ..JobChanges::default()
                };
                update(&c, f, &id, changes, "released").await;
            }
        }
        Command::Update(args) => {
            let changes = args.changes(f);
            match args.throttle {
                Some(n) => throttle(&c, f, &args.id, changes, n).await,
                None => update(&c, f, &args.id, changes, "updated").await,
            }
        }
        Command::Suspend { id } => control(&c, f, &id, JobAction::Suspend, "suspended").await,
        Command::Resume { id } => control(&c, f, &id, JobAction::Resume, "resumed").await,
        Command::Requeue { id } => control(&c, f, &id, JobAction::Requeue, "requeued").await,
        Command::Dispatch { id, host } => {
            let op = Dispatch {
                token: RequestToken::random(),
                id,
                host: host.clone(),
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Job <{id}> is dispatched to <{host}>."));
        }
        Command::Queues => output::queues(f, &check(f, c.call(ListQueues).await)),
        Command::Queue { action, name } => {
            let op = ControlQueue {
                token: RequestToken::random(),
                name: name.clone(),
                action,
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Queue <{name}>: {}", action.name()));
        }
        Command::Hosts => output::hosts(f, &check(f, c.call(ListHosts).await)),
        Command::Host { action, name } => {
            let verb = match action {
                HostAction::Open => "opened",
                HostAction::Close => "closed",
            };
            let op = ControlHost {
                token: RequestToken::random(),
                name: name.clone(),
                action,
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Host <{name}> is {verb}."));
        }
        Command::Cluster => output::cluster(f, &check(f, c.call(GetCluster).await)),
        Command::Submit(_)
        | Command::Dev(_)
        | Command::Events(_)
        | Command::Tls(_)
        | Command::Token(_)
        | Command::History(_)
        | Command::Admin(_) => {}
    }
    remember(&c, &hint);
    0
}

/// Change a job: a pending one's name, priority, queue, cpus, memory, time or begin time; a
/// running one's time limit (operators raise it, its user may lower it).
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The job, an array (ID: every task), one task (ID_IDX) or tasks (ID_[A-B,...]).
    pub id: Target,
    /// A new name.
    #[arg(long, short = 'J')]
    name: Option<String>,
    /// A new priority within the queue (a user may only lower it).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Another queue.
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// Another number of CPUs.
    #[arg(long)]
    cpus: Option<u32>,
    /// Another amount of memory, in MiB.
    #[arg(long = "mem-mb")]
    mem_mb: Option<u64>,
    /// A new time limit, as submit's --time (a user may only lower it; an operator may
    /// raise a running job's, which goes on running).
    #[arg(long, short = 't', value_name = "TIME")]
    time: Option<String>,
    /// A new begin time, as submit's --begin (now: at once).
    #[arg(long, value_name = "TIME")]
    begin: Option<String>,
    /// An array's new limit of tasks running at once (its `%N`); tasks running above it
    /// run on.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub throttle: Option<u32>,
}

impl UpdateArgs {
    fn changes(&self, f: Format) -> JobChanges {
        let time_limit_s = self.time.as_deref().map(|text| {
            time_limit(f, Some(text)).unwrap_or_else(|| {
                fail(
                    f,
                    "invalid",
                    "time: a job's limit can be changed, not removed (give a time)",
                )
            })
        });
        let begin_time_ms = self.begin.as_deref().map(|text| begin(f, text));
        let changes = JobChanges {
            name: self.name.clone(),
            priority: self.priority,
            queue: self.queue.clone(),
            cpus: self.cpus,
            mem_mb: self.mem_mb,
            time_limit_s,
            hold: None,
            begin_time_ms,
        };
        if changes == JobChanges::default() && self.throttle.is_none() {
            fail(f, "invalid", "nothing to change: give --name, --priority, --queue, --cpus, --mem-mb, --time, --begin or --throttle");
        }
        changes
    }
}

/// A job, or tasks of an array, as commands name them: `42`, `42_7`, `42_[1-5]`.
pub type Target = xce_client::array::JobRef;

/// `op` on tasks of an array (`42_7`, `42_[1-5]`); `None` when `target` names a whole job,
/// which the caller's own request reaches (an array's own record passes it on to its tasks).
async fn on_tasks(c: &Client, f: Format, target: &Target, op: TaskOp) -> bool {
    let Some(tasks) = &target.tasks else {
        return false;
    };
    let op = ControlTasks {
        token: RequestToken::random(),
        array: target.id,
        tasks: Some(tasks.clone()),
        op,
    };
    check(f, c.call(op).await);
    true
}

async fn update(c: &Client, f: Format, target: &Target, changes: JobChanges, verb: &str) {
    let tasks = TaskOp::Update {
        changes: changes.clone(),
        throttle: None,
    };
    if !on_tasks(c, f, target, tasks).await {
        let op = UpdateJob {
            token: RequestToken::random(),
            id: target.id,
            changes,
        };
        check(f, c.call(op).await);
    }
    output::done(f, &format!("Job <{target}> is {verb}."));
}

/// `xce update ID --throttle N`: an array's new limit of tasks running at once, with any
/// other changes in the same request.
async fn throttle(c: &Client, f: Format, target: &Target, changes: JobChanges, n: u32) {
    if target.tasks.is_some() {
        fail(
            f,
            "invalid",
            &format!(
                "throttle: an array's own, not its tasks' (give {} alone)",
                target.id
            ),
        );
    }
    let op = ControlTasks {
        token: RequestToken::random(),
        array: target.id,
        tasks: None,
        op: TaskOp::Update {
            changes,
            throttle: Some(n),
        },
    };
    check(f, c.call(op).await);
    output::done(f, &format!("Job <{target}> is updated."));
}

/// `xce signal ID SIG` and `xce kill ID --signal SIG`.
async fn send_signal(c: &Client, f: Format, target: &Target, text: &str) {
    let (leader_only, name) = xce_client::signals::leader_only(text);
    let signal = xce_client::signals::parse(name)
        .unwrap_or_else(|e| fail(f, "invalid", &format!("signal: {e}")));
    let tasks = TaskOp::Signal {
        signal,
        leader_only,
    };
    if !on_tasks(c, f, target, tasks).await {
        let op = SignalJob {
            token: RequestToken::random(),
            id: target.id,
            signal,
            leader_only,
        };
        check(f, c.call(op).await);
    }
    let name = xce_client::signals::name(signal);
    output::done(f, &format!("Job <{target}> is sent {name}."));
}

async fn control(c: &Client, f: Format, target: &Target, action: JobAction, verb: &str) {
    if !on_tasks(c, f, target, TaskOp::Control { action }).await {
        let op = ControlJob {
            token: RequestToken::random(),
            id: target.id,
            action,
        };
        check(f, c.call(op).await);
    }
    output::done(f, &format!("Job <{target}> is {verb}."));
}

/// One job, or the task a target names (`42_7`: its own record once it started, else its
/// array's, in which it waits).
async fn job_of(c: &Client, f: Format, target: &Target) -> xce_client::types::Job {
    let index = match &target.tasks {
        None => None,
        Some(tasks) if tasks.len() == 1 => tasks.first(),
        Some(_) => fail(
            f,
            "invalid",
            &format!("{target}: name one task (ID_IDX) or the array (ID)"),
        ),
    };
    match index {
        None => check(f, c.call(GetJob { id: target.id }).await),
        Some(index) => check(
            f,
            c.call(GetTask {
                array: target.id,
                index,
            })
            .await,
        ),
    }
}

/// The account submitting: the name of the real uid (as batch systems record it), else
/// `$USER`, else the uid as a number.
fn submitting_user() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| uid.to_string())
}

/// Parses `NAME=VALUE`; the name must be non-empty and hold no `=`.
/// A count given on the command line, refused (exiting `invalid`, naming the option) when it
/// is negative or over `max`.
fn count(f: Format, field: &str, value: i64, max: i64) -> i64 {
    if value < 0 {
        fail(
            f,
            "invalid",
            &format!("{field}: must not be negative (got {value})"),
        );
    }
    if value > max {
        fail(
            f,
            "invalid",
            &format!("{field}: {value} is over the most, {max}"),
        );
    }
    value
}

/// The `--state` values, listed in `--help` from the enum the cluster uses: never a second
/// list to keep in step.
pub(crate) fn job_states() -> impl clap::builder::TypedValueParser<Value = JobState> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(JobState::NAMES).try_map(|s| s.parse::<JobState>())
}

/// The `--open-mode` values, from the cluster's enum likewise.
fn open_modes() -> impl clap::builder::TypedValueParser<Value = xce_client::types::OpenMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(xce_client::types::OpenMode::NAMES)
        .try_map(|s| s.parse::<xce_client::types::OpenMode>())
}

/// The `--result` values, from the cluster's enum likewise.
pub(crate) fn job_results() -> impl clap::builder::TypedValueParser<Value = JobResult> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(JobResult::NAMES).try_map(|s| s.parse::<JobResult>())
}

/// A `--time`, in seconds (`None`: no limit). Parsed here rather than by clap so that a bad
/// value is refused like every other bad field: `invalid`, in JSON under `-o json`.
fn time_limit(f: Format, given: Option<&str>) -> Option<u32> {
    let given = given?;
    match xce_client::time_limit::parse(given) {
        Ok(seconds) => seconds,
        Err(e) => fail(f, "invalid", &e.to_string()),
    }
}

/// The job's environment: this shell's variables as `--export` says, `-e` ones, and where
/// it was submitted from (`XCE_SUBMIT_DIR`, `XCE_SUBMIT_HOST`: the job's host sets them from
/// these).
fn environment(f: Format, args: &SubmitArgs) -> Vec<(String, String)> {
    use xce_client::export::{self, job_vars};
    let rules = match args.export.as_deref() {
        None => export::Export::default(),
        Some(text) => export::parse(text).unwrap_or_else(|e| fail(f, "invalid", &e.to_string())),
    };
    let mut submitter = Vec::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => submitter.push((name, value)),
            (name, _) => eprintln!(
                "xce: not exported (not UTF-8): {}",
                name.unwrap_or_else(|n| n.to_string_lossy().into_owned())
            ),
        }
    }
    let mut extra = Vec::new();
    if let Ok(dir) = std::env::current_dir() {
        extra.push((job_vars::SUBMIT_DIR.to_string(), dir.display().to_string()));
    }
    if let Ok(host) = nix::unistd::gethostname() {
        extra.push((
            job_vars::SUBMIT_HOST.to_string(),
            host.to_string_lossy().into_owned(),
        ));
    }
    extra.extend(args.env.iter().cloned());
    let env = export::environment(&rules, submitter, &extra);
    let size = export::size(&env);
    // The cluster's default limit (its own may be lower, and it says so); the shell's
    // environment is what users do not choose, so the way out is named.
    let max = xce_client::script::DEFAULT_MAX_SCRIPT_BYTES;
    if size > max && args.export.is_none() {
        fail(
            f,
            "invalid",
            &format!(
                "env: this shell's environment is {size} bytes, over the {max} a job may hold: \
                 submit with --export NONE, or --export NAME,... naming what the job needs"
            ),
        );
    }
    env
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// How often `xce submit --wait` looks at its job.
const WAIT_POLL: Duration = Duration::from_millis(200);

/// What `xce submit --wait` exits with, as `bsub -K` / `sbatch --wait` users expect: 0 when
/// done, the job's own exit code, 128 + the signal that killed it, or 1 when it ended
/// without either (killed before it started, lost, never ran).
fn wait_exit_code(job: &xce_client::types::Job) -> i32 {
    if job.state == JobState::Done {
        return 0;
    }
    match (job.exit_code, job.signal) {
        (Some(code), _) if (1..=255).contains(&code) => code,
        (_, Some(signal)) if (1..=127).contains(&signal) => 128 + signal,
        _ => 1,
    }
}

/// `xce submit --wait`'s exit code for an ended array, as `sbatch --wait`'s: 0 when every
/// task completed, else the highest of its tasks' (1 at least: a task killed before it
/// started has none of its own). Its tasks are found among its user's jobs submitted since
/// it (a task carries its array's submit time).
async fn array_exit_code(c: &Client, f: Format, array: &xce_client::types::Job) -> i32 {
    if array.state == JobState::Done {
        return 0;
    }
    let filter = JobFilter {
        user: Some(array.spec.user.clone()),
        submitted_since_ms: Some(array.submit_time_ms),
        ..JobFilter::default()
    };
    let jobs = check(f, xce_client::ops::all_jobs(c, filter).await);
    jobs.iter()
        .filter(|t| t.array_task.is_some_and(|a| a.array_id == array.id))
        .filter(|t| t.state.is_final())
        .map(wait_exit_code)
        .max()
        .unwrap_or(1)
        .max(1)
}

/// What a submit runs: a script's bytes, or (`None`) the command after `--`. The script is
/// read here, whole: it may be gone a moment after the submit returns.
fn script_body(f: Format, args: &SubmitArgs) -> Option<Vec<u8>> {
    use std::io::{IsTerminal, Read};
    let usage =
        "usage: xce submit [options] SCRIPT [ARGS...] | < SCRIPT | --wrap CMD | -- CMD [ARGS...]";
    match (&args.command[..], &args.script[..], &args.wrap) {
        ([], [], Some(command)) => Some(xce_client::script::wrap(command)),
        ([_, ..], [], None) => None,
        // A misspelt option, since what follows a script is its arguments whatever they look
        // like.
        ([], [path, ..], None) if path.starts_with('-') => fail(
            f,
            "invalid",
            &format!(
                "{path}: not an option of xce submit (and a script's path does not begin with -)"
            ),
        ),
        ([], [path, ..], None) => match std::fs::read(path) {
            Ok(body) => Some(body),
            Err(e) => fail(f, "invalid", &format!("script {path}: {e}")),
        },
        ([], [], None) if !std::io::stdin().is_terminal() => {
            let mut body = Vec::new();
            if let Err(e) = std::io::stdin().read_to_end(&mut body) {
                fail(f, "invalid", &format!("script on standard input: {e}"));
            }
            if body.is_empty() {
                fail(
                    f,
                    "invalid",
                    &format!("nothing to run: no script, command or --wrap, and standard input is empty; {usage}"),
                );
            }
            Some(body)
        }
        ([], [], None) => fail(
            f,
            "invalid",
            &format!("nothing to run: no script, command or --wrap; {usage}"),
        ),
        _ => fail(
            f,
            "invalid",
            &format!("give one of a script, --wrap or a command after --; {usage}"),
        ),
    }
}

/// The job's name when it names none: its script's file name (as `sbatch`), `wrap` for
/// `--wrap`, none for a command or a script on standard input.
fn default_name(args: &SubmitArgs) -> String {
    match (&args.wrap, args.script.first()) {
        (Some(_), _) => "wrap".to_string(),
        (None, Some(path)) => std::path::Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        (None, None) => String::new(),
    }
}

/// A `--begin`, refused with `invalid` naming it.
fn begin(f: Format, text: &str) -> u64 {
    when::parse_begin(text, when::now_ms())
        .unwrap_or_else(|e| fail(f, "invalid", &format!("begin: {e}")))
}

/// The spec fields of issue 33's options, each refused with `invalid` naming the bad input.
fn batch_options(f: Format, args: &SubmitArgs, spec: &mut JobSpec) {
    for (field, pattern) in [("stdout", &args.stdout), ("stderr", &args.stderr)] {
        if let Some(pattern) = pattern {
            if let Err(e) = xce_client::output_path::check(pattern) {
                fail(f, "invalid", &format!("{field}: {e}"));
            }
        }
    }
    spec.stdout = args.stdout.clone();
    spec.stderr = args.stderr.clone();
    spec.open_mode = args.open_mode;
    spec.hold = args.hold;
    spec.begin_time_ms = args.begin.as_deref().map(|text| begin(f, text));
    spec.warn_signal = args.signal.as_deref().map(|text| {
        xce_client::signals::parse_warning(text)
            .unwrap_or_else(|e| fail(f, "invalid", &format!("signal: {e}")))
    });
    spec.no_requeue = args.no_requeue;
    spec.dependency = args.dependency.as_deref().map(|text| {
        text.parse()
            .unwrap_or_else(|e: xce_client::dependency::DependencyError| {
                fail(f, "invalid", &e.to_string())
            })
    });
    spec.kill_on_invalid_dep = args.kill_on_invalid_dep;
    spec.account = args.account.clone().unwrap_or_default();
    spec.array = args.array.as_deref().map(|text| {
        text.parse()
            .unwrap_or_else(|e: xce_client::array::ArrayError| {
                fail(f, "invalid", &format!("array: {e}"))
            })
    });
}

/// Most tasks of one condition read one by one for `xce job`; a condition naming more is
/// shown as the controller judged the whole dependency.
const TASKS_SHOWN: u64 = 100;

/// Prints each condition of a job's dependency and where it stands, from the jobs (and
/// tasks) it names as they are now (`xce_client::dependency`, as the controller judges them).
async fn conditions(
    c: &xce_client::Client,
    job: &xce_client::types::Job,
    expr: &xce_client::dependency::Expr,
) {
    use xce_client::array::JobRef;
    use xce_client::dependency::{term_verdict, Kind, Parents, Progress, StartedAt, Term, Verdict};
    use xce_client::types::{DependencyState, Job};
    /// A job dispatched and not yet started is shown as waiting to start, as clusters of
    /// version 12 on judge it (on an older one, for the moment between a dispatch and its
    /// start, the controller may have judged it started already).
    const STARTED: StartedAt = StartedAt::Report;
    /// The jobs and tasks read, by (id, index): index `None` for a job itself.
    struct Fetched(
        std::collections::HashMap<(u64, Option<u32>), Job>,
        Option<u32>,
    );
    impl Parents for Fetched {
        fn progress(&self, of: &JobRef) -> Option<Progress> {
            let Some(named) = &of.tasks else {
                let record = self.0.get(&(of.id, None))?;
                return Some(match &record.array {
                    // A whole array: its tasks, from its counts (a task dispatched and not
                    // yet started counts as running here; the controller knows better).
                    Some(a) => Progress::of_array(a),
                    None => Progress::of_job(record, STARTED),
                });
            };
            let mut p = Progress::default();
            for i in named.iter() {
                let record = self.0.get(&(of.id, Some(i)))?;
                let one = match &record.array {
                    // The array's own record: the task waits in it, or was killed there.
                    Some(a) if a.pending.contains(i) => Progress {
                        not_started: 1,
                        ..Progress::default()
                    },
                    Some(_) => Progress {
                        unrun: 1,
                        first_unrun: Some(xce_client::dependency::Ended {
                            who: String::new(),
                            result: xce_client::types::JobResult::Cancelled,
                        }),
                        ..Progress::default()
                    },
                    None => Progress::of_job(record, STARTED),
                };
                p.add_task(one, &format!("{}_{i}", of.id));
            }
            Some(p)
        }
        // The controller judges `singleton` from what is placed: shown as it said.
        fn singleton_busy(&self) -> bool {
            false
        }
        fn own_task(&self) -> Option<u32> {
            self.1
        }
    }
    let own_task = job.array_task.map(|t| t.index);
    let mut read = std::collections::HashMap::new();
    // A parent that could not be read for another reason than being gone is said so.
    let mut unread = std::collections::HashMap::new();
    for term in expr.terms() {
        let Term::On(kind, of) = term else { continue };
        let indices: Vec<Option<u32>> = match (kind, &of.tasks) {
            (Kind::AfterCorr, _) => own_task.map(Some).into_iter().collect(),
            (_, Some(named)) if named.len() <= TASKS_SHOWN => named.iter().map(Some).collect(),
            (_, Some(_)) => Vec::new(),
            (_, None) => vec![None],
        };
        for index in indices {
            let got = match index {
                Some(index) => {
                    c.call(GetTask {
                        array: of.id,
                        index,
                    })
                    .await
                }
                None => c.call(GetJob { id: of.id }).await,
            };
            match got {
                Ok(parent) => {
                    read.insert((of.id, index), parent);
                }
                Err(xce_client::ClientError::Status {
                    status: xce_client::Status::NoEnt,
                    ..
                }) => {}
                Err(e) => {
                    unread.insert(of.id, e.to_string());
                }
            }
        }
    }
    let fetched = Fetched(read, own_task);
    // What the controller said of the whole dependency, for what is not read here.
    let as_judged = || match job.dependency_state {
        Some(DependencyState::Waiting) => Verdict::Waiting,
        Some(DependencyState::Never) => Verdict::Never(
            job.pend_reason
                .clone()
                .unwrap_or_else(|| "never satisfied".into()),
        ),
        _ => Verdict::Met,
    };
    for term in expr.terms() {
        let (text, verdict) = match term {
            Term::Singleton => ("singleton".to_string(), as_judged()),
            Term::On(kind, of) => {
                let text = format!("{}:{of}", kind.name());
                if let Some(e) = unread.get(&of.id) {
                    println!("{:<12} {text}: unknown ({e})", "condition");
                    continue;
                }
                let judged_here = match (kind, &of.tasks) {
                    (Kind::AfterCorr, _) => own_task.is_some(),
                    (_, Some(named)) => named.len() <= TASKS_SHOWN,
                    (_, None) => true,
                };
                if !judged_here {
                    // An array judged task by task, or more tasks than are read here.
                    let text = match kind {
                        Kind::AfterCorr => format!("{text} (each task after its pair)"),
                        _ => text,
                    };
                    (text, as_judged())
                } else {
                    (text, term_verdict(term, &fetched))
                }
            }
        };
        let shown = match verdict {
            Verdict::Met => "met".to_string(),
            Verdict::Waiting => "waiting".to_string(),
            Verdict::Never(why) => format!("never: {why}"),
        };
        println!("{:<12} {text}: {shown}", "condition");
    }
}

/// `yes` or `no`, as Slurm's `--kill-on-invalid-dep` takes them.
fn yes_no(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("{text:?}: expected yes or no")),
    }
}

async fn submit(cli: &Cli, given: &SubmitArgs, matches: Option<&clap::ArgMatches>) -> i32 {
    let f = cli.output;
    let body = script_body(f, given);
    let args = match (&body, matches) {
        (Some(body), Some(matches)) => {
            if let Err(e) = xce_client::script::check(body, usize::MAX) {
                fail(f, "invalid", &format!("script: {e}"));
            }
            let text = String::from_utf8_lossy(body);
            with_directives(&text, given.clone(), matches)
                .unwrap_or_else(|e| fail(f, "invalid", &e.to_string()))
        }
        _ => given.clone(),
    };
    let args = &args;
    let cwd = args.cwd.clone().unwrap_or_else(|| {
        std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    });
    let command = match &body {
        Some(_) => args.script.iter().skip(1).cloned().collect(),
        None => args.command.clone(),
    };
    let mut spec = JobSpec {
        name: args.name.clone().unwrap_or_else(|| default_name(args)),
        user: submitting_user(),
        queue: args.queue.clone().unwrap_or_default(),
        command,
        env: environment(f, args),
        cwd,
        resources: Resources::new(
            u32::try_from(count(f, "cpus", args.cpus, u32::MAX.into())).unwrap_or(u32::MAX),
            u64::try_from(count(f, "mem_mb", args.mem_mb, i64::MAX)).unwrap_or(0),
        ),
        priority: args.priority,
        limits: Limits {
            time_limit_s: time_limit(f, args.time.as_deref()),
        },
        script: body.as_deref().map(xce_client::script::ScriptId::of),
        stdout: None,
        stderr: None,
        open_mode: None,
        hold: false,
        begin_time_ms: None,
        warn_signal: None,
        no_requeue: false,
        dependency: None,
        kill_on_invalid_dep: None,
        array: None,
        account: String::new(),
    };
    batch_options(f, args, &mut spec);
    let (c, hint) = client(cli);
    // A time limit needs a cluster that knows it: a primary of an older build would drop it.
    check(f, xce_client::version::check(&c, &spec).await);
    let op = Submit {
        token: RequestToken::random(),
        spec,
        script: body.map(Into::into),
    };
    let id = check(f, c.call(op).await);
    remember(&c, &hint);
    if !args.wait {
        output::submitted(f, id, args.parsable);
        return 0;
    }
    if f == Format::Text {
        output::submitted(f, id, args.parsable);
    }
    loop {
        let job = check(f, c.call(GetJob { id }).await);
        if job.state.is_final() {
            let code = match job.array.is_some() {
                true => array_exit_code(&c, f, &job).await,
                false => wait_exit_code(&job),
            };
            if f == Format::Json {
                output::job(f, &job);
            } else if code == 0 {
                println!("Job <{id}> is done.");
            } else {
                let how = match (job.exit_code, job.signal, job.reason.as_deref()) {
                    (_, _, Some(reason)) => reason.to_string(),
                    (Some(code), _, None) => format!("exit code {code}"),
                    (None, Some(signal), None) => format!("killed by signal {signal}"),
                    (None, None, None) => "no reason recorded".to_string(),
                };
                eprintln!("Job <{id}> exited: {how}");
            }
            return code;
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Streams events until Ctrl-C (or SIGTERM). The stream has a client of its own on threads of
/// its own (it outlives any one call) with the library's default budget, and follows the
/// primary across failovers.
async fn events(cli: &Cli, args: &EventsArgs) -> i32 {
    let f = cli.output;
    let Some(peers) = cli.peers.as_deref() else {
        fail(
            f,
            "invalid",
            "no controllers given: use --peers or set XCE_PEERS",
        );
    };
    let list = match parse_candidates(peers) {
        Ok(list) => list,
        Err(e) => fail(f, "invalid", &format!("--peers: {e}")),
    };
    let client = Client::new(list, client_config(cli, ClientConfig::default()));
    let filter = EventFilter {
        kinds: args.kind.clone(),
    };
    let mut stream = check(f, EventStream::open(client, filter).await);
    let shutdown = xce_client::shutdown::signal();
    tokio::pin!(shutdown);
    loop {
        let item = tokio::select! {
            () = &mut shutdown => return 0,
            item = stream.next() => item,
        };
        let Some(item) = item else {
            fail(f, "internal", "the event stream ended");
        };
        output::stream_item(f, &item);
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_env, submit_args_of};
    use proptest::prelude::*;

    /// Options as a person writes them, each one `--name value` word pair or a flag.
    fn option() -> impl Strategy<Value = Vec<String>> {
        let value = "[a-zA-Z0-9_./:][a-zA-Z0-9_./:-]{0,7}";
        prop_oneof![
            value.prop_map(|v| vec!["--name".into(), v]),
            "[a-z]{1,6}".prop_map(|v| vec!["-q".into(), v]),
            (1..64u32).prop_map(|n| vec!["--cpus".into(), n.to_string()]),
            (0..4096u32).prop_map(|n| vec!["--mem-mb".into(), n.to_string()]),
            (-5..5i32).prop_map(|n| vec![format!("--priority={n}")]),
            "[0-9]{1,2}:[0-5][0-9]".prop_map(|v| vec!["--time".into(), v]),
            ("[A-Z]{1,4}", "[a-z ]{0,6}").prop_map(|(k, v)| vec!["-e".into(), format!("{k}={v}")]),
            Just(vec!["--wait".to_string()]),
            Just(vec!["--parsable".to_string()]),
            "[a-z/]{1,10}".prop_map(|v| vec!["--cwd".into(), v]),
            "[a-z]{1,4}-%j\\.out".prop_map(|v| vec!["--stdout".into(), v]),
            "%x\\.[a-z]{1,3}".prop_map(|v| vec!["--stderr".into(), v]),
            prop::sample::select(vec!["append", "truncate"])
                .prop_map(|v| vec!["--open-mode".into(), v.to_string()]),
            Just(vec!["--hold".to_string()]),
            (1..600u32).prop_map(|n| vec!["--begin".into(), format!("now+{n}")]),
            ("(B:)?(USR1|TERM|10)", 0..999u32)
                .prop_map(|(s, n)| vec!["--signal".into(), format!("{s}@{n}")]),
            Just(vec!["--requeue".to_string()]),
            Just(vec!["--no-requeue".to_string()]),
            prop::sample::select(vec!["ALL", "NONE", "A,B=1"])
                .prop_map(|v| vec!["--export".into(), v.to_string()]),
            "(afterok|afterany):[1-9][0-9]{0,3}(:[1-9])?".prop_map(|v| vec!["-d".into(), v]),
            prop::sample::select(vec!["yes", "no"])
                .prop_map(|v| vec![format!("--kill-on-invalid-dep={v}")]),
            "[0-9]{1,2}-[1-9][0-9]{2}(%[1-9])?".prop_map(|v| vec!["--array".into(), v]),
        ]
    }

    /// The options as `#XCE` lines, each word quoted as a shell would need.
    fn as_script(options: &[Vec<String>]) -> String {
        let mut script = String::from("#!/bin/sh\n");
        for words in options {
            let quoted: Vec<String> = words
                .iter()
                .map(|w| shlex::try_quote(w).unwrap().into_owned())
                .collect();
            script.push_str(&format!("#XCE {}\n", quoted.join(" ")));
        }
        script.push_str("echo done\n");
        script
    }

    proptest! {
        /// Directives give the spec the same options on the command line give, and the
        /// command line overrides them as if it came after them.
        #[test]
        fn directives_and_the_command_line_give_the_same_spec(
            written in proptest::collection::vec(option(), 0..8),
            given in proptest::collection::vec(option(), 0..4),
        ) {
            let flat = |o: &[Vec<String>]| o.iter().flatten().cloned().collect::<Vec<_>>();
            let from_script = submit_args_of(&as_script(&written), &flat(&given));
            let mut all = flat(&written);
            all.extend(flat(&given));
            let from_line = submit_args_of("#!/bin/sh\ntrue\n", &all);
            match (from_script, from_line) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "{a:?} / {b:?}"),
            }
        }
    }

    #[test]
    fn a_directive_that_does_not_parse_names_its_line() {
        use crate::directives::ParseError;
        let script = "#!/bin/sh\n#XCE --cpus 2\n#XCE --cpuz 4\ntrue\n";
        match submit_args_of(script, &[]) {
            Err(ParseError::Directive(e)) => {
                assert_eq!(e.line, 3);
                let text = e.to_string();
                assert!(
                    text.contains("\"#XCE --cpuz 4\"") && text.contains("--cpuz"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        let script = "#!/bin/sh\n#XCE --cpus 2 -- rm -rf /\ntrue\n";
        match submit_args_of(script, &[]) {
            Err(ParseError::Directive(e)) => {
                assert_eq!(e.line, 2);
                assert!(e.to_string().contains("options only"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // Taken for a script's path here, which `xce submit` refuses for its leading `-`.
        let bad = submit_args_of("#XCE --cpus 2\n", &["--cpuz".into()]).unwrap();
        assert_eq!(bad.script, ["--cpuz"]);
        let over = submit_args_of("#XCE --cpus 2 -J a\n", &["--cpus".into(), "8".into()]).unwrap();
        assert_eq!((over.cpus, over.name.as_deref()), (8, Some("a")));
    }

    /// What follows the script is its arguments, whatever they look like (as `sbatch`); a
    /// command comes after `--`.
    #[test]
    fn a_script_s_arguments_follow_it_and_a_command_follows_the_double_dash() {
        let parsed = |line: &[&str]| {
            let line: Vec<String> = line.iter().map(|s| s.to_string()).collect();
            submit_args_of("", &line).unwrap()
        };
        let a = parsed(&["--cpus", "2", "run.sh", "a", "-b", "--cpus", "9"]);
        assert_eq!(a.cpus, 2);
        assert_eq!(a.script, ["run.sh", "a", "-b", "--cpus", "9"]);
        assert!(a.command.is_empty());
        let c = parsed(&["-J", "x", "--", "echo", "--cpus"]);
        assert!(c.script.is_empty());
        assert_eq!(c.command, ["echo", "--cpus"]);
    }

    #[test]
    fn env_arguments_are_name_equals_value() {
        assert_eq!(parse_env("A=1"), Ok(("A".into(), "1".into())));
        assert_eq!(parse_env("A="), Ok(("A".into(), String::new())));
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env("=1").unwrap_err().contains("\"=1\""));
        assert!(parse_env("A").is_err());
    }
}

/// The role a command needs beyond a user's, which the CLI claims at join when authentication
/// is off: with a certificate or a token, that credential says who the caller is instead.
fn claimed_role(command: &Command) -> Option<Role> {
    match command {
        // Placement and queue/host administration are for operators.
        Command::Dispatch { .. } | Command::Queue { .. } | Command::Host { .. } => {
            Some(Role::Operator)
        }
        Command::Token(_) | Command::Admin(_) => Some(Role::Admin),
        _ => None,
    }
}

/// `xce tls ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TlsCommand {
    /// Make a certificate for every name given, in DIR: NAME.pem and NAME-key.pem for each,
    /// signed by DIR's CA (ca.pem, ca-key.pem), which is made when DIR has none. Keys are
    /// readable by their owner only; an existing name is an error, not a replacement.
    Init(TlsInitArgs),
}

/// `xce tls init DIR --controllers c1,c2,c3 --workers w1,w2 --schedulers s1 --admins NAME`.
#[derive(Debug, clap::Args)]
pub struct TlsInitArgs {
    /// Where the files go (created if needed).
    pub dir: std::path::PathBuf,
    #[arg(long, value_delimiter = ',')]
    pub controllers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub schedulers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub apiservers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub operators: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub admins: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub users: Vec<String>,
    /// Login hosts: a certificate that lets the people on that host connect, each then
    /// proving who they are with a token.
    #[arg(long, value_delimiter = ',')]
    pub logins: Vec<String>,
    /// More host names or IP addresses every certificate is valid for, beside its name,
    /// localhost, 127.0.0.1 and ::1 (where clients dial the controllers).
    #[arg(long = "host", value_delimiter = ',')]
    pub hosts: Vec<String>,
}

fn tls_init(args: &TlsInitArgs, f: Format) -> i32 {
    use xce_devcluster::certs::{init, Holder};
    let groups = [
        (Role::Controller, &args.controllers),
        (Role::Worker, &args.workers),
        (Role::Scheduler, &args.schedulers),
        (Role::Apiserver, &args.apiservers),
        (Role::Operator, &args.operators),
        (Role::Admin, &args.admins),
        (Role::User, &args.users),
        (Role::Login, &args.logins),
    ];
    let holders: Vec<Holder> = groups
        .iter()
        .flat_map(|(role, names)| names.iter().map(|n| Holder::new(*role, n)))
        .collect();
    if holders.is_empty() {
        fail(
            f,
            "invalid",
            "name at least one holder (--controllers, --workers, --admins, ...)",
        );
    }
    if let Err(e) = init(&args.dir, &holders, &args.hosts) {
        fail(f, "invalid", &e.to_string());
    }
    match f {
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "dir": args.dir.display().to_string(),
                "names": holders.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
            })
        ),
        Format::Text => println!(
            "wrote {} and {} certificates to {}",
            xce_devcluster::certs::ca_of(&args.dir).display(),
            holders.len(),
            args.dir.display()
        ),
    }
    0
}
