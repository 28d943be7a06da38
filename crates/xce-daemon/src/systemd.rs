//! The service manager's notify protocol (systemd `Type=notify`, `WatchdogSec=`): every daemon
//! says when it serves (`READY=1`), that it is stopping (`STOPPING=1`), and, from the loop
//! that does its work, that it is alive (`WATCHDOG=1`), so a stuck loop is restarted.
//!
//! [`init`] takes the manager's variables out of the environment at the start of `main`
//! (before any thread exists), so no job or child process inherits them; without them every
//! call here does nothing.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::warn;

/// What the service manager asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manager {
    /// `NOTIFY_SOCKET`: a path, or an abstract name when it starts with `@`.
    socket: String,
    /// Half of `WATCHDOG_USEC` (systemd's advice), when the watchdog is on for this process.
    watchdog: Option<Duration>,
}

static MANAGER: OnceLock<Option<Manager>> = OnceLock::new();

/// Reads and removes `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`. Call first thing in
/// `main`, while the process has one thread (removing variables races with threads that read
/// the environment).
pub fn init() {
    let vars = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];
    let [socket, usec, pid] = vars.map(|v| std::env::var(v).ok());
    for v in vars {
        std::env::remove_var(v);
    }
    let manager = manager_of(socket, usec, pid, std::process::id());
    let _ = MANAGER.set(manager);
}

/// The manager the variables describe, for process `me`.
fn manager_of(
    socket: Option<String>,
    usec: Option<String>,
    pid: Option<String>,
    me: u32,
) -> Option<Manager> {
    let socket = socket.filter(|s| !s.is_empty())?;
    let ours = pid.is_none_or(|p| p.trim().parse() == Ok(me));
    let watchdog = usec
        .and_then(|u| u.trim().parse::<u64>().ok())
        .filter(|&u| u > 0 && ours)
        .map(|u| Duration::from_micros(u) / 2);
    Some(Manager { socket, watchdog })
}

fn manager() -> Option<&'static Manager> {
    MANAGER.get().and_then(Option::as_ref)
}

/// Sends `message` to the manager; a failure is logged, never fatal (the daemon serves
/// either way, and the manager acts on what it did not hear).
fn send(message: &str) {
    let Some(m) = manager() else { return };
    if let Err(e) = send_to(&m.socket, message) {
        warn!(socket = %m.socket, error = %e, "could not notify the service manager");
    }
}

fn send_to(socket: &str, message: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(message.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(message.as_bytes(), socket)?;
        }
    }
    Ok(())
}

/// The daemon serves: its listener is bound and its state open.
pub fn ready(status: &str) {
    send(&format!(
        "READY=1\nSTATUS={status}\nMAINPID={}",
        std::process::id()
    ));
}

/// The daemon has begun a clean shutdown.
pub fn stopping() {
    send("STOPPING=1");
}

/// How often the watchdog wants to hear from us, when it is on.
pub fn watchdog_interval() -> Option<Duration> {
    manager().and_then(|m| m.watchdog)
}

/// Pings the watchdog every half period while `healthy()` holds; never returns. Spawn it on
/// the runtime (or `LocalSet`) that does the daemon's work: when that loop is stuck this task
/// does not run, the pings stop and the manager restarts the daemon. Without a watchdog it
/// returns at once.
pub async fn keep_alive(healthy: impl Fn() -> bool) {
    let Some(every) = watchdog_interval() else {
        return;
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_healthy = true;
    loop {
        tick.tick().await;
        let now = healthy();
        if now {
            send("WATCHDOG=1");
        } else if was_healthy {
            warn!("unhealthy: no longer answering the service manager's watchdog");
        }
        was_healthy = now;
    }
}

/// Pings the watchdog every half period, from a thread of its own, while every worker thread
/// of the multi-threaded `runtime` makes progress, tasks spawned on it still run, and
/// `healthy()` holds. A task pinging from such a runtime ([`keep_alive`]) goes on from the
/// other threads while one is stuck; this one stops. Without a watchdog it does nothing.
pub fn keep_alive_threads(
    runtime: tokio::runtime::Handle,
    healthy: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<()> {
    let Some(every) = watchdog_interval() else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("xce-watchdog".into())
        .spawn(move || watch_threads(&runtime, every, healthy, || send("WATCHDOG=1")))?;
    Ok(())
}

/// The loop behind [`keep_alive_threads`], with the ping passed in. Returns once the runtime
/// has shut down (its tick task is gone).
fn watch_threads(
    runtime: &tokio::runtime::Handle,
    every: Duration,
    healthy: impl Fn() -> bool,
    mut ping: impl FnMut(),
) {
    let started = Instant::now();
    let ticked = Arc::new(AtomicU64::new(0));
    let tick = Duration::max(every / 4, Duration::from_millis(1));
    runtime.spawn(tick_task(ticked.clone(), started, tick));
    let metrics = runtime.metrics();
    let mut progress = Progress::default();
    let mut next_ping = started + every;
    let mut was = Verdict::Alive;
    // The task holds the other reference until the runtime drops it at shutdown.
    while Arc::strong_count(&ticked) > 1 {
        let slept_from = Instant::now();
        std::thread::sleep(tick);
        let now = Instant::now();
        if now.duration_since(slept_from) > tick + every / 2 {
            // The whole process was paused (SIGSTOP, a frozen cgroup, a stalled VM): every
            // thread and the tick look stale at once. Judge afresh once the runtime has had
            // two ticks to run, so a pause costs at most one ping, as it would a task.
            progress = Progress::default();
            next_ping = now + tick * 2;
        }
        let stalled = progress.observe(&worker_readings(&metrics), now);
        if now < next_ping {
            continue;
        }
        next_ping = now + every;
        let since_tick = since(started, now, ticked.load(Ordering::Acquire));
        let verdict = if stalled >= every {
            Verdict::ThreadStuck(stalled)
        } else if since_tick >= every {
            Verdict::TasksStalled(since_tick)
        } else if !healthy() {
            Verdict::Unhealthy
        } else {
            Verdict::Alive
        };
        match verdict {
            Verdict::Alive => ping(),
            _ if was == Verdict::Alive => verdict.warn(),
            _ => {}
        }
        was = verdict;
    }
}

/// How long before `now` a tick stamped `ticked_nanos` after `started` was. A tick stamped
/// after `now` was taken (the task raced this thread) is no time ago, never an underflow.
fn since(started: Instant, now: Instant, ticked_nanos: u64) -> Duration {
    now.duration_since(started)
        .saturating_sub(Duration::from_nanos(ticked_nanos))
}

/// Bumps `ticked` (nanoseconds since `started`) every `every`: proof that tasks still run.
async fn tick_task(ticked: Arc<AtomicU64>, started: Instant, every: Duration) {
    let mut interval = tokio::time::interval(every);
    loop {
        interval.tick().await;
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        ticked.store(nanos, Ordering::Release);
    }
}

/// Why a ping was held back, or that it was not.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Alive,
    /// A worker thread has been inside one poll this long.
    ThreadStuck(Duration),
    /// No task has run on the runtime for this long.
    TasksStalled(Duration),
    /// The daemon's own check failed.
    Unhealthy,
}

impl Verdict {
    fn warn(self) {
        match self {
            Verdict::Alive => {}
            Verdict::ThreadStuck(d) => warn!(
                stalled_ms = d.as_millis() as u64,
                "unhealthy: a runtime thread is stuck; no longer answering the service manager's watchdog"
            ),
            Verdict::TasksStalled(d) => warn!(
                stalled_ms = d.as_millis() as u64,
                "unhealthy: tasks are not being run; no longer answering the service manager's watchdog"
            ),
            Verdict::Unhealthy => {
                warn!("unhealthy: no longer answering the service manager's watchdog")
            }
        }
    }
}

/// What tokio publishes of each worker thread: its park/unpark count (odd while parked) and
/// its busy time. A busy thread publishes both at every maintenance tick (every 61 polls) and
/// whenever it parks; a thread stuck inside one poll publishes nothing.
type Reading = (u64, Duration);

fn worker_readings(metrics: &tokio::runtime::RuntimeMetrics) -> Vec<Reading> {
    (0..metrics.num_workers())
        .map(|w| {
            (
                metrics.worker_park_unpark_count(w),
                metrics.worker_total_busy_duration(w),
            )
        })
        .collect()
}

/// Since when each worker thread has been awake without publishing anything new.
#[derive(Debug, Default)]
struct Progress {
    workers: Vec<(Reading, Instant)>,
}

impl Progress {
    /// Takes a fresh reading and returns the longest time any worker thread has spent awake
    /// without progress (zero when all are parked or moving).
    fn observe(&mut self, readings: &[Reading], now: Instant) -> Duration {
        if self.workers.len() != readings.len() {
            self.workers = readings.iter().map(|&r| (r, now)).collect();
        }
        let mut longest = Duration::ZERO;
        for ((seen, since), &reading) in self.workers.iter_mut().zip(readings) {
            let parked = reading.0 % 2 == 1;
            if parked || reading != *seen {
                *seen = reading;
                *since = now;
            }
            longest = longest.max(now.duration_since(*since));
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn the_watchdog_is_ours_only_when_its_pid_is_ours_or_unset() {
        let m = manager_of(s("/run/n"), s("2000000"), None, 7).unwrap();
        assert_eq!(m.watchdog, Some(Duration::from_secs(1)));
        let m = manager_of(s("/run/n"), s("2000000"), s("7"), 7).unwrap();
        assert_eq!(m.watchdog, Some(Duration::from_secs(1)));
        let m = manager_of(s("/run/n"), s("2000000"), s("8"), 7).unwrap();
        assert_eq!(m.watchdog, None);
        let m = manager_of(s("@abstract"), s("zero"), None, 7).unwrap();
        assert_eq!(m.watchdog, None);
        assert_eq!(manager_of(None, s("2000000"), None, 7), None);
        assert_eq!(manager_of(s(""), None, None, 7), None);
    }

    #[test]
    fn messages_reach_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        send_to(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("xce-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        send_to(&format!("@{name}"), "WATCHDOG=1").unwrap();
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1");
    }

    #[test]
    fn only_an_awake_thread_that_publishes_nothing_counts_as_stalled() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Progress::default();
        // Two threads awake (even counts).
        assert_eq!(p.observe(&[(2, ms(5)), (4, ms(7))], t0), Duration::ZERO);
        // The first moved (busy time grew), the second published nothing.
        assert_eq!(p.observe(&[(2, ms(9)), (4, ms(7))], t0 + ms(100)), ms(100));
        assert_eq!(p.observe(&[(2, ms(9)), (4, ms(7))], t0 + ms(300)), ms(300));
        // The second parks (odd count): no longer stalled; the first now is, since 100 ms.
        assert_eq!(p.observe(&[(2, ms(9)), (5, ms(8))], t0 + ms(400)), ms(300));
        // A parked thread stays unstalled however long it sleeps.
        assert_eq!(
            p.observe(&[(4, ms(9)), (5, ms(8))], t0 + ms(900)),
            Duration::ZERO
        );
        assert_eq!(p.observe(&[(4, ms(9)), (5, ms(8))], t0 + ms(950)), ms(50));
        // A runtime with another number of threads starts over.
        assert_eq!(p.observe(&[(1, ms(1))], t0 + ms(999)), Duration::ZERO);
    }

    #[test]
    fn a_tick_stamped_after_the_reading_is_no_time_ago() {
        let started = Instant::now();
        let now = started + Duration::from_millis(100);
        assert_eq!(since(started, now, 40_000_000), Duration::from_millis(60));
        assert_eq!(since(started, now, 100_000_001), Duration::ZERO);
    }

    /// Waits up to 10 s for `n` pings.
    fn pings(rx: &std::sync::mpsc::Receiver<()>, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for i in 0..n {
            let left = deadline.saturating_duration_since(Instant::now());
            rx.recv_timeout(left)
                .unwrap_or_else(|e| panic!("ping {} of {n} did not come: {e}", i + 1));
        }
    }

    #[test]
    fn one_stuck_thread_of_two_stops_the_pings_and_saturated_ones_do_not() {
        use std::sync::atomic::AtomicBool;
        let every = Duration::from_millis(100);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = runtime.handle().clone();
        let watcher = std::thread::spawn(move || {
            watch_threads(
                &handle,
                every,
                || true,
                || {
                    let _ = tx.send(());
                },
            );
        });
        pings(&rx, 3);

        // Every thread busy with short polls: the pings go on.
        let spin = Arc::new(AtomicBool::new(true));
        for _ in 0..4 {
            let spin = spin.clone();
            runtime.spawn(async move {
                while spin.load(Ordering::Relaxed) {
                    let until = Instant::now() + Duration::from_micros(200);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    tokio::task::yield_now().await;
                }
            });
        }
        while rx.try_recv().is_ok() {}
        pings(&rx, 5);
        spin.store(false, Ordering::Relaxed);

        // One thread stuck inside a poll; the other free. No ping once the stall is a
        // whole period old.
        let stuck = Arc::new(AtomicBool::new(true));
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let hold = stuck.clone();
        runtime.spawn(async move {
            let _ = entered_tx.send(());
            while hold.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        entered.recv_timeout(Duration::from_secs(10)).unwrap();
        /// Frees the stuck thread however the test ends, so the runtime can shut down.
        struct Free(Arc<AtomicBool>);
        impl Drop for Free {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        let free = Free(stuck);
        let stuck_at = Instant::now();
        while rx.try_recv().is_ok() {}
        // Pings decided before the stall was a period old may still come; then a long silence.
        while rx.recv_timeout(every * 10).is_ok() {
            let late = stuck_at.elapsed();
            assert!(late < every * 3, "a ping came {late:?} into a stuck thread");
        }

        // Unstuck: the pings resume.
        drop(free);
        pings(&rx, 2);
        drop(runtime);
        watcher.join().unwrap();
    }
}
