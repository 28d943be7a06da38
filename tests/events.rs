//! `xce events`: the controller's event stream through the real binaries, across a failover.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use xce_client::types::HostState;
use xce_tests::{bin, json_of, Cluster};

/// The JSON lines of a running `xce -o json events`, read on a thread of their own.
struct Events {
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Events {
    /// Waits (up to `timeout`) for a line matching `want`, keeping every line seen.
    fn wait(&mut self, what: &str, timeout: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("no event {what} within {timeout:?}; saw {:#?}", self.seen),
            }
        }
    }
}

fn job_event(line: &Value, id: u64, state: &str) -> bool {
    line["kind"] == "job" && line["id"] == id && line["state"] == state
}

#[tokio::test]
async fn xce_events_sees_a_job_run_and_keeps_streaming_across_a_primary_kill() {
    let mut cluster = Cluster::start_full(3, None, 1, &[]);
    cluster.wait_host("w1", HostState::Ok).await;
    let mut child = Command::new(bin("xce"))
        .args(["-o", "json", "events"])
        .env("XCE_PEERS", &cluster.peers)
        .env("XDG_CACHE_HOME", cluster.dir.path().join("cache"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
            if tx.send(value).is_err() {
                return;
            }
        }
    });
    let mut events = Events {
        lines: rx,
        seen: Vec::new(),
    };
    let pid = Pid::from_raw(child.id() as i32);

    // The stream is up once a submit shows; submit until one does (bounded).
    let mut id = 0;
    for attempt in 0..20 {
        let sub = json_of(&cluster.xce_ok(&["-o", "json", "submit", "--", "true"]));
        id = sub["id"].as_u64().unwrap();
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut found = false;
        while let Ok(line) = events
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            events.seen.push(line.clone());
            if job_event(&line, id, "pending") {
                found = true;
                break;
            }
        }
        if found {
            break;
        }
        assert!(
            attempt < 19,
            "the stream never showed a submit: {:#?}",
            events.seen
        );
    }
    let pending = events.seen.last().unwrap().clone();
    assert_eq!(pending["host"], Value::Null);
    assert_eq!(pending["attempt"], 0);

    cluster.xce_ok(&["dispatch", &id.to_string(), "w1"]);
    let timeout = Duration::from_secs(30);
    let dispatched = events.wait("dispatched", timeout, |l| job_event(l, id, "dispatched"));
    assert_eq!(
        (&dispatched["host"], &dispatched["attempt"]),
        (&Value::from("w1"), &Value::from(1))
    );
    events.wait("running", timeout, |l| job_event(l, id, "running"));
    events.wait("done", timeout, |l| job_event(l, id, "done"));
    for line in &events.seen {
        assert!(
            ["job", "host", "queue", "resync"].contains(&line["kind"].as_str().unwrap()),
            "{line}"
        );
        if line["kind"] == "job" {
            for key in ["id", "state", "host", "attempt"] {
                assert!(line.get(key).is_some(), "{line} lacks {key}");
            }
        }
    }

    // Host changes carry the host's name and state.
    cluster.xce_ok(&["host", "close", "w1"]);
    let closed = events.wait("host closed", timeout, |l| l["kind"] == "host");
    assert_eq!(
        (&closed["name"], &closed["state"]),
        (&Value::from("w1"), &Value::from("closed"))
    );
    cluster.xce_ok(&["host", "open", "w1"]);
    events.wait("host open", timeout, |l| {
        l["kind"] == "host" && l["state"] == "ok"
    });

    // A primary killed: the stream says to resync, and goes on with the new primary.
    let (primary, _) = cluster.wait_primary().await;
    cluster.kill9(primary);
    events.wait("resync", timeout, |l| l["kind"] == "resync");
    let sub = json_of(&cluster.xce_ok(&["-o", "json", "submit", "--", "true"]));
    let after = sub["id"].as_u64().unwrap();
    events.wait("a submit after the failover", timeout, |l| {
        job_event(l, after, "pending")
    });

    kill(pid, Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "xce events exited {status:?}");
}

/// A subscriber that stops reading is dropped by the controller (and told why) instead of
/// holding anything up; its stream then renews itself, announcing the gap with a resync item.
#[tokio::test]
async fn a_subscriber_that_stops_reading_is_dropped_and_resyncs() {
    use xce_client::events::{EventStream, StreamItem};
    use xce_client::ops::Submit;
    use xce_client::types::{EventFilter, JobSpec, RequestToken};

    let cluster = Cluster::start(3);
    cluster.wait_primary().await;
    let mut stream = EventStream::open(cluster.client(), EventFilter::default())
        .await
        .unwrap();
    // More events than the stream buffers and the controller's backlog holds, while nobody
    // reads: every submit is still acknowledged.
    let client = cluster.client();
    let mut tasks = Vec::new();
    for t in 0..32u64 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                let op = Submit {
                    token: RequestToken::random(),
                    spec: JobSpec {
                        command: vec![format!("t{t}")],
                        ..JobSpec::default()
                    },
                    script: None,
                };
                client.call(op).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The controller gives up on the stuck listener, and says so.
    xce_tests::wait_for(
        "the subscriber to be dropped",
        Duration::from_secs(30),
        || async {
            cluster
                .controllers()
                .iter()
                .any(|c| {
                    std::fs::read_to_string(&c.log)
                        .unwrap_or_default()
                        .contains("dropping an event subscriber")
                })
                .then_some(())
        },
    )
    .await;
    // Reading again: what reached the stream's buffer before the drop (none at all when the
    // submits outran its first delivery, as on a loaded machine once), then the resync that
    // announces the gap.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut events = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(StreamItem::Event(_))) => events += 1,
            Ok(Some(StreamItem::Resync { .. })) => break,
            Ok(None) | Err(_) => panic!("no resync after {events} events"),
        }
    }
    assert!(events < 32 * 200, "{events} events before the resync");
}
