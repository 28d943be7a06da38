//! `xce-apiserver`: flags, logging, signals; the server itself is `xce_apiserver::run`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use xce_apiserver::config::{self, FileConfig, Overrides};

/// The xce HTTP API server.
#[derive(Debug, Parser)]
#[command(name = "xce-apiserver", version)]
struct Args {
    /// Where to serve HTTP (host:port; default 127.0.0.1:8080).
    #[arg(long, env = "XCE_LISTEN")]
    listen: Option<String>,
    /// Controller candidates: name=host:port,...
    #[arg(long, env = "XCE_PEERS")]
    peers: Option<String>,
    /// YAML file with the same settings (flags and XCE_* environment win).
    #[arg(long, env = "XCE_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    log: xce_client::logging::LogArgs,
    #[command(flatten)]
    tls: xce_client::tls::TlsArgs,
    /// HTTPS certificate for the listener.
    #[arg(long, env = "XCE_HTTPS_CERT")]
    https_cert: Option<PathBuf>,
    /// HTTPS private key for the listener.
    #[arg(long, env = "XCE_HTTPS_KEY")]
    https_key: Option<PathBuf>,
    /// Serve plain HTTP, or reach controllers without TLS, beyond loopback.
    #[arg(long, env = "XCE_INSECURE")]
    insecure: bool,
    /// Validate the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

fn main() {
    xce_client::systemd::init();
    if let Err(e) = real_main() {
        eprintln!("xce-apiserver: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let file = match &args.config {
        Some(path) => config::read_file(path)?,
        None => FileConfig::default(),
    };
    args.log.resolve(&file.log, "info").install()?;
    let over = Overrides {
        listen: args.listen,
        peers: args.peers,
        tls: args.tls,
        https_cert: args.https_cert,
        https_key: args.https_key,
        insecure: args.insecure,
    };
    let config = config::resolve(over, file)?;
    // Beyond loopback: bearer tokens never cross a network in plaintext, and the backend
    // connection needs TLS, unless --insecure.
    let listen = config.listen.to_string();
    if config.https.is_none() {
        xce_client::tls::allow_plaintext(
            "xce-apiserver (HTTP)",
            [listen.as_str()],
            config.insecure,
        )?;
    }
    match &config.tls {
        Some(paths) if args.check_config => drop(xce_client::tls::Tls::load(paths.clone())?),
        Some(_) => {}
        None => {
            let addrs: Vec<String> = config.peers.iter().map(|c| c.addr()).collect();
            xce_client::tls::allow_plaintext(
                "xce-apiserver",
                addrs.iter().map(String::as_str),
                config.insecure,
            )?;
        }
    }
    if let Some(https) = &config.https {
        if args.check_config {
            drop(xce_apiserver::server::HttpsAcceptor::load(https.clone())?);
        }
    }
    if args.check_config {
        println!("configuration ok: apiserver on {listen}");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listen on {listen}"))?;
        // On a worker thread, not this one: the watchdog sees the worker threads only.
        let serving = xce_apiserver::run(listener, config, xce_client::shutdown::signal());
        tokio::spawn(serving)
            .await
            .context("the apiserver's task")?
    })
}
