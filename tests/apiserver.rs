//! The HTTP API through real binaries: jobs over HTTP, idempotent submits across an apiserver
//! restart, a primary killed under eight HTTP submitters, the majority down (fast 503s, then
//! recovery without a restart, the event stream included), a failover no request saw, users'
//! tokens acting as their users, the listener's limits, and `xce dev`'s `api:` line.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use xce_client::ops::SubmitJob;
use xce_client::types::{JobSpec, RequestToken, Role};
use xce_tests::http::{Events, Http};
use xce_tests::{bin, wait_for, Cluster};

/// A cluster of three controllers, `workers` workers with a scheduler, and an apiserver,
/// every daemon ready.
async fn cluster(workers: usize) -> Cluster {
    let mut builder = Cluster::builder().controllers(3).apiservers(1, &[]);
    if workers > 0 {
        builder = builder.workers(workers, &[]).schedulers(1, &[]);
    }
    let mut cluster = builder.start();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    cluster
}

async fn wait_state(api: &Http, id: u64, state: &str) -> Value {
    wait_for(
        &format!("job {id} {state}"),
        Duration::from_secs(30),
        || async {
            let got = api.get(&format!("/v1/jobs/{id}")).await;
            (got.body["state"] == state).then_some(got.body)
        },
    )
    .await
}

#[tokio::test]
async fn jobs_are_submitted_listed_read_and_killed_over_http_and_a_key_submits_once() {
    let mut cluster = cluster(1).await;
    let api = cluster.api(0);
    let made = api
        .post(
            "/v1/jobs",
            &json!({"command": ["sleep", "30"], "name": "nap"}),
        )
        .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let id = made.body["id"].as_u64().unwrap();
    assert_eq!(made.body["job"]["name"], "nap");
    wait_state(&api, id, "running").await;
    let listed = api.get("/v1/jobs?state=running").await;
    assert_eq!(listed.status, 200);
    let ids: Vec<u64> = listed.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![id]);
    let killed = api.post(&format!("/v1/jobs/{id}/kill"), &json!({})).await;
    assert_eq!(killed.status, 200, "{:?}", killed.body);
    let ended = wait_state(&api, id, "exited").await;
    assert_eq!(ended["reason"], "killed");
    assert_eq!(api.get("/v1/jobs/424242").await.status, 404);

    // A time limit is kept and read back; one past the cluster's maximum is refused by name.
    let limited = api
        .post(
            "/v1/jobs",
            &json!({"command": ["true"], "time_limit_s": 90}),
        )
        .await;
    assert_eq!(limited.status, 201, "{:?}", limited.body);
    let limited_id = limited.body["id"].as_u64().unwrap();
    let read = api.get(&format!("/v1/jobs/{limited_id}")).await;
    assert_eq!(read.body["time_limit_s"], 90, "{:?}", read.body);
    let too_long = api
        .post(
            "/v1/jobs",
            &json!({"command": ["true"], "time_limit_s": 400 * 86_400}),
        )
        .await;
    assert_eq!(too_long.status, 400, "{:?}", too_long.body);
    assert_eq!(too_long.body["error"]["code"], "invalid");
    let message = too_long.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("time_limit_s"), "{message}");

    // One key, one job: again, and again after the apiserver restarted.
    let keyed = || async {
        api.request(
            "POST",
            "/v1/jobs",
            Some(&json!({"command": ["true"]})),
            &[("Idempotency-Key", "nightly-2026-12-02")],
        )
        .await
        .unwrap()
    };
    let first = keyed().await;
    let again = keyed().await;
    assert_eq!((first.status, again.status), (201, 200));
    assert_eq!(first.body["id"], again.body["id"]);
    cluster
        .local
        .stop_apiserver(0, Duration::from_secs(10))
        .unwrap();
    cluster.local.start_apiserver(0).unwrap();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    let after_restart = keyed().await;
    assert_eq!(after_restart.status, 200);
    assert_eq!(after_restart.body["id"], first.body["id"]);
    cluster.assert_no_errors();
}

/// An array's tasks are named `ID_IDX` and `ID_[A-B]` over HTTP as on the command line: a
/// release or kill of some tasks, a task read by its name, the throttle changed by a patch.
#[tokio::test]
async fn an_array_s_tasks_are_named_id_idx_over_http() {
    let cluster = cluster(1).await;
    cluster.wait_version().await;
    let api = cluster.api(0);
    let made = api
        .post(
            "/v1/jobs",
            &json!({"command": ["true"], "array": "0-5", "hold": true}),
        )
        .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let a = made.body["id"].as_u64().unwrap();
    // `[` and `]` travel percent-encoded in a path.
    let released = api
        .post(&format!("/v1/jobs/{a}_%5B0-1%5D/release"), &json!({}))
        .await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    assert_eq!(released.body["target"], format!("{a}_[0-1]"));
    let task = wait_for("task 0 done", Duration::from_secs(30), || async {
        let got = api.get(&format!("/v1/jobs/{a}_0")).await;
        (got.body["state"] == "done").then_some(got.body)
    })
    .await;
    assert_eq!(
        (&task["array_job_id"], &task["array_task_id"]),
        (&json!(a), &json!(0)),
        "{task}"
    );
    // A task still waiting reads as its array.
    assert_eq!(api.get(&format!("/v1/jobs/{a}_3")).await.body["id"], a);
    let patched = api
        .request(
            "PATCH",
            &format!("/v1/jobs/{a}"),
            Some(&json!({"throttle": 1})),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.body["array"]["spec"], "0-5%1", "{:?}", patched.body);
    let killed = api
        .post(&format!("/v1/jobs/{a}_%5B4-5%5D/kill"), &json!({}))
        .await;
    assert_eq!(killed.status, 200, "{:?}", killed.body);
    let array = api.get(&format!("/v1/jobs/{a}")).await.body;
    assert_eq!(array["array"]["pending"], 2, "{array}");
    let bad = api.get(&format!("/v1/jobs/{a}_x")).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    let missing = api.post(&format!("/v1/jobs/{a}_9/kill"), &json!({})).await;
    assert_eq!(missing.status, 404, "{:?}", missing.body);
    cluster.assert_no_errors();
}

/// Eight HTTP clients submit, each with its own Idempotency-Keys and retrying a 503, while
/// the primary is killed: every answer is 201, 200 or a 503 inside the failover window, and
/// every key made exactly one job.
#[tokio::test]
async fn a_primary_killed_under_eight_http_submitters_loses_and_repeats_no_job() {
    const CLIENTS: usize = 8;
    const EACH: usize = 25;
    let mut cluster = cluster(0).await;
    let api = cluster.api(0);
    let done = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let unavailable = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (api, done, unavailable) = (api.clone(), done.clone(), unavailable.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let key = format!("client{c}-job{n}");
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    assert!(Instant::now() < deadline, "{key}: no answer within 30 s");
                    let got = api
                        .request(
                            "POST",
                            "/v1/jobs",
                            Some(&json!({"command": ["true"], "name": key})),
                            &[("Idempotency-Key", key.as_str())],
                        )
                        .await;
                    // Only controllers die here: the apiserver answers every request.
                    let got = got.unwrap_or_else(|e| panic!("{key}: no HTTP answer: {e:?}"));
                    match got.status {
                        200 | 201 => {
                            let id = got.body["id"].as_u64().unwrap();
                            done.lock().unwrap().insert(key.clone(), id);
                            break;
                        }
                        503 => {
                            assert!(got.headers.contains_key("retry-after"));
                            unavailable.lock().unwrap().push(Instant::now());
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        other => panic!("{key}: {other} {:?}", got.body),
                    }
                }
            }
        }));
    }
    wait_for(
        "a quarter of the submits",
        Duration::from_secs(30),
        || async { (done.lock().unwrap().len() >= CLIENTS * EACH / 4).then_some(()) },
    )
    .await;
    let (primary, _) = cluster.wait_primary().await;
    let killed_at = Instant::now();
    cluster.kill9(primary);
    for t in tasks {
        t.await.unwrap();
    }
    let done = done.lock().unwrap().clone();
    assert_eq!(done.len(), CLIENTS * EACH);
    let ids: BTreeSet<u64> = done.values().copied().collect();
    assert_eq!(ids.len(), CLIENTS * EACH, "two keys share a job");
    // The cluster holds exactly those jobs, each once, named by its key.
    let mut seen = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/jobs?limit=100&cursor={c}"),
            None => "/v1/jobs?limit=100".to_string(),
        };
        let page = api.get(&path).await;
        assert_eq!(page.status, 200, "{:?}", page.body);
        for job in page.body["jobs"].as_array().unwrap() {
            let name = job["name"].as_str().unwrap().to_string();
            assert!(
                seen.insert(name.clone(), job["id"].as_u64().unwrap())
                    .is_none(),
                "{name} twice"
            );
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(
        seen, done,
        "the cluster's jobs are exactly the acknowledged ones"
    );
    // 503s only inside the failover window.
    for at in unavailable.lock().unwrap().iter() {
        let after = at.saturating_duration_since(killed_at);
        assert!(
            *at >= killed_at && after < Duration::from_secs(5),
            "a 503 {after:?} after the kill"
        );
    }
}

/// With the majority down, requests answer 503 fast once degraded and `/readyz` says why;
/// after recovery the apiserver is ready and its event stream delivers again, with no
/// restart of it and no request needed to notice.
#[tokio::test]
async fn with_the_majority_down_requests_fail_fast_then_everything_resumes_by_itself() {
    let mut cluster = cluster(0).await;
    let api = cluster.api(0);
    let mut events = api.events("/v1/events?kind=job", None).await.unwrap();
    let (primary, _) = cluster.wait_primary().await;
    let others: Vec<usize> = (0..3).filter(|i| *i != primary).collect();
    cluster.kill9(primary);
    cluster.kill9(others[0]);
    // The first requests spend their budget; once one has, the rest fail fast.
    wait_for("a 503", Duration::from_secs(30), || async {
        (api.get("/v1/queues").await.status == 503).then_some(())
    })
    .await;
    // For several of the breaker's TTLs (2 s), so that every probe of the cluster, each
    // slower than a TTL with no majority, is crossed: the breaker must not lapse meanwhile.
    let mut took = Vec::new();
    let sampled = Instant::now();
    while sampled.elapsed() < Duration::from_secs(7) && took.len() < 500 {
        let got = api.get("/v1/queues").await;
        assert_eq!(got.status, 503, "{:?}", got.body);
        assert!(got.headers.contains_key("retry-after"));
        assert_eq!(got.body["error"]["code"], "clusterNotReady");
        took.push(got.took);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.sort();
    // Fast is milliseconds (xce-bench api measures it). A request that spent its retry
    // budget instead takes 0.9 s or more; the bound on the slowest leaves room for a loaded
    // CI machine stalling one request, the 95th percentile holds the 100 ms of the issue.
    let (p95, slowest) = (took[took.len() * 95 / 100], took[took.len() - 1]);
    assert!(
        p95 < Duration::from_millis(100) && slowest < Duration::from_millis(500),
        "degraded answers took {p95:?} (95th percentile), {slowest:?} at most, of {}",
        took.len()
    );
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status, 503);
    assert!(ready.body["reason"].as_str().is_some(), "{:?}", ready.body);
    assert_eq!(api.get("/healthz").await.status, 200);

    cluster.restart(primary);
    cluster.restart(others[0]);
    // No API request: only the apiserver's own health check can notice.
    wait_for("/readyz 200 again", Duration::from_secs(30), || async {
        (api.get("/readyz").await.status == 200).then_some(())
    })
    .await;
    resyncs_then_delivers(&cluster, &mut events, "the majority's return").await;
}

/// A failover, then a majority outage, that no HTTP request saw: the apiserver joins the new
/// primary by itself, and its event stream goes on.
#[tokio::test]
async fn a_failover_or_outage_no_request_saw_is_followed_by_the_health_check_and_the_stream() {
    let mut cluster = cluster(0).await;
    let api = cluster.api(0);
    let mut events = api.events("/v1/events", None).await.unwrap();
    let (primary, _) = cluster.wait_primary().await;
    let failovers = || async {
        let body = raw_get(&api.addr, "/metrics").await.unwrap_or_default();
        let count = |name| metric_value(&body, name).unwrap_or(0.0);
        (
            count("xce_apiserver_backend_reconnects_total"),
            count("xce_apiserver_backend_rejoins_total"),
        )
    };
    let before = failovers().await;
    cluster.kill9(primary);
    cluster.wait_primary().await;
    wait_for(
        "/readyz 200 on the new primary",
        Duration::from_secs(30),
        || async {
            let ready = api.get("/readyz").await;
            let moved =
                ready.body["connected_to"].as_str() != Some(&cluster.controllers()[primary].addr());
            (ready.status == 200 && moved).then_some(())
        },
    )
    .await;
    let made = resyncs_then_delivers(&cluster, &mut events, "a failover").await;
    let last = api.get(&format!("/v1/jobs/{made}")).await;
    assert_eq!(last.status, 200);
    // The metrics count the failover: a new connection (whether it got there by a rotation
    // or a redirect), and a rejoin.
    let after = failovers().await;
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "reconnects and rejoins before {before:?}, after {after:?}"
    );

    // Then an outage no request sees: the majority goes, and comes back. Only the health
    // check notices either, and the stream resumes by itself.
    let (second, _) = cluster.wait_primary().await;
    cluster.kill9(second);
    wait_for(
        "/readyz 503 with no majority",
        Duration::from_secs(30),
        || async { (api.get("/readyz").await.status == 503).then_some(()) },
    )
    .await;
    cluster.restart(primary);
    cluster.restart(second);
    wait_for(
        "/readyz 200 after the outage",
        Duration::from_secs(60),
        || async { (api.get("/readyz").await.status == 200).then_some(()) },
    )
    .await;
    resyncs_then_delivers(&cluster, &mut events, "the outage").await;
}

/// With TLS the apiserver acts for each request's token: a user controls only their own
/// jobs, an operator all; no token is 401, and a revoked token is refused at once.
#[tokio::test]
async fn with_tls_each_request_acts_as_its_token_s_user() {
    let mut cluster = Cluster::builder()
        .controllers(3)
        .workers(1, &[])
        .schedulers(1, &[])
        .apiservers(1, &[])
        .tls()
        .start();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    let api = cluster.api(0);
    let alice = api.with_token(&cluster.token("alice", Role::User).await);
    let bob = api.with_token(&cluster.token("bob", Role::User).await);
    let operator = api.with_token(&cluster.token("olga", Role::Operator).await);
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status, 200, "{:?}", ready.body);
    assert_eq!(ready.body["authentication"], true);
    assert_eq!(api.get("/v1/jobs").await.status, 401);
    let made = alice
        .post(
            "/v1/jobs",
            &json!({"command": ["sleep", "30"], "user": "bob"}),
        )
        .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let id = made.body["id"].as_u64().unwrap();
    assert_eq!(
        made.body["job"]["user"], "alice",
        "a job is its token's user's"
    );
    let refused = bob.post(&format!("/v1/jobs/{id}/kill"), &json!({})).await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    assert_eq!(
        bob.post("/v1/queues/normal/close", &json!({})).await.status,
        403
    );
    let killed = operator
        .post(&format!("/v1/jobs/{id}/kill"), &json!({}))
        .await;
    assert_eq!(killed.status, 200, "{:?}", killed.body);
    // Revoked: refused on the very next request.
    let alice_id = alice
        .token
        .as_deref()
        .unwrap()
        .split('_')
        .nth(1)
        .unwrap()
        .to_string();
    let out = cluster.xce(&["token", "revoke", &alice_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // First where a connection's own caller is not re-checked (finding the primary): the
    // apiserver acts for alice through a capability it kept from her earlier requests.
    let cluster_info = alice.get("/v1/cluster").await;
    assert_eq!(cluster_info.status, 401, "{:?}", cluster_info.body);
    let after = alice.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(after.status, 401, "{:?}", after.body);
    cluster.assert_no_errors();
}

/// The listener's limits: connections beyond the limit are refused at once, and idle ones
/// are closed, so a client that opens and holds connections cannot lock others out.
#[tokio::test]
async fn connections_beyond_the_limit_are_refused_and_idle_ones_closed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("apiserver.yaml");
    std::fs::write(
        &config,
        "limits:\n  max_connections: 16\n  idle_timeout_ms: 1000\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let mut cluster = Cluster::builder()
        .controllers(1)
        .apiservers(1, &["--config", &config])
        .start();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    let api = cluster.api(0);
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(tokio::net::TcpStream::connect(&api.addr).await.unwrap());
    }
    // Let the apiserver accept them all, then one more is answered 503.
    wait_for("a 503 at the limit", Duration::from_secs(10), || async {
        let got = api.request("GET", "/healthz", None, &[]).await.ok()?;
        (got.status == 503).then_some(())
    })
    .await;
    // The idle ones are closed within the idle timeout, and then there is room.
    wait_for("room again", Duration::from_secs(10), || async {
        let got = api.request("GET", "/healthz", None, &[]).await.ok()?;
        (got.status == 200).then_some(())
    })
    .await;
    drop(held);
}

/// `xce dev` prints the apiserver's URL on a line starting `api: `.
#[tokio::test]
async fn xce_dev_prints_the_apiserver_s_url() {
    let mut dev = Command::new(bin("xce"))
        .args(["dev", "--workers", "0", "--schedulers", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(dev.id() as i32);
    let stdout = dev.stdout.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("api: ").map(str::to_string))
    });
    let url = tokio::time::timeout(Duration::from_secs(60), url).await;
    let stopped = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let url = url.expect("xce dev announces within 60 s").unwrap();
    let url = url.expect("an api: line");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    stopped.unwrap();
    let status = tokio::task::spawn_blocking(move || dev.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

/// Every daemon serves Prometheus metrics on its `--metrics-listen` address (the controller
/// from its YAML), and the apiserver on `/metrics`.
#[tokio::test]
async fn every_daemon_serves_its_metrics() {
    let ports = xce_tests::free_ports(3);
    let addr = |i: usize| format!("127.0.0.1:{}", ports[i]);
    let (worker, scheduler) = (addr(1), addr(2));
    let mut cluster = Cluster::builder()
        .controllers(1)
        .config(&format!("metrics_listen: {}\n", addr(0)))
        .workers(1, &["--metrics-listen", &worker])
        .schedulers(1, &["--metrics-listen", &scheduler])
        .apiservers(1, &[])
        .start();
    cluster
        .local
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    let api = cluster.api(0);
    let made = api.post("/v1/jobs", &json!({"command": ["true"]})).await;
    assert_eq!(made.status, 201);
    wait_state(&api, made.body["id"].as_u64().unwrap(), "done").await;
    let text = |addr: String, wanted: &'static [&'static str]| async move {
        wait_for(
            &format!("{wanted:?} at {addr}"),
            Duration::from_secs(30),
            || {
                let addr = addr.clone();
                async move {
                    let body = raw_get(&addr, "/metrics").await?;
                    wanted.iter().all(|w| body.contains(w)).then_some(body)
                }
            },
        )
        .await
    };
    text(
        addr(0),
        &[
            "xce_controller_jobs{state=\"done\"} 1",
            "xce_controller_raft_term ",
            "xce_controller_primary 1",
            "xce_controller_heartbeats_total ",
            "xce_controller_apply_duration_seconds_bucket",
            "xce_controller_raft_leader_changes_total ",
        ],
    )
    .await;
    text(
        worker,
        &["xce_worker_heartbeats_total ", "xce_worker_attempts_held "],
    )
    .await;
    text(
        scheduler,
        &[
            "xce_scheduler_placements_total 1",
            "xce_scheduler_active 1",
            "xce_scheduler_publish_retries_total 0",
        ],
    )
    .await;
    let body = raw_get(&api.addr, "/metrics").await.unwrap();
    assert!(body.contains("xce_apiserver_http_requests_total{route=\"/v1/jobs\",method=\"POST\",status=\"201\"} 1"), "{body}");
    // The commit index is the log's, and never behind what was applied.
    let body = raw_get(&addr(0), "/metrics").await.unwrap();
    let committed = metric_value(&body, "xce_controller_raft_commit_index").unwrap_or(0.0);
    let applied = metric_value(&body, "xce_controller_raft_applied_index").unwrap_or(0.0);
    assert!(
        committed > 0.0 && committed >= applied,
        "commit index {committed}, applied {applied}:\n{body}"
    );
}

/// After the cluster came back: the stream says it must re-read state (events are not
/// replayed across primaries), then delivers the event of a job submitted now. Returns the
/// job's id.
async fn resyncs_then_delivers(cluster: &Cluster, events: &mut Events, after: &str) -> u64 {
    events
        .until(Duration::from_secs(30), |e| e.data["kind"] == "resync")
        .await
        .unwrap_or_else(|| panic!("a resync item after {after}"));
    let made = cluster
        .client()
        .call(SubmitJob {
            token: RequestToken::random(),
            spec: JobSpec {
                command: vec!["true".into()],
                ..JobSpec::default()
            },
            script: None,
        })
        .await
        .unwrap();
    events
        .until(Duration::from_secs(30), |e| {
            e.data["kind"] == "job" && e.data["id"].as_u64() == Some(made.id)
        })
        .await
        .unwrap_or_else(|| panic!("the stream delivers again after {after}"));
    made.id
}

/// The value of the metric `name` (unlabelled) in a Prometheus text body.
fn metric_value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The body of `GET path` on `addr` as text (the metrics endpoints are not JSON).
async fn raw_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    Some(text)
}
