//! Running under systemd: every unit in `deploy/systemd/` passes `systemd-analyze verify`,
//! and every daemon, started as systemd starts a `Type=notify` service with a watchdog
//! (`NOTIFY_SOCKET`, `WATCHDOG_USEC`), says `READY=1` once it serves, keeps sending
//! `WATCHDOG=1`, stops sending it while its loop is stuck, and on SIGTERM says `STOPPING=1` and
//! exits 0. Their logs are the same everywhere too: `XCE_LOG_FORMAT=json` makes every line
//! a JSON object, and a bad `log:` key or level in any daemon's YAML is refused by name.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::net::UnixDatagram;

const DAEMONS: [&str; 4] = ["controller", "worker", "scheduler", "apiserver"];

/// The unit files, by daemon.
fn unit(daemon: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/systemd")
        .join(format!("xce-{daemon}.service"))
}

/// `systemd-analyze`, installed from Debian's packages when this machine lacks it.
fn systemd_analyze() -> &'static str {
    let present = |cmd: &str| Command::new(cmd).arg("--version").output().is_ok();
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "systemd"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !present("systemd-analyze") && !install() {
        let _ = Command::new("apt-get").arg("update").output();
        install();
    }
    assert!(
        present("systemd-analyze"),
        "systemd-analyze is missing and could not be installed (apt-get install systemd)"
    );
    "systemd-analyze"
}

/// Every unit verifies cleanly (any warning fails: systemd ignores an unknown key or a bad
/// value with a warning and exit status 0). The units are checked in a root of their own
/// holding the system's units and a stand-in for each binary, so the check needs nothing
/// installed in /usr/local.
#[test]
fn every_unit_verifies_without_a_warning() {
    let analyze = systemd_analyze();
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dir in ["usr/local/bin", "etc/systemd/system", "bin", "lib/systemd"] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    let copied = Command::new("cp")
        .args(["-r", "/lib/systemd/system"])
        .arg(r.join("lib/systemd"))
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::copy("/bin/kill", r.join("bin/kill")).unwrap();
    for daemon in DAEMONS {
        let bin = r.join(format!("usr/local/bin/xce-{daemon}"));
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(
            unit(daemon),
            r.join(format!("etc/systemd/system/xce-{daemon}.service")),
        )
        .unwrap();
    }
    // A restarted worker adopts its jobs' shims: systemd must not kill them with it.
    let worker = std::fs::read_to_string(unit("worker")).unwrap();
    assert!(worker.contains("\nKillMode=process\n"), "{worker}");
    for daemon in DAEMONS {
        let out = Command::new(analyze)
            .arg("verify")
            .arg(format!("--root={}", r.display()))
            .arg(format!("xce-{daemon}.service"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "xce-{daemon}.service: {said}"
        );
    }
}

/// What the service manager heard from one daemon.
struct Manager {
    socket: UnixDatagram,
    heard: Vec<String>,
}

impl Manager {
    fn bind(path: &Path) -> Manager {
        Manager {
            socket: UnixDatagram::bind(path).unwrap(),
            heard: Vec::new(),
        }
    }

    /// Waits until `what` holds of everything heard so far, or panics naming `who`.
    async fn wait(&mut self, who: &str, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = vec![0u8; 4096];
        while !done(&self.heard) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(got) = tokio::time::timeout(left, self.socket.recv(&mut buf)).await else {
                panic!("{who}: no {what} within 20 s; heard {:?}", self.heard);
            };
            let n = got.unwrap();
            self.heard
                .extend(String::from_utf8_lossy(&buf[..n]).lines().map(String::from));
        }
    }

    fn count(&self, line: &str) -> usize {
        self.heard.iter().filter(|l| *l == line).count()
    }

    /// Drops what was heard until now, and what was sent but not yet read.
    fn forget(&mut self) {
        self.heard.clear();
        let mut buf = vec![0u8; 4096];
        while self.socket.try_recv(&mut buf).is_ok() {}
    }
}

/// Starts `xce-<daemon>` with `args`, the notify socket `socket` and a 300 ms watchdog.
fn start(daemon: &str, args: &[String], socket: &Path, log: &Path) -> Child {
    Command::new(xce_tests::bin(&format!("xce-{daemon}")))
        .args(args)
        .env("NOTIFY_SOCKET", socket)
        .env("WATCHDOG_USEC", "300000")
        .env("XCE_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Each daemon with the flags it needs to run as c1, w1, s1 and an apiserver on `api`
/// against `peers`, its data under `dir`.
fn daemon_args(dir: &Path, peers: &str, api: &str) -> [(&'static str, Vec<String>); 4] {
    let flags = |list: &[&str]| list.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    let under = |name: &str| dir.join(name).display().to_string();
    [
        (
            "controller",
            flags(&["--name", "c1", "--peers", peers, "--data-dir", &under("c1")]),
        ),
        (
            "worker",
            flags(&[
                "--name",
                "w1",
                "--peers",
                peers,
                "--spool-dir",
                &under("w1"),
            ]),
        ),
        ("scheduler", flags(&["--name", "s1", "--peers", peers])),
        ("apiserver", flags(&["--listen", api, "--peers", peers])),
    ]
}

/// Kills every child still running when the test ends, pass or fail.
struct Children(Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test]
async fn every_daemon_speaks_the_notify_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ports = xce_tests::free_ports(2);
    let peers = format!("c1=127.0.0.1:{}", ports[0]);
    let args = daemon_args(d, &peers, &format!("127.0.0.1:{}", ports[1]));
    let mut managers = Vec::new();
    let mut children = Children(Vec::new());
    for (daemon, args) in &args {
        let socket = d.join(format!("{daemon}.notify"));
        managers.push(Manager::bind(&socket));
        let child = start(daemon, args, &socket, &d.join(format!("{daemon}.log")));
        children.0.push((daemon.to_string(), child));
    }
    for (m, (daemon, _)) in managers.iter_mut().zip(&args) {
        m.wait(daemon, "READY=1", |h| h.iter().any(|l| l == "READY=1"))
            .await;
        m.wait(daemon, "three WATCHDOG=1", |h| {
            h.iter().filter(|l| *l == "WATCHDOG=1").count() >= 3
        })
        .await;
        assert!(m.count("STOPPING=1") == 0, "{daemon}: {:?}", m.heard);
    }

    // `systemctl reload` (SIGHUP) without TLS: nothing to reload, and no one dies of it.
    for (_, child) in &children.0 {
        kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).unwrap();
    }
    for (m, (daemon, _)) in managers.iter_mut().zip(&args) {
        m.forget();
        m.wait(daemon, "WATCHDOG=1 after SIGHUP", |h| {
            h.iter().any(|l| l == "WATCHDOG=1")
        })
        .await;
    }
    for (daemon, child) in &mut children.0 {
        assert_eq!(child.try_wait().unwrap(), None, "{daemon} ended on SIGHUP");
    }

    // A stuck process sends nothing; once it runs again the pings resume.
    let (_, controller) = &children.0[0];
    let pid = Pid::from_raw(controller.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    managers[0].forget();
    let quiet = tokio::time::timeout(
        Duration::from_millis(600),
        managers[0].wait("controller", "a ping while stopped", |h| !h.is_empty()),
    )
    .await;
    kill(pid, Signal::SIGCONT).unwrap();
    assert!(
        quiet.is_err(),
        "heard {:?} while stopped",
        managers[0].heard
    );
    managers[0]
        .wait("controller", "WATCHDOG=1 again", |h| {
            h.iter().any(|l| l == "WATCHDOG=1")
        })
        .await;

    // SIGTERM: STOPPING=1, then a clean exit. Dependents first, the controller last.
    for i in (0..DAEMONS.len()).rev() {
        let (daemon, child) = &mut children.0[i];
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        managers[i]
            .wait(daemon, "STOPPING=1", |h| {
                h.iter().any(|l| l == "STOPPING=1")
            })
            .await;
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{daemon} did not exit on SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let log = std::fs::read_to_string(d.join(format!("{daemon}.log"))).unwrap_or_default();
        assert!(status.success(), "{daemon} exited {status}: {log}");
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{daemon} logged nothing");
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{daemon}: not a JSON line ({e}): {line}"));
            assert!(
                v["level"].is_string() && v["fields"].is_object(),
                "{daemon}: {line}"
            );
        }
    }
}

/// Every daemon takes the same `log:` keys in its YAML and names a bad one, or a bad level,
/// before it starts.
#[test]
fn every_daemon_names_a_bad_log_setting() {
    let dir = tempfile::tempdir().unwrap();
    let base = daemon_args(dir.path(), "c1=127.0.0.1:1", "127.0.0.1:0");
    let cases = [
        ("log:\n  level: xce=loud\n", "log.level: \"xce=loud\""),
        ("log:\n  colour: true\n", "colour"),
        ("log:\n  format: xml\n", "xml"),
    ];
    for (daemon, args) in &base {
        for (i, (yaml, needle)) in cases.iter().enumerate() {
            let file = dir.path().join(format!("{daemon}-{i}.yaml"));
            std::fs::write(&file, yaml).unwrap();
            let out = Command::new(xce_tests::bin(&format!("xce-{daemon}")))
                .args(args)
                .arg("--config")
                .arg(&file)
                .arg("--check-config")
                .env_remove("RUST_LOG")
                .env_remove("XCE_LOG_LEVEL")
                .env_remove("XCE_LOG_FORMAT")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{daemon} took {yaml:?}");
            assert!(err.contains(needle), "{daemon} on {yaml:?}: {err}");
        }
    }
}

#[test]
fn every_daemon_names_bad_peers_or_a_missing_config_file_once() {
    let dir = tempfile::tempdir().unwrap();
    for (daemon, args) in &daemon_args(dir.path(), "c1=127.0.0.1:1", "127.0.0.1:0") {
        // The same daemon's flags, without its --peers: XCE_PEERS gives the bad list.
        let mut flags = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--peers" {
                it.next();
            } else {
                flags.push(a.clone());
            }
        }
        let out = Command::new(xce_tests::bin(&format!("xce-{daemon}")))
            .args(&flags)
            .arg("--check-config")
            .env("XCE_PEERS", "c1=nowhere")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{daemon} took a bad XCE_PEERS");
        let needle = "\"c1=nowhere\": missing ':port'";
        assert_eq!(err.matches(needle).count(), 1, "{daemon}: {err}");

        let missing = dir.path().join("missing.yaml");
        let out = Command::new(xce_tests::bin(&format!("xce-{daemon}")))
            .args(args)
            .arg("--config")
            .arg(&missing)
            .arg("--check-config")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{daemon} took a missing config file");
        assert!(err.contains("missing.yaml"), "{daemon}: {err}");
        assert_eq!(err.matches("No such file").count(), 1, "{daemon}: {err}");
    }
}
