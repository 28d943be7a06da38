//! `xce`: submit and control jobs, inspect queues and the cluster, and run a local cluster with
//! `xce dev`. Every command takes `-o json` (the shapes of DESIGN §3) and fails with a non-zero
//! exit and, in JSON mode, a JSON error.

mod admin;
mod columns;
mod commands;
mod dev;
// Read by `xce submit SCRIPT`, which lands with the stored scripts (format 8); until then
// only its tests use it.
#[cfg_attr(not(test), allow(dead_code))]
mod directives;
mod hint;
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
    /// Submit a job: xce submit [options] -- CMD [ARGS...]
    Submit(commands::SubmitArgs),
    /// List jobs.
    Jobs(commands::JobsArgs),
    /// Show one job.
    Job { id: u64 },
    /// Kill a job.
    Kill { id: u64 },
    /// Suspend a running job.
    Suspend { id: u64 },
    /// Resume a suspended job.
    Resume { id: u64 },
    /// Put a job back in its queue.
    Requeue { id: u64 },
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
    let cli = Cli::parse();
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
    let code = tokio::task::LocalSet::new().block_on(&runtime, commands::run(cli));
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
