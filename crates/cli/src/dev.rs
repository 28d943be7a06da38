//! `xce dev`: a whole local HA cluster on 127.0.0.1 in the foreground, like `nomad agent -dev`.
//! Started from the binaries next to `xce`, stopped cleanly (SIGTERM, then SIGKILL after a
//! grace period) on Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use xce_client::ops::GetCluster;
use xce_client::{parse_candidates, Client, ClientConfig};

use crate::output::fail;
use crate::Format;

/// `xce dev` options.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Keep the cluster's data here (kept on exit) instead of a temporary directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Number of controllers (1 to 7).
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// First client port; controllers take consecutive ports (default: any free ports).
    #[arg(long)]
    base_port: Option<u16>,
}

/// How long daemons get to stop after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// One daemon started by `xce dev`.
struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

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
    let bin_dir = std::env::current_exe()
        .context("locate the xce binary")?
        .parent()
        .map(Path::to_path_buf)
        .context("locate the binary directory")?;
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
    std::fs::create_dir_all(&data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    let ports = ports(args.controllers, args.base_port)?;
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("c{}=127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut daemons = Vec::new();
    for i in 0..args.controllers {
        let name = format!("c{}", i + 1);
        let spawned = spawn_controller(&bin_dir, &data_dir, &name, &peers);
        match spawned {
            Ok(d) => daemons.push(d),
            Err(e) => {
                stop_all(&mut daemons).await;
                return Err(e);
            }
        }
    }
    if let Err(e) = wait_for_primary(&peers, &mut daemons).await {
        stop_all(&mut daemons).await;
        return Err(e);
    }
    announce(format, &peers, &data_dir, &daemons, args.data_dir.is_none());
    wait_for_stop(&mut daemons).await;
    eprintln!("xce dev: stopping");
    stop_all(&mut daemons).await;
    Ok(())
}

fn ports(n: usize, base: Option<u16>) -> anyhow::Result<Vec<u16>> {
    if let Some(base) = base {
        return (0..n)
            .map(|i| {
                base.checked_add(i as u16)
                    .context("--base-port leaves no room for every controller")
            })
            .collect();
    }
    // Ask the kernel for free ports; hold them all before releasing so they are distinct.
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("find free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn spawn_controller(
    bin_dir: &Path,
    data: &Path,
    name: &str,
    peers: &str,
) -> anyhow::Result<Daemon> {
    let bin = bin_dir.join("xce-controller");
    if !bin.exists() {
        bail!(
            "{} not found: build the workspace first (cargo build --workspace)",
            bin.display()
        );
    }
    let log = data.join(format!("{name}.log"));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
    let child = Command::new(&bin)
        .args(["--name", name, "--peers", peers, "--data-dir"])
        .arg(data.join(name))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        // Own process group: Ctrl-C reaches `xce dev` only, which then stops the daemons in order.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    Ok(Daemon {
        name: name.to_string(),
        child,
        log,
    })
}

async fn wait_for_primary(peers: &str, daemons: &mut [Daemon]) -> anyhow::Result<()> {
    let client = Client::new(parse_candidates(peers)?, ClientConfig::default());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for d in daemons.iter_mut() {
            if let Some(status) = d.child.try_wait()? {
                let log = std::fs::read_to_string(&d.log).unwrap_or_default();
                bail!("{} exited during start-up ({status}):\n{log}", d.name);
            }
        }
        let probe = tokio::time::timeout(Duration::from_secs(2), client.call(GetCluster)).await;
        if let Ok(Ok(info)) = probe {
            if info.primary.is_some() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("no primary was elected within 30 s; see the logs");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn announce(format: Format, peers: &str, data: &Path, daemons: &[Daemon], temporary: bool) {
    if format == Format::Json {
        let v = serde_json::json!({
            "peers": peers,
            "data_dir": data.display().to_string(),
            "daemons": daemons.iter().map(|d| serde_json::json!({
                "name": d.name, "pid": d.child.id(), "log": d.log.display().to_string(),
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    println!(
        "xce dev: {} controllers are up on 127.0.0.1.",
        daemons.len()
    );
    println!();
    println!("    export XCE_PEERS={peers}");
    println!();
    println!("Then try: xce cluster; xce submit -- sleep 30; xce jobs");
    println!(
        "Data and logs: {}{}",
        data.display(),
        if temporary { " (removed on exit)" } else { "" }
    );
    println!("Press Ctrl-C to stop.");
}

/// Waits for SIGINT or SIGTERM, reporting any daemon that dies meanwhile.
async fn wait_for_stop(daemons: &mut [Daemon]) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("xce dev: cannot install signal handlers; stopping");
        return;
    };
    let mut reported = vec![false; daemons.len()];
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                for (i, d) in daemons.iter_mut().enumerate() {
                    if let Ok(Some(status)) = d.child.try_wait() {
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

/// SIGTERM to every daemon, then SIGKILL to any still running after the grace period.
async fn stop_all(daemons: &mut [Daemon]) {
    for d in daemons.iter() {
        if let Some(pid) = d.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for d in daemons.iter_mut() {
        match tokio::time::timeout(STOP_GRACE, d.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "xce dev: {} did not stop in {STOP_GRACE:?}; killing it",
                    d.name
                );
                let _ = d.child.kill().await;
            }
        }
    }
}
