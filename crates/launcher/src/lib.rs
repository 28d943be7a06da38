//! Local clusters of real xce processes on 127.0.0.1: one launcher for `xce dev`, the
//! benchmarks and the multi-process tests, so that they start, stop and crash daemons the same
//! way. Processes are only ever signalled by the pid this launcher started.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Why a launch or a stop failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{path} not found: build the workspace first (cargo build --workspace)")]
    MissingBinary { path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{name} is already running")]
    Running { name: String },
    #[error("{name} is not running")]
    NotRunning { name: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// Free TCP ports on 127.0.0.1, distinct from each other (all held until all are chosen).
pub fn free_ports(n: usize) -> Result<Vec<u16>, LaunchError> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("find free ports"))?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr().map_err(io("find free ports"))?.port()))
        .collect()
}

/// The directory holding the binary that is running now; the daemons are built beside it.
pub fn sibling_bin_dir() -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(io("locate the running binary"))?;
    match exe.parent() {
        Some(dir) => Ok(dir.to_path_buf()),
        None => Err(LaunchError::MissingBinary { path: exe }),
    }
}

/// How to lay out a local controller cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Where `xce-controller` (and later the other daemons) are.
    pub bin_dir: PathBuf,
    /// Per-controller data dirs and logs go here.
    pub data_dir: PathBuf,
    /// Client ports, one per controller (see [`free_ports`]).
    pub ports: Vec<u16>,
    /// Optional controller YAML file given to every controller.
    pub config: Option<PathBuf>,
    /// `RUST_LOG` for the daemons.
    pub log_filter: String,
    /// Workers to start (`w1`, `w2`, ...), each with its spool under `data_dir`.
    pub workers: usize,
    /// Extra flags for every worker (e.g. a short `--heartbeat-ms` in tests).
    pub worker_args: Vec<String>,
}

/// One daemon process and where its data and log live.
#[derive(Debug)]
pub struct Daemon {
    pub name: String,
    pub port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    /// The binary, beside the launcher's `bin_dir`.
    bin: &'static str,
    args: Vec<String>,
    child: Option<Child>,
}

impl Daemon {
    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The pid while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still alive (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The exit status if the process has exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

/// A cluster of controller processes. Dropping it kills whatever is still running.
#[derive(Debug)]
pub struct LocalCluster {
    spec: ClusterSpec,
    peers: String,
    pub controllers: Vec<Daemon>,
    pub workers: Vec<Daemon>,
}

impl LocalCluster {
    /// Lays out the cluster and starts every controller.
    pub fn start(spec: ClusterSpec) -> Result<LocalCluster, LaunchError> {
        std::fs::create_dir_all(&spec.data_dir)
            .map_err(io(format!("create {}", spec.data_dir.display())))?;
        let peers = spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("c{}=127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut controller_args = Vec::new();
        if let Some(config) = &spec.config {
            controller_args.push("--config".to_string());
            controller_args.push(config.display().to_string());
        }
        let controllers = spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let name = format!("c{}", i + 1);
                let (bin, dir_flag) = ("xce-controller", "--data-dir");
                daemon(&spec, &peers, name, bin, *port, dir_flag, &controller_args)
            })
            .collect();
        let workers = (1..=spec.workers)
            .map(|i| {
                let name = format!("w{i}");
                let (bin, dir_flag) = ("xce-worker", "--spool-dir");
                daemon(&spec, &peers, name, bin, 0, dir_flag, &spec.worker_args)
            })
            .collect();
        let mut cluster = LocalCluster {
            spec,
            peers,
            controllers,
            workers,
        };
        for i in 0..cluster.controllers.len() {
            cluster.start_controller(i)?;
        }
        for i in 0..cluster.workers.len() {
            cluster.start_worker(i)?;
        }
        Ok(cluster)
    }

    /// The `XCE_PEERS` value of this cluster.
    pub fn peers(&self) -> &str {
        &self.peers
    }

    /// Starts controller `i` (again); its log is appended to.
    pub fn start_controller(&mut self, i: usize) -> Result<(), LaunchError> {
        spawn(&self.spec, &mut self.controllers[i])
    }

    /// Starts worker `i` (again); its log is appended to.
    pub fn start_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        spawn(&self.spec, &mut self.workers[i])
    }

    /// Crashes worker `i` (SIGKILL) and reaps it.
    pub fn kill9_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        kill9(&mut self.workers[i])
    }

    /// Freezes worker `i` (SIGSTOP): cut off from the cluster while its jobs run on.
    pub fn pause_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        signal(&self.workers[i], Signal::SIGSTOP)
    }

    /// Thaws a paused worker (SIGCONT).
    pub fn resume_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        signal(&self.workers[i], Signal::SIGCONT)
    }

    /// Stops worker `i` cleanly (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_worker(
        &mut self,
        i: usize,
        grace: Duration,
    ) -> Result<Option<ExitStatus>, LaunchError> {
        signal(&self.workers[i], Signal::SIGTERM)?;
        wait_or_kill(&mut self.workers[i], grace)
    }

    fn signal(&mut self, i: usize, sig: Signal) -> Result<(), LaunchError> {
        signal(&self.controllers[i], sig)
    }

    /// Crashes controller `i` (SIGKILL) and reaps it.
    pub fn kill9(&mut self, i: usize) -> Result<(), LaunchError> {
        kill9(&mut self.controllers[i])
    }

    /// Freezes controller `i` (SIGSTOP): a hung, not dead, node.
    pub fn pause(&mut self, i: usize) -> Result<(), LaunchError> {
        self.signal(i, Signal::SIGSTOP)
    }

    /// Thaws a paused controller (SIGCONT).
    pub fn resume(&mut self, i: usize) -> Result<(), LaunchError> {
        self.signal(i, Signal::SIGCONT)
    }

    /// Stops controller `i` cleanly: SIGTERM, then SIGKILL after `grace`. Returns the exit
    /// status, or `None` when it had to be killed.
    pub fn stop(&mut self, i: usize, grace: Duration) -> Result<Option<ExitStatus>, LaunchError> {
        self.signal(i, Signal::SIGTERM)?;
        wait_or_kill(&mut self.controllers[i], grace)
    }

    /// Stops every running controller (SIGTERM to all first, then waits); returns the names
    /// of those that had to be killed.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<String> {
        for d in self.workers.iter_mut().chain(self.controllers.iter_mut()) {
            if let (true, Some(pid)) = (d.is_running(), d.pid()) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        let mut killed = Vec::new();
        for d in self.workers.iter_mut().chain(self.controllers.iter_mut()) {
            let Some(mut child) = d.child.take() else {
                continue;
            };
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        killed.push(d.name.clone());
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        killed
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for d in self.workers.iter_mut().chain(self.controllers.iter_mut()) {
            if let Some(mut child) = d.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Lays out one daemon: its data dir (given with `dir_flag`) and log under the cluster's data
/// dir, its name and the peers list, then `extra` flags.
fn daemon(
    spec: &ClusterSpec,
    peers: &str,
    name: String,
    bin: &'static str,
    port: u16,
    dir_flag: &str,
    extra: &[String],
) -> Daemon {
    let data_dir = spec.data_dir.join(&name);
    let mut args = vec![
        "--name".to_string(),
        name.clone(),
        "--peers".to_string(),
        peers.to_string(),
        dir_flag.to_string(),
        data_dir.display().to_string(),
    ];
    args.extend(extra.iter().cloned());
    Daemon {
        log: spec.data_dir.join(format!("{name}.log")),
        name,
        port,
        data_dir,
        bin,
        args,
        child: None,
    }
}

/// Starts one daemon process; its log is appended to.
fn spawn(spec: &ClusterSpec, d: &mut Daemon) -> Result<(), LaunchError> {
    let bin = spec.bin_dir.join(d.bin);
    if !bin.exists() {
        return Err(LaunchError::MissingBinary { path: bin });
    }
    if d.is_running() {
        return Err(LaunchError::Running {
            name: d.name.clone(),
        });
    }
    let log = open_log(&d.log)?;
    let log_err = log.try_clone().map_err(io("open log"))?;
    let child = Command::new(&bin)
        .args(&d.args)
        .env("RUST_LOG", &spec.log_filter)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: a terminal's Ctrl-C reaches only the launcher, which then
        // stops the daemons in order.
        .process_group(0)
        .spawn()
        .map_err(io(format!("start {}", bin.display())))?;
    d.child = Some(child);
    Ok(())
}

/// SIGKILLs a daemon and reaps it.
fn kill9(d: &mut Daemon) -> Result<(), LaunchError> {
    let pid = d.pid().ok_or_else(|| LaunchError::NotRunning {
        name: d.name.clone(),
    })?;
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL)
        .map_err(|e| io(format!("signal {}", d.name))(std::io::Error::from(e)))?;
    if let Some(mut child) = d.child.take() {
        child.wait().map_err(io("reap"))?;
    }
    Ok(())
}

fn open_log(path: &Path) -> Result<File, LaunchError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(format!("open {}", path.display())))
}

/// Sends `sig` to a running daemon.
fn signal(d: &Daemon, sig: Signal) -> Result<(), LaunchError> {
    let pid = d.pid().ok_or_else(|| LaunchError::NotRunning {
        name: d.name.clone(),
    })?;
    kill(Pid::from_raw(pid as i32), sig)
        .map_err(|e| io(format!("signal {}", d.name))(std::io::Error::from(e)))
}

/// Waits for a signalled daemon to exit; SIGKILL after `grace`. `None` when it had to be killed.
fn wait_or_kill(d: &mut Daemon, grace: Duration) -> Result<Option<ExitStatus>, LaunchError> {
    let Some(mut child) = d.child.take() else {
        return Ok(None);
    };
    let deadline = Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait().map_err(io("wait"))? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
