//! `xce`: submit and control jobs, inspect queues and the cluster, and run a local cluster with
//! `xce dev`. Every command takes `-o json` (the shapes of DESIGN §3) and fails with a non-zero
//! exit and, in JSON mode, a JSON error.

mod admin;
mod columns;
mod commands;
mod dev;
mod directives;
mod hint;
mod history;
mod output;
mod tokens;

use clap::{Parser, Subcommand, ValueEnum};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// xce: a batch job cluster with controllers that fail over without you noticing.
#[derive(Debug, Parser)]
#[command(name = "xce", version)]
pub struct Cli {
    /// Controller candidates: [name=]host:port,... (the same list the controllers were given).
    #[arg(long, env = "XCE_PEERS", global = true)]
    pub peers: Option<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub output: Format,
    #[command(flatten)]
    pub tls: xce_client::tls::TlsArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Each subcommand's arguments are built only when it is the one run (a one-shot command
// built them all: ~6% of an `xce submit`'s CPU). The about text of a subcommand with an
// arguments struct then comes from that struct's doc comment, so the two must say the same
// (tests/args.rs checks every subcommand's help against the list).
#[command(defer = true)]
pub enum Command {
    /// Submit a job: xce submit [options] SCRIPT [ARGS...] | < SCRIPT | --wrap CMD | -- CMD [ARGS...]
    Submit(commands::SubmitArgs),
    /// List jobs.
    Jobs(commands::JobsArgs),
    /// List finished jobs that left the live state (retired to history), as `sacct`: one line per
    /// job, or with -o json an array of job objects.
    History(history::HistoryArgs),
    /// Show one job.
    Job {
        /// The job, or an array's task (ID_IDX).
        id: commands::Target,
        /// Print the job's script instead.
        #[arg(long)]
        script: bool,
    },
    /// Kill a job.
    Kill {
        /// The job, an array (ID: every task), one task (ID_IDX) or tasks (ID_[A-B,...]).
        id: commands::Target,
        /// Send this signal instead (a name, with or without SIG, or a number), as `scancel
        /// --signal`: the job goes on unless the signal ends it.
        #[arg(long, value_name = "SIG")]
        signal: Option<String>,
    },
    /// Hold pending jobs: they start only once released (a user their own, operators any).
    Hold {
        /// Jobs, arrays, tasks (ID_IDX) or ranges of tasks (ID_[A-B,...]).
        #[arg(required = true)]
        ids: Vec<commands::Target>,
    },
    /// Release held jobs.
    Release {
        /// Jobs, arrays, tasks (ID_IDX) or ranges of tasks (ID_[A-B,...]).
        #[arg(required = true)]
        ids: Vec<commands::Target>,
    },
    /// Send a signal to a running job's processes: SIG is a name (with or without SIG) or a
    /// number; B:SIG to its leading process (the batch shell) alone.
    Signal {
        /// The job, an array (ID: every running task), one task (ID_IDX) or tasks.
        id: commands::Target,
        signal: String,
    },
    /// Change a job: a pending one's name, priority, queue, cpus, memory, time or begin time;
    /// a running one's time limit (operators raise it, its user may lower it).
    Update(commands::UpdateArgs),
    /// Suspend a running job.
    Suspend { id: commands::Target },
    /// Resume a suspended job.
    Resume { id: commands::Target },
    /// Put a job back in its queue.
    Requeue { id: commands::Target },
    /// Place a pending job on a host by hand (operator placement).
    Dispatch { id: u64, host: String },
    /// List queues.
    Queues,
    /// Open, close, activate or inactivate a queue.
    Queue {
        /// open, close, activate or inactivate.
        action: xce_client::types::QueueAction,
        name: String,
    },
    /// List worker hosts.
    Hosts,
    /// Open or close a host.
    Host {
        /// open or close.
        action: xce_client::types::HostAction,
        name: String,
    },
    /// Show the controllers and which one is primary.
    Cluster,
    /// Stream state changes (jobs, hosts, queues) until Ctrl-C, across failovers; with -o json
    /// one JSON object per line, a `resync` line after a failover.
    Events(commands::EventsArgs),
    /// Run a local HA cluster in the foreground until Ctrl-C.
    Dev(dev::DevArgs),
    /// TLS certificates for a test or a small cluster.
    #[command(subcommand)]
    Tls(commands::TlsCommand),
    /// Users' tokens (admins only): create, list, revoke.
    #[command(subcommand)]
    Token(crate::tokens::TokenCommand),
    /// The cluster as a whole (admins only): backups, and the controllers (members).
    #[command(subcommand)]
    Admin(crate::admin::AdminCommand),
}

fn main() {
    init_logging();
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // What `xce submit` was given on the command line, to put over a script's directives.
    let submit_matches = matches.subcommand_matches("submit");
    let format = cli.output;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => output::fail(format, "internal", &format!("start runtime: {e}")),
    };
    // The controller connections run on this LocalSet, on this thread (see `commands::client`):
    // a one-shot command has nothing to gain from a thread per connection.
    let code = tokio::task::LocalSet::new().block_on(&runtime, commands::run(cli, submit_matches));
    std::process::exit(code);
}

/// Warnings and errors to stderr, or what `RUST_LOG` asks for. Without `RUST_LOG` the filter
/// is a fixed level, which costs nothing to build (an `EnvFilter` is parsed per process).
fn init_logging() {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal; log files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if std::env::var_os("RUST_LOG").is_some() {
        builder
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .init();
    } else {
        builder.with_max_level(tracing::Level::WARN).init();
    }
}
