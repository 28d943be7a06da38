//! One daemon process, known only by the pid this crate started: spawn with its log, signal,
//! freeze, thaw, crash, stop with a grace period, reap. Nothing here looks processes up by
//! name, so a dev cluster never touches a process it did not start.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{io, LaunchError};

/// A daemon's command line and log, and its process while it runs.
#[derive(Debug)]
pub struct Process {
    name: String,
    bin: PathBuf,
    args: Vec<String>,
    /// Variables set for it over the caller's environment.
    env: Vec<(String, PathBuf)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    /// A process to run `bin` with `args`, its output appended to `log`. Not started yet.
    pub fn new(name: String, bin: PathBuf, args: Vec<String>, log: PathBuf) -> Process {
        Process {
            name,
            bin,
            args,
            env: Vec::new(),
            log,
            child: None,
        }
    }

    /// Sets `key` to `value` in its environment from the next start on.
    pub fn set_env(&mut self, key: &str, value: PathBuf) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value));
    }

    /// The next start runs `bin` instead, with the same arguments: a rolling upgrade's new
    /// build.
    pub fn replace_binary(&mut self, bin: PathBuf) {
        self.bin = bin;
    }

    /// The binary the next start runs.
    pub fn binary(&self) -> &std::path::Path {
        &self.bin
    }

    /// Starts the process (again) with `RUST_LOG=log_filter`; its log is appended to.
    pub fn start(&mut self, log_filter: &str) -> Result<(), LaunchError> {
        if !self.bin.exists() {
            return Err(LaunchError::MissingBinary {
                path: self.bin.clone(),
            });
        }
        if self.is_running() {
            return Err(LaunchError::Running {
                name: self.name.clone(),
            });
        }
        let log = open_log(&self.log)?;
        let log_err = log.try_clone().map_err(io("open log"))?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", log_filter)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Own process group: a terminal's Ctrl-C reaches only the dev cluster's owner,
            // which then stops the daemons in order.
            .process_group(0)
            .spawn()
            .map_err(io(format!("start {}", self.bin.display())))?;
        self.child = Some(child);
        Ok(())
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

    /// Sends `sig` to the running process.
    pub fn signal(&self, sig: Signal) -> Result<(), LaunchError> {
        let pid = self.pid().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        kill(Pid::from_raw(pid as i32), sig)
            .map_err(|e| io(format!("signal {}", self.name))(std::io::Error::from(e)))
    }

    /// Crashes the process (SIGKILL) and reaps it.
    pub fn kill9(&mut self) -> Result<(), LaunchError> {
        self.signal(Signal::SIGKILL)?;
        if let Some(mut child) = self.child.take() {
            child.wait().map_err(io("reap"))?;
        }
        Ok(())
    }

    /// Freezes the process (SIGSTOP): hung, not dead; its kernel still accepts connections.
    pub fn pause(&self) -> Result<(), LaunchError> {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), LaunchError> {
        self.signal(Signal::SIGCONT)
    }

    /// Stops the process cleanly: SIGTERM, then SIGKILL after `grace`. Returns the exit status,
    /// or `None` when it had to be killed.
    pub fn stop(&mut self, grace: Duration) -> Result<Option<ExitStatus>, LaunchError> {
        self.signal(Signal::SIGTERM)?;
        self.wait_or_kill(Instant::now() + grace)
    }

    /// Waits for a signalled process to exit; SIGKILL at `deadline`. `None` when killed.
    fn wait_or_kill(&mut self, deadline: Instant) -> Result<Option<ExitStatus>, LaunchError> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
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

    /// SIGKILLs and reaps the process if it still runs (for drop paths).
    pub fn kill_quietly(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops every running process: SIGTERM to all first (a paused one is thawed so that it can
/// act on it), then waits until `grace` has passed; returns the names of those that had to
/// be killed.
pub fn stop_all<'a>(procs: impl Iterator<Item = &'a mut Process>, grace: Duration) -> Vec<String> {
    let mut procs: Vec<&mut Process> = procs.collect();
    for p in procs.iter_mut() {
        if p.is_running() {
            let _ = p.signal(Signal::SIGTERM);
            let _ = p.signal(Signal::SIGCONT);
        }
    }
    let deadline = Instant::now() + grace;
    let mut killed = Vec::new();
    for p in procs {
        if p.child.is_none() {
            continue;
        }
        if let Ok(None) = p.wait_or_kill(deadline) {
            killed.push(p.name.clone());
        }
    }
    killed
}

fn open_log(path: &Path) -> Result<File, LaunchError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(format!("open {}", path.display())))
}
