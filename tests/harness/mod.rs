//! A multi-process test harness: starts the real `xce-controller` binaries on 127.0.0.1 with
//! free ports and per-test data directories, waits on conditions with deadlines, stops by pid,
//! and runs the `xce` CLI against them.
//!
//! The binaries are taken from the cargo target directory this test was built into (or from
//! `XCE_BIN_DIR`); the controller and cli crates have integration tests of their own, so
//! `cargo test`/`cargo nextest run` on the workspace always builds them first.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use xce_client::ops::{GetCluster, Op, Reply};
use xce_client::types::{ClusterInfo, MemberRole};
use xce_client::{parse_candidates, Client, ClientConfig, ConnectOptions, Connection};

/// Where the built binaries are.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XCE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// Path of one built binary; panics with a hint when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo nextest run --workspace`",
        path.display()
    );
    path
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Free TCP ports on 127.0.0.1, distinct from each other.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One controller process.
pub struct Controller {
    pub name: String,
    pub port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Controller {
    /// The pid while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// A cluster of controller processes; every process is killed when it is dropped.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub peers: String,
    pub controllers: Vec<Controller>,
    config: Option<PathBuf>,
}

impl Cluster {
    /// Starts `n` controllers.
    pub fn start(n: usize) -> Cluster {
        Self::start_with_config(n, None)
    }

    /// Starts `n` controllers, all given the YAML `config` text.
    pub fn start_with_config(n: usize, config: Option<&str>) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("xce-test-")
            .tempdir()
            .unwrap();
        let ports = free_ports(n);
        let peers = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("c{}=127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let config = config.map(|text| {
            let path = dir.path().join("controller.yaml");
            std::fs::write(&path, text).unwrap();
            path
        });
        let controllers = ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let name = format!("c{}", i + 1);
                Controller {
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
                    name,
                    port: *port,
                    child: None,
                }
            })
            .collect();
        let mut cluster = Cluster {
            dir,
            peers,
            controllers,
            config,
        };
        for i in 0..n {
            cluster.restart(i);
        }
        cluster
    }

    /// Starts controller `i` (again); its log is appended to.
    pub fn restart(&mut self, i: usize) {
        assert!(self.controllers[i].child.is_none(), "c{} is running", i + 1);
        let c = &self.controllers[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&c.log)
            .unwrap();
        let mut cmd = Command::new(bin("xce-controller"));
        cmd.args(["--name", &c.name, "--peers", &self.peers, "--data-dir"])
            .arg(&c.data_dir)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        let child = cmd.spawn().unwrap();
        self.controllers[i].child = Some(child);
    }

    fn signal(&mut self, i: usize, sig: Signal) {
        let pid = self.controllers[i].pid().expect("controller is running");
        kill(Pid::from_raw(pid as i32), sig).unwrap();
    }

    /// SIGKILL controller `i` and reap it.
    pub fn kill9(&mut self, i: usize) {
        self.signal(i, Signal::SIGKILL);
        if let Some(mut child) = self.controllers[i].child.take() {
            child.wait().unwrap();
        }
    }

    /// SIGTERM controller `i`, wait for it to exit, and return its exit status.
    pub async fn stop(&mut self, i: usize) -> std::process::ExitStatus {
        self.signal(i, Signal::SIGTERM);
        let mut child = self.controllers[i].child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("c{} did not exit within 15 s of SIGTERM", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A failover client over every controller.
    pub fn client(&self) -> Client {
        self.client_for(&self.peers)
    }

    /// A failover client over the given candidate list.
    pub fn client_for(&self, peers: &str) -> Client {
        let mut config = ClientConfig::default();
        config.retry.max_attempts = 10;
        Client::new(parse_candidates(peers).unwrap(), config)
    }

    /// Sends one op to controller `i` only, without failover: what that node itself answers.
    pub async fn ask<O: Op>(&self, i: usize, op: O) -> Reply<O::Output> {
        let conn = Connection::connect(&self.controllers[i].addr(), ConnectOptions::default())
            .await
            .unwrap();
        conn.call(Duration::from_secs(10), move |client| op.send(client))
            .await
            .unwrap()
    }

    /// Waits until a primary serves, and returns its index and the cluster it reports.
    pub async fn wait_primary(&self) -> (usize, ClusterInfo) {
        let client = self.client();
        wait_for("a primary", Duration::from_secs(30), || {
            let client = client.clone();
            async move {
                let info = client.call(GetCluster).await.ok()?;
                let name = info.primary.clone()?;
                let idx = self.controllers.iter().position(|c| c.name == name)?;
                Some((idx, info))
            }
        })
        .await
    }

    /// Waits until the primary reports every running controller as a standby.
    pub async fn wait_all_standbys(&self) -> (usize, ClusterInfo) {
        let running = self
            .controllers
            .iter()
            .filter(|c| c.child.is_some())
            .count();
        let client = self.client();
        wait_for(
            "all controllers in the cluster",
            Duration::from_secs(30),
            || {
                let client = client.clone();
                async move {
                    let info = client.call(GetCluster).await.ok()?;
                    let up = info
                        .members
                        .iter()
                        .filter(|m| m.role != MemberRole::Unreachable)
                        .count();
                    let idx = self
                        .controllers
                        .iter()
                        .position(|c| Some(&c.name) == info.primary.as_ref())?;
                    (up == running).then_some((idx, info))
                }
            },
        )
        .await
    }

    /// Runs the `xce` CLI with `XCE_PEERS` set to this cluster.
    pub fn xce(&self, args: &[&str]) -> Output {
        xce(&self.peers, args)
    }

    /// Panics if any controller log holds an ERROR line.
    pub fn assert_no_errors(&self) {
        for c in &self.controllers {
            let log = std::fs::read_to_string(&c.log).unwrap_or_default();
            let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
            assert!(
                errors.is_empty(),
                "{} logged errors:\n{}",
                c.name,
                errors.join("\n")
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.controllers {
            if let Some(mut child) = c.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Runs the `xce` CLI with the given peers.
pub fn xce(peers: &str, args: &[&str]) -> Output {
    Command::new(bin("xce"))
        .args(args)
        .env("XCE_PEERS", peers)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Parses a command's stdout as JSON, with the output in the panic message when it is not.
pub fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
