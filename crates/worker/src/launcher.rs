//! The shim launcher: one small process per worker that forks each attempt's shim, so that a
//! job costs the exec of its own program only. Exec'ing the shim (this 70 MB program: dynamic
//! loading, relocations, page faults) cost 0.8 ms of CPU per job on the 2-core test machine,
//! over a quarter of what a shim and its job cost together (2.74 ms, 1.96 ms forked).
//!
//! It runs as `xce-worker shim-launcher`, single-threaded, so that a forked child may run any
//! code: the child is the shim ([`crate::shim::run_spec`]), exactly as an exec'd one would be.
//! Shims outlive the launcher as they outlive the worker: a launcher whose worker is gone
//! exits, and its shims live on, to be adopted from their records by the next worker.
//!
//! Its stdin is a socket to the worker, its stdout a pipe, and every message one line written
//! with one `write(2)` (under `PIPE_BUF`, so lines from the launcher and its shims never
//! interleave):
//!
//! - worker → launcher, on the socket: `<seq> <spec JSON>`, one at a time;
//! - launcher → worker, on the socket: `<seq> pid <pid>` once the shim is forked, or
//!   `<seq> error <reason>`;
//! - worker → launcher: `<seq> go`. A forked shim does nothing until the worker, holding its
//!   pid, says go: a shim forked for a request the worker gave up on (a launcher that answered
//!   too late, then was replaced) never runs its job, so no attempt runs twice. It exits once
//!   its launcher is gone without a go;
//! - on the pipe: `<seq> said <line>`, the shim's one line (`started <pid>` / `failed ...`),
//!   written by the shim itself, control characters escaped so that no user's text can make
//!   a line of its own; then `<seq> exit <code>` or `<seq> signal <n>` once the launcher has
//!   reaped it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::procs::ProcRecord;
use crate::shim::{self, ShimSpec};

/// The first argument that makes `xce-worker` the shim launcher.
pub const LAUNCHER_ARG: &str = "shim-launcher";

/// How long the launcher may take to fork a shim and say so: the worker's one runtime thread
/// waits meanwhile (no heartbeat goes out), so it is kept well under the heartbeat TTL, even
/// counting the one retry.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// What the worker hears of a launched shim after its pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShimEvent {
    /// The shim's one line: `started <pid>` or `failed <reason>`.
    Said(String),
    /// The shim exited (reaped by the launcher): whether cleanly (0, or
    /// [`shim::EXIT_UNREPORTED`]), and how, for the log.
    Ended { clean: bool, how: String },
}

/// A shim the launcher forked.
#[derive(Debug)]
pub struct Launched {
    /// The shim as it was when it got its go: it cannot have exited before (it was waiting),
    /// so this names it even if its pid is reused later.
    pub shim: ProcRecord,
    /// Its line, then its end. Closed without an end when the launcher died first: the shim
    /// is then nobody's child here, and is watched by its pid.
    pub events: mpsc::UnboundedReceiver<ShimEvent>,
}

/// The worker's side: starts the launcher when first needed and again after it died.
pub struct Launcher {
    exe: std::path::PathBuf,
    log: Option<xce_daemon::logging::LogSettings>,
    live: Mutex<Option<Live>>,
}

/// One running launcher process.
struct Live {
    requests: UnixStream,
    answers: BufReader<UnixStream>,
    next_seq: u64,
    /// Who waits for which shim's events; shared with the thread reading the pipe.
    waiting: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<ShimEvent>>>>,
    /// Cleared when the launcher process has exited.
    alive: Arc<AtomicBool>,
}

impl Launcher {
    /// A launcher of `exe`'s shims, with the worker's log settings; nothing runs yet.
    pub fn new(exe: std::path::PathBuf, log: Option<xce_daemon::logging::LogSettings>) -> Self {
        Launcher {
            exe,
            log,
            live: Mutex::new(None),
        }
    }

    /// Starts the launcher now, so the first job does not wait for its start (an exec);
    /// a failure is logged and the first job tries again.
    pub fn warm_up(&self) {
        let mut guard = self.live();
        if guard.is_none() {
            match self.start() {
                Ok(live) => *guard = Some(live),
                Err(e) => warn!(error = %e, "cannot start the shim launcher yet"),
            }
        }
    }

    fn live(&self) -> MutexGuard<'_, Option<Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forks a shim for `spec` and returns its pid once it exists. Blocks for one round trip
    /// to the launcher (a fork; at most [`ANSWER_WITHIN`]): the caller holds the job table.
    ///
    /// A launcher that fails to answer is replaced, and asked again once: one that just died
    /// (its exit not yet seen) costs no job, and a shim it may still fork never gets its go.
    pub fn launch(&self, spec: &ShimSpec) -> std::io::Result<Launched> {
        let mut guard = self.live();
        let mut tries = 0;
        loop {
            tries += 1;
            let live = match guard.take().filter(|l| l.alive.load(Ordering::SeqCst)) {
                Some(live) => guard.insert(live),
                None => guard.insert(self.start()?),
            };
            match live.launch(spec) {
                Ok(launched) => return Ok(launched),
                Err(e) => {
                    // Whatever state it is in, it is not trusted with another job: its socket
                    // is closed, which ends it (not a signal: its pid may be reaped and reused
                    // by now). Its shims live on without it.
                    warn!(error = %e, "the shim launcher failed to start a shim; replacing it");
                    *guard = None;
                    if tries == 2 {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Starts a launcher process and the thread that reads its pipe. A thread, not a task:
    /// the pipe is drained even while every runtime thread waits in [`Launcher::launch`], so
    /// the launcher never blocks on a full pipe with a shim's answer pending.
    fn start(&self) -> std::io::Result<Live> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_read_timeout(Some(ANSWER_WITHIN))?;
        ours.set_write_timeout(Some(ANSWER_WITHIN))?;
        let mut command = std::process::Command::new(&self.exe);
        if let Some(log) = &self.log {
            command.envs(log.handoff());
        }
        let mut child = command
            // As `ps` shows it, whatever path runs it (`/proc/self/exe`).
            .arg0("xce-worker")
            .arg(LAUNCHER_ARG)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            // Its log lines, and its shims', go where the worker's go.
            .stderr(Stdio::inherit())
            // Out of the worker's group: a Ctrl-C meant for the worker does not reach it.
            .process_group(0)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("the shim launcher has no stdout"))?;
        let waiting: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<ShimEvent>>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let pid = child.id();
        debug!(pid, "shim launcher started");
        let (events, flag) = (waiting.clone(), alive.clone());
        std::thread::Builder::new()
            .name("shim-launcher".into())
            .spawn(move || {
                read_events(stdout, &events);
                // The pipe ends once the launcher is gone (and every shim it was starting
                // has spoken): it is reaped here.
                flag.store(false, Ordering::SeqCst);
                match child.wait() {
                    // Let go by its worker (stopping, or replacing it).
                    Ok(status) if status.success() => debug!("the shim launcher exited"),
                    status => warn!(
                        ?status,
                        "the shim launcher died; the next job starts another"
                    ),
                }
            })?;
        Ok(Live {
            requests: ours.try_clone()?,
            answers: BufReader::new(ours),
            next_seq: 1,
            waiting,
            alive,
        })
    }
}

impl Live {
    fn launch(&mut self, spec: &ShimSpec) -> std::io::Result<Launched> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut line = format!("{seq} ").into_bytes();
        serde_json::to_writer(&mut line, spec).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // Listening before asking: the shim may speak before its pid is read here.
        let (tx, events) = mpsc::unbounded_channel();
        lock(&self.waiting).insert(seq, tx);
        let answer = self.ask(&line);
        let shim = answer
            .and_then(|answer| parse_answer(seq, &answer))
            .and_then(|pid| {
                // Recorded before its go, while it waits: it cannot have exited (but by a
                // signal, and then it gets no go).
                let shim = ProcRecord::of(pid).ok_or_else(|| {
                    std::io::Error::other(format!("the forked shim {pid} died at once"))
                })?;
                self.requests.write_all(format!("{seq} go\n").as_bytes())?;
                Ok(shim)
            });
        if shim.is_err() {
            lock(&self.waiting).remove(&seq);
        }
        Ok(Launched {
            shim: shim?,
            events,
        })
    }

    /// Sends one request and reads its one answer line.
    fn ask(&mut self, request: &[u8]) -> std::io::Result<String> {
        self.requests.write_all(request)?;
        let mut answer = String::new();
        match self.answers.read_line(&mut answer)? {
            0 => Err(std::io::Error::other("the shim launcher stopped")),
            _ => Ok(answer),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pid in the launcher's answer to request `seq`.
fn parse_answer(seq: u64, answer: &str) -> std::io::Result<i32> {
    let bad = || std::io::Error::other(format!("the shim launcher answered {answer:?}"));
    let (at, rest) = answer.trim_end().split_once(' ').ok_or_else(bad)?;
    if at.parse::<u64>().ok() != Some(seq) {
        return Err(bad());
    }
    match rest.split_once(' ') {
        Some(("pid", pid)) => pid.parse().map_err(|_| bad()),
        Some(("error", reason)) => Err(std::io::Error::other(reason.to_string())),
        _ => Err(bad()),
    }
}

/// One line of the launcher's pipe, as `(seq, event)`.
fn parse_event(line: &str) -> Option<(u64, ShimEvent)> {
    let (seq, rest) = line.split_once(' ')?;
    let seq = seq.parse().ok()?;
    let (kind, value) = rest.split_once(' ')?;
    let event = match kind {
        "said" => ShimEvent::Said(value.to_string()),
        "exit" => {
            let code: i32 = value.parse().ok()?;
            ShimEvent::Ended {
                clean: code == 0 || code == shim::EXIT_UNREPORTED,
                how: format!("exit code {code}"),
            }
        }
        "signal" => ShimEvent::Ended {
            clean: false,
            how: format!("killed by signal {value}"),
        },
        _ => return None,
    };
    Some((seq, event))
}

/// Hands each line of the launcher's pipe to whoever waits for that shim; an end is the last
/// event of a shim. At the end of the pipe (the launcher and every shim that had yet to speak
/// are gone) everyone still waiting is let go.
fn read_events(
    stdout: std::process::ChildStdout,
    waiting: &Mutex<HashMap<u64, mpsc::UnboundedSender<ShimEvent>>>,
) {
    for line in BufReader::new(stdout).lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                warn!(error = %e, "cannot read the shim launcher's pipe");
                break;
            }
        };
        let Some((seq, event)) = parse_event(&line) else {
            warn!(
                line,
                "the shim launcher's pipe carried something unexpected"
            );
            continue;
        };
        let mut waiting = lock(waiting);
        let last = matches!(event, ShimEvent::Ended { .. });
        if let Some(tx) = waiting.get(&seq) {
            let _ = tx.send(event);
        }
        if last {
            waiting.remove(&seq);
        }
    }
    lock(waiting).clear();
}

/// Runs the launcher (`xce-worker shim-launcher`); returns its exit code.
pub fn main() -> i32 {
    // Its name for `ps -o comm` and `pgrep` (exec'd as `/proc/self/exe` it would be `exe`).
    let _ = nix::sys::prctl::set_name(c"xce-launcher");
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            warn!(error = %e, "shim launcher failed");
            1
        }
    }
}

/// Forks a shim per request until the worker's end of the socket closes.
fn serve() -> std::io::Result<()> {
    let mut children = SigSet::empty();
    children.add(Signal::SIGCHLD);
    children.thread_block()?;
    let reaped = SignalFd::with_flags(&children, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
    let requests = std::io::stdin();
    let mut pending: Vec<u8> = Vec::new();
    let mut running: HashMap<i32, u64> = HashMap::new();
    // The write end of each forked shim's go pipe, until the worker says go.
    let mut held: HashMap<u64, OwnedFd> = HashMap::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let (requested, exited) = {
            let mut fds = [
                PollFd::new(requests.as_fd(), PollFlags::POLLIN),
                PollFd::new(reaped.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        if exited {
            while let Ok(Some(_)) = reaped.read_signal() {}
            reap(&mut running);
        }
        if requested {
            // Read unbuffered: what poll says is readable is all there is.
            let n = match nix::unistd::read(requests.as_fd(), &mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
                Err(e) => return Err(e.into()),
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                handle(&line, &children, &reaped, &mut running, &mut held);
            }
        }
    }
}

/// Reports every exited shim.
fn reap(running: &mut HashMap<i32, u64>) {
    loop {
        let (pid, what) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, format!("exit {code}")),
            Ok(WaitStatus::Signaled(pid, signal, _)) => (pid, format!("signal {}", signal as i32)),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        if let Some(seq) = running.remove(&pid.as_raw()) {
            say(std::io::stdout(), &format!("{seq} {what}\n"));
        }
    }
}

/// Carries out one request line: a spec (fork its shim, answer with its pid) or a go.
fn handle(
    line: &[u8],
    blocked: &SigSet,
    reaped: &SignalFd,
    running: &mut HashMap<i32, u64>,
    held: &mut HashMap<u64, OwnedFd>,
) {
    let text = String::from_utf8_lossy(line);
    let Some((seq, rest)) = text
        .trim_end()
        .split_once(' ')
        .and_then(|(seq, rest)| Some((seq.parse::<u64>().ok()?, rest)))
    else {
        warn!(line = %text, "shim launcher: malformed request");
        return;
    };
    if rest == "go" {
        if let Some(go) = held.remove(&seq) {
            let _ = nix::unistd::write(&go, b"g");
        }
        return;
    }
    match serde_json::from_str::<ShimSpec>(rest) {
        Ok(spec) => fork_shim(seq, &spec, blocked, reaped, running, held),
        Err(e) => say(
            std::io::stdin(),
            &format!("{seq} error malformed spec: {e}\n"),
        ),
    }
}

/// Forks the shim of request `seq` and answers with its pid; the shim waits for its go.
#[allow(unsafe_code)]
fn fork_shim(
    seq: u64,
    spec: &ShimSpec,
    blocked: &SigSet,
    reaped: &SignalFd,
    running: &mut HashMap<i32, u64>,
    held: &mut HashMap<u64, OwnedFd>,
) {
    let answers = std::io::stdin();
    let (go_read, go_write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => {
            say(&answers, &format!("{seq} error cannot make a pipe: {e}\n"));
            return;
        }
    };
    // The worker's orders stay blocked in the child from its first instruction until it
    // listens for them ([`shim::run_spec`] unblocks them): their default action would kill
    // it instead. The launcher itself takes them back at once.
    let orders = shim::order_signals();
    let _ = orders.thread_block();
    // SAFETY: this process is single-threaded (the launcher starts no thread), so the child
    // is a whole copy of it and may run any code, as a freshly exec'd shim would.
    let forked = unsafe { nix::unistd::fork() };
    if !matches!(forked, Ok(ForkResult::Child)) {
        let _ = orders.thread_unblock();
    }
    match forked {
        Ok(ForkResult::Child) => {
            // Other shims' go pipes are theirs: holding them would keep them waiting.
            held.clear();
            drop(go_write);
            become_shim(seq, blocked, reaped);
            let mut go = [0u8; 1];
            if !matches!(nix::unistd::read(go_read.as_fd(), &mut go), Ok(1)) {
                // The worker gave up on this request: nothing runs.
                std::process::exit(shim::EXIT_UNREPORTED);
            }
            drop(go_read);
            std::process::exit(shim::run_spec(spec));
        }
        Ok(ForkResult::Parent { child }) => {
            running.insert(child.as_raw(), seq);
            held.insert(seq, go_write);
            say(&answers, &format!("{seq} pid {child}\n"));
        }
        Err(e) => say(&answers, &format!("{seq} error cannot fork a shim: {e}\n")),
    }
}

/// Makes a forked child what an exec'd shim would be: no signal blocked, none of the
/// launcher's descriptors but the pipe (for its one line), its own process group.
fn become_shim(seq: u64, blocked: &SigSet, reaped: &SignalFd) {
    let _ = nix::unistd::close(reaped.as_raw_fd());
    let _ = blocked.thread_unblock();
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
    }
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // Its command line stays the launcher's; its name (`ps -o comm`, `pgrep xce-shim`) says
    // what it is.
    let _ = nix::sys::prctl::set_name(c"xce-shim");
    shim::announce_as(seq);
}

/// Writes one whole line to `fd` in one call (a line under `PIPE_BUF` is never interleaved).
fn say(fd: impl AsFd, line: &str) {
    let mut bytes = line.as_bytes();
    while !bytes.is_empty() {
        match nix::unistd::write(&fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_events_parse_strictly() {
        assert_eq!(parse_answer(7, "7 pid 4321\n").unwrap(), 4321);
        assert_eq!(
            parse_answer(7, "7 error cannot fork a shim: EAGAIN\n")
                .unwrap_err()
                .to_string(),
            "cannot fork a shim: EAGAIN"
        );
        assert!(parse_answer(7, "8 pid 4321\n").is_err());
        assert!(parse_answer(7, "7 pid x\n").is_err());
        assert!(parse_answer(7, "").is_err());
        assert_eq!(
            parse_event("3 said started 99"),
            Some((3, ShimEvent::Said("started 99".into())))
        );
        assert_eq!(
            parse_event("3 exit 0"),
            Some((
                3,
                ShimEvent::Ended {
                    clean: true,
                    how: "exit code 0".into()
                }
            ))
        );
        assert!(matches!(
            parse_event(&format!("3 exit {}", shim::EXIT_UNREPORTED)),
            Some((3, ShimEvent::Ended { clean: true, .. }))
        ));
        assert!(matches!(
            parse_event("3 exit 1"),
            Some((3, ShimEvent::Ended { clean: false, .. }))
        ));
        assert!(matches!(
            parse_event("3 signal 9"),
            Some((3, ShimEvent::Ended { clean: false, .. }))
        ));
        assert_eq!(parse_event("3 spoke x"), None);
        assert_eq!(parse_event("x said y"), None);
        assert_eq!(parse_event("3"), None);
    }
}
