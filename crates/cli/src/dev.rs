//! `xce dev`: a whole local HA cluster on 127.0.0.1 in the foreground, like `nomad agent -dev`.
//! Started from the binaries next to `xce`, stopped cleanly (SIGTERM, then SIGKILL after a
//! grace period) on Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use xce_devcluster::{free_ports, sibling_bin_dir, ClusterSpec, DevCluster};

use crate::output::fail;
use crate::Format;

/// Run a local HA cluster in the foreground until Ctrl-C.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Keep the cluster's data here (kept on exit) instead of a temporary directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Number of controllers (1 to 7).
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Number of workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Number of schedulers: one places jobs, the others stand by to take over.
    #[arg(long, default_value_t = 1)]
    schedulers: usize,
    /// Number of HTTP API servers (0 for none).
    #[arg(long, default_value_t = 1)]
    apiservers: usize,
    /// First client port; controllers take consecutive ports, then the apiservers (default:
    /// any free ports).
    #[arg(long)]
    base_port: Option<u16>,
    /// Mutual TLS everywhere: a CA and a certificate per daemon (and an admin's for you) are
    /// made in the data dir's `tls/`; the printed environment uses the admin's.
    #[arg(long)]
    tls: bool,
    /// A configuration file every controller reads (the keys of deploy/controller.yaml:
    /// queues, accounts, history, ...).
    #[arg(long, value_name = "FILE")]
    controller_config: Option<PathBuf>,
}

/// How long daemons get to stop after SIGTERM before they are killed: longer than a worker's
/// default kill grace (10 s), so a worker always finishes stopping its jobs.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// Runs the dev cluster until a signal; returns the exit code.
pub async fn run(args: &DevArgs, format: Format) -> i32 {
    match run_inner(args, format).await {
        Ok(()) => 0,
        Err(e) => fail(format, "internal", &format!("dev: {e:#}")),
    }
}

async fn run_inner(args: &DevArgs, format: Format) -> anyhow::Result<()> {
    if !(1..=xce_client::MAX_CANDIDATES).contains(&args.controllers) {
        bail!(
            "--controllers must be between 1 and {}",
            xce_client::MAX_CANDIDATES
        );
    }
    let (_temp, data_dir) = match &args.data_dir {
        Some(d) => (None, d.clone()),
        None => {
            let t = tempfile::Builder::new()
                .prefix("xce-dev-")
                .tempdir()
                .context("create a temporary data directory")?;
            let path = t.path().to_path_buf();
            (Some(t), path)
        }
    };
    let ports = match args.base_port {
        Some(base) => (0..args.controllers)
            .map(|i| {
                base.checked_add(i as u16)
                    .context("--base-port leaves no room for every controller")
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => free_ports(args.controllers)?,
    };
    let apiserver_port = match args.base_port {
        Some(base) => Some(
            base.checked_add((args.controllers + args.apiservers) as u16)
                .map(|end| end - args.apiservers as u16)
                .context("--base-port leaves no room for the apiservers")?,
        ),
        None => None,
    };
    // Absolute: the controllers run in directories of their own.
    let controller_config = match &args.controller_config {
        Some(path) => Some(
            std::fs::canonicalize(path)
                .with_context(|| format!("--controller-config {}", path.display()))?,
        ),
        None => None,
    };
    let mut cluster = DevCluster::start(ClusterSpec {
        bin_dir: sibling_bin_dir()?,
        data_dir: data_dir.clone(),
        ports,
        config: controller_config,
        log_filter: "info,openraft=warn".into(),
        workers: args.workers,
        worker_args: Vec::new(),
        schedulers: args.schedulers,
        scheduler_args: Vec::new(),
        apiservers: args.apiservers,
        apiserver_args: Vec::new(),
        apiserver_port,
        links: false,
        daemon_links: false,
        kernel_cuts: false,
        tls: args.tls,
    })?;
    if let Err(e) = cluster.wait_ready(Duration::from_secs(30)).await {
        cluster.stop_all(STOP_GRACE);
        return Err(e.into());
    }
    let token = match cluster.apiservers.is_empty() {
        true => None,
        false => match cluster
            .create_token(&dev_user(), xce_client::types::Role::Admin)
            .await
        {
            Ok(token) => Some(token),
            Err(e) => {
                cluster.stop_all(STOP_GRACE);
                return Err(e.into());
            }
        },
    };
    // Listening before the announcement: a SIGTERM right after it still stops cleanly.
    let stop = xce_client::shutdown::listen();
    announce(
        format,
        &cluster,
        &data_dir,
        args.data_dir.is_none(),
        token.as_deref(),
    );
    wait_for_stop(&mut cluster, stop).await;
    eprintln!("xce dev: stopping");
    for name in cluster.stop_all(STOP_GRACE) {
        eprintln!("xce dev: {name} did not stop in {STOP_GRACE:?}; killed it");
    }
    Ok(())
}

/// Whose the dev token is: the account running `xce dev`.
fn dev_user() -> String {
    let name = std::env::var("USER").unwrap_or_default();
    if xce_client::types::name_chars_ok(&name) && !name.is_empty() && !name.starts_with('-') {
        name
    } else {
        "dev".to_string()
    }
}

fn announce(
    format: Format,
    cluster: &DevCluster,
    data: &Path,
    temporary: bool,
    token: Option<&str>,
) {
    use std::fmt::Write as _;
    // Written whole, and a reader that has gone (a script that read the line it wanted)
    // is not an error: the cluster keeps running until it is told to stop.
    let mut out = String::new();
    let peers = cluster.peers();
    // With TLS, the environment a CLI needs: the CA and the admin's certificate.
    let tls_env: Vec<(&str, String)> = cluster.tls_dir().map_or_else(Vec::new, |dir| {
        let admin = xce_devcluster::certs::paths_of(&dir, xce_devcluster::ADMIN);
        vec![
            ("XCE_TLS_CA", admin.ca.display().to_string()),
            ("XCE_TLS_CERT", admin.cert.display().to_string()),
            ("XCE_TLS_KEY", admin.key.display().to_string()),
        ]
    });
    if format == Format::Json {
        let env: serde_json::Map<String, serde_json::Value> = tls_env
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.as_str())))
            .collect();
        let v = serde_json::json!({
            "peers": peers,
            "api": (!cluster.apiservers.is_empty()).then(|| cluster.api_url(0)),
            "token": token,
            "env": env,
            "data_dir": data.display().to_string(),
            "daemons": cluster.controllers.iter().chain(cluster.workers.iter()).chain(cluster.schedulers.iter()).chain(cluster.apiservers.iter()).map(|d| serde_json::json!({
                "name": d.name, "pid": d.pid(), "log": d.log.display().to_string(),
            })).collect::<Vec<_>>(),
        });
        let _ = writeln!(out, "{v}");
        return print_ignoring_a_closed_pipe(&out);
    }
    let _ =
        writeln!(out,
        "xce dev: {} controllers, {} workers, {} schedulers and {} apiservers are up on 127.0.0.1.",
        cluster.controllers.len(),
        cluster.workers.len(),
        cluster.schedulers.len(),
        cluster.apiservers.len()
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "    export XCE_PEERS={peers}");
    for (name, value) in &tls_env {
        let _ = writeln!(out, "    export {name}={value}");
    }
    let _ = writeln!(out);
    if !cluster.apiservers.is_empty() {
        let _ = writeln!(out, "api: {}", cluster.api_url(0));
        if let Some(token) = token {
            let _ = writeln!(out, "token: {token}");
            let _ = writeln!(
                out,
                "    curl -H 'Authorization: Bearer {token}' {}/v1/jobs",
                cluster.api_url(0)
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "Then try: xce cluster; xce hosts; xce submit --wait -- echo hello; xce jobs"
    );
    let _ = writeln!(
        out,
        "Data and logs: {}{}",
        data.display(),
        if temporary { " (removed on exit)" } else { "" }
    );
    let _ = writeln!(out, "Press Ctrl-C to stop.");
    print_ignoring_a_closed_pipe(&out);
}

/// Prints `text` to stdout; a closed pipe is no reason to stop.
fn print_ignoring_a_closed_pipe(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Waits for SIGINT or SIGTERM, reporting any daemon that dies meanwhile.
async fn wait_for_stop(cluster: &mut DevCluster, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let mut reported = vec![false; cluster.daemons_mut().count()];
    loop {
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                for (i, d) in cluster.daemons_mut().enumerate() {
                    if let Some(status) = d.exited() {
                        if !reported[i] {
                            eprintln!("xce dev: {} exited ({status}); see {}", d.name, d.log.display());
                            reported[i] = true;
                        }
                    }
                }
            }
        }
    }
}
