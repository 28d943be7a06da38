//! The service manager's notify protocol (systemd `Type=notify`, `WatchdogSec=`): every daemon
//! says when it serves (`READY=1`), that it is stopping (`STOPPING=1`), and, from the loop
//! that does its work, that it is alive (`WATCHDOG=1`), so a stuck loop is restarted.
//!
//! [`init`] takes the manager's variables out of the environment at the start of `main`
//! (before any thread exists), so no job or child process inherits them; without them every
//! call here does nothing.

use std::os::unix::net::UnixDatagram;
use std::sync::OnceLock;
use std::time::Duration;

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
}
