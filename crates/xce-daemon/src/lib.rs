//! What every xce daemon (controller, worker, scheduler, apiserver) runs on, so that each one's
//! `main` holds only what is its own: the YAML config file read the same way (unknown keys an
//! error naming the key, an empty file every default: [`config`]), the common flags
//! ([`DaemonArgs`]: `--config`, `--check-config`, `--insecure`, logging and TLS), the
//! secure-by-default check on what it reaches in plaintext, the runtime, and the exit on a bad
//! configuration ([`main`]); logging (`--log-format`, `--log-level`, the file's `log:` keys:
//! [`logging`]), the Prometheus endpoint (`--metrics-listen`: [`metrics`]) and systemd's
//! notify protocol ([`systemd`]).
//!
//! It depends on `xce-client` (the TLS and candidate parsers), never on a daemon; no daemon
//! depends on another.

pub mod config;
pub mod logging;
pub mod metrics;
pub mod systemd;

use xce_client::tls::{TlsArgs, TlsPaths};

/// The flags every daemon takes, flattened into its own: `--config`, `--check-config`,
/// `--insecure`, and the logging and TLS flags (each with its `XCE_*` variable).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DaemonArgs {
    /// YAML file with the same settings (flags and XCE_* environment win).
    #[arg(long, env = "XCE_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Run without TLS beyond loopback (no authentication at all).
    #[arg(long, env = "XCE_INSECURE")]
    pub insecure: bool,
    #[command(flatten)]
    pub log: logging::LogArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// A daemon's `main`: sets up systemd's notify protocol, runs `real_main`, and on an error
/// prints it with its causes (`{daemon}: {error:#}`) and exits 1, as a unit's
/// `ExecStartPre=... --check-config` and an operator both expect.
pub fn main(daemon: &str, real_main: impl FnOnce() -> anyhow::Result<()>) {
    systemd::init();
    if let Err(e) = real_main() {
        eprintln!("{daemon}: {e:#}");
        std::process::exit(1);
    }
}

/// The secure-by-default check on what a daemon reaches or serves: with TLS configured and
/// `--check-config`, its files are loaded (the daemon loads them itself when it runs); without
/// TLS, every address in `addrs` must be loopback unless `--insecure` (`daemon` names who
/// refuses).
pub fn check_transport<'a>(
    daemon: &str,
    tls: Option<&TlsPaths>,
    addrs: impl IntoIterator<Item = &'a str>,
    insecure: bool,
    check_config: bool,
) -> anyhow::Result<()> {
    match tls {
        Some(paths) if check_config => drop(xce_client::tls::Tls::load(paths.clone())?),
        Some(_) => {}
        None => xce_client::tls::allow_plaintext(daemon, addrs, insecure)?,
    }
    Ok(())
}

/// The single-threaded runtime a daemon runs on (capnp-rpc is `!Send` and lives on it).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start runtime")
}
