//! The `xce` CLI against a real cluster, and `xce dev`.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use xce_tests::{bin, json_of, wait_for, xce, Cluster};

fn ok_json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "xce failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(out)
}

#[tokio::test]
async fn every_command_speaks_the_documented_json() {
    let cluster = Cluster::start(3);
    cluster.wait_all_standbys().await;

    let sub = ok_json(&cluster.xce(&[
        "submit", "-o", "json", "--name", "sim-7", "--", "sh", "-c", "echo hi",
    ]));
    let id = sub["id"].as_u64().expect("id");
    // Global options work before the subcommand as well.
    let job = ok_json(&cluster.xce(&["-o", "json", "job", &id.to_string()]));
    // The submitting account, from the real uid.
    let uid = nix::unistd::getuid();
    let me = nix::unistd::User::from_uid(uid).unwrap();
    let expected = me
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| uid.to_string());
    assert_eq!(job["user"], expected.as_str());
    for key in [
        "id",
        "name",
        "user",
        "queue",
        "command",
        "cwd",
        "cpus",
        "mem_mb",
        "priority",
        "state",
        "pend_reason",
        "reason",
        "host",
        "attempt",
        "exit_code",
        "signal",
        "submit_time",
        "start_time",
        "end_time",
    ] {
        assert!(job.get(key).is_some(), "job JSON lacks {key}: {job}");
    }
    assert_eq!(job["name"], "sim-7");
    assert_eq!(job["state"], "pending");
    assert_eq!(job["queue"], "normal");
    assert_eq!(job["command"], serde_json::json!(["sh", "-c", "echo hi"]));
    assert!(job["submit_time"].as_str().unwrap().ends_with('Z'));

    let jobs = ok_json(&cluster.xce(&["jobs", "-o", "json"]));
    assert_eq!(jobs.as_array().unwrap().len(), 1);

    let queues = ok_json(&cluster.xce(&["queues", "-o", "json"]));
    assert_eq!(
        queues,
        serde_json::json!([{"name": "normal", "priority": 30, "open": true, "active": true, "pending": 1, "running": 0, "default_time_s": null, "max_time_s": null}])
    );
    ok_json(&cluster.xce(&["queue", "close", "normal", "-o", "json"]));
    let closed = cluster.xce(&["submit", "-o", "json", "--", "true"]);
    assert!(!closed.status.success());
    assert_eq!(json_of(&closed)["error"]["code"], "conflict");
    ok_json(&cluster.xce(&["queue", "open", "normal", "-o", "json"]));

    let killed = cluster.xce(&["kill", &id.to_string(), "-o", "json"]);
    ok_json(&killed);
    let job = ok_json(&cluster.xce(&["job", &id.to_string(), "-o", "json"]));
    assert_eq!(job["state"], "exited");
    assert_eq!(job["reason"], "killed");

    let cluster_json = ok_json(&cluster.xce(&["cluster", "-o", "json"]));
    assert_eq!(cluster_json["members"].as_array().unwrap().len(), 3);
    assert!(cluster_json["primary"].is_string());
    assert!(cluster_json["term"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn failures_exit_non_zero_with_the_json_error_naming_the_problem() {
    let cluster = Cluster::start(1);
    cluster.wait_primary().await;
    let cases: [(&[&str], &str, &str); 5] = [
        (&["job", "999"], "noEnt", "999"),
        (&["kill", "999"], "noEnt", "999"),
        (&["submit", "--cpus", "-2", "--", "x"], "invalid", "cpus"),
        (&["submit", "-q", "nope", "--", "x"], "noEnt", "queue"),
        (&["queue", "open", "nope"], "noEnt", "nope"),
    ];
    for (args, code, fragment) in cases {
        let mut args = args.to_vec();
        args.splice(0..0, ["-o", "json"]);
        let out = cluster.xce(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = json_of(&out);
        assert_eq!(err["error"]["code"], code, "{args:?}: {err}");
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(fragment),
            "{args:?}: {msg:?} lacks {fragment:?}"
        );
    }
    // Nothing of the above created a job.
    let jobs = ok_json(&cluster.xce(&["jobs", "-o", "json"]));
    assert_eq!(jobs, serde_json::json!([]));
}

#[tokio::test]
async fn a_dead_cluster_is_reported_as_cluster_not_ready() {
    // Nothing listens on these ports.
    let ports = xce_tests::free_ports(2);
    let peers = format!("c1=127.0.0.1:{},c2=127.0.0.1:{}", ports[0], ports[1]);
    let out = tokio::task::spawn_blocking(move || xce(&peers, &["jobs", "-o", "json"]))
        .await
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(json_of(&out)["error"]["code"], "clusterNotReady");
}

/// Stops `xce dev` (SIGTERM, so it stops its daemons) if a failed assertion leaves it running.
struct DevGuard(std::process::Child);

impl Drop for DevGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
            let _ = self.0.wait();
        }
    }
}

#[tokio::test]
async fn xce_dev_runs_a_cluster_and_stops_cleanly_on_sigterm() {
    let mut dev = DevGuard(
        Command::new(bin("xce"))
            .args(["dev", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = dev.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    let line = tokio::time::timeout(Duration::from_secs(60), line)
        .await
        .expect("xce dev announces itself within 60 s")
        .unwrap();
    let info: serde_json::Value = serde_json::from_str(&line).expect("announcement is JSON");
    let peers = info["peers"].as_str().unwrap().to_string();
    let pids: Vec<i32> = info["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["pid"].as_i64().unwrap() as i32)
        .collect();
    assert_eq!(
        pids.len(),
        7,
        "3 controllers, 2 workers, a scheduler and an apiserver: {info}"
    );
    // The apiserver answers at the URL it announced, and the dev token is a token.
    let api = info["api"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    assert!(
        info["token"].as_str().unwrap().starts_with("xce_"),
        "{info}"
    );
    let status = xce_devcluster::apiserver::get_status(&api, "/healthz", Duration::from_secs(5));
    assert_eq!(status.await, Some(200));

    let out = xce(&peers, &["submit", "-o", "json", "--", "true"]);
    assert_eq!(ok_json(&out)["id"], 1);
    // Both workers join.
    let peers2 = peers.clone();
    wait_for("both dev workers", Duration::from_secs(30), || {
        let out = xce(&peers2, &["hosts", "-o", "json"]);
        let n = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| {
                v.as_array()
                    .map(|a| a.iter().filter(|h| h["state"] == "ok").count())
            });
        async move { (n == Some(2)).then_some(()) }
    })
    .await;
    // The dev cluster's scheduler runs the job without anyone dispatching it.
    let peers3 = peers.clone();
    wait_for("job 1 to run by itself", Duration::from_secs(30), || {
        let out = xce(&peers3, &["job", "1", "-o", "json"]);
        let state = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["state"].as_str().map(str::to_string));
        async move { (state.as_deref() == Some("done")).then_some(()) }
    })
    .await;

    kill(Pid::from_raw(dev.0.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_for("xce dev to exit", Duration::from_secs(30), || {
        let s = dev.0.try_wait().unwrap();
        async move { s }
    })
    .await;
    assert!(status.success(), "xce dev exited with {status}");
    for pid in pids {
        // Signal 0 probes existence: every controller must be gone.
        assert!(
            kill(Pid::from_raw(pid), None).is_err(),
            "daemon {pid} still running"
        );
    }
    let data_dir = info["data_dir"].as_str().unwrap();
    assert!(
        !std::path::Path::new(data_dir).exists(),
        "temporary data dir {data_dir} was left behind"
    );
}

/// Submits `n` one-line jobs through `tasks` concurrent callers sharing one client.
async fn submit_many(cluster: &Cluster, n: usize, tasks: usize) {
    let client = cluster.client();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, next) = (client.clone(), next.clone());
        handles.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let op = xce_client::ops::Submit {
                    token: xce_client::types::RequestToken::random(),
                    spec: xce_client::types::JobSpec {
                        command: vec!["true".into()],
                        ..Default::default()
                    },
                    script: None,
                };
                client.call(op).await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

/// Regression: a cluster holding 500,000 jobs could not list them at all (`Message has
/// 18000028 words, which is too large`). Listings are paged now, and the CLI pages through.
#[tokio::test]
async fn two_hundred_thousand_jobs_list_completely_in_text_and_json() {
    const N: usize = 200_000;
    let cluster = Cluster::start(3);
    cluster.wait_primary().await;
    let started = std::time::Instant::now();
    submit_many(&cluster, N, 256).await;
    eprintln!("submitted {N} jobs in {:?}", started.elapsed());

    let text = cluster.xce_ok(&["jobs"]);
    let lines: Vec<&str> = std::str::from_utf8(&text.stdout).unwrap().lines().collect();
    assert!(lines[0].starts_with("ID"), "{}", lines[0]);
    let ids: Vec<u64> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=N as u64).collect::<Vec<_>>());

    let json = ok_json(&cluster.xce(&["-o", "json", "jobs"]));
    let ids: Vec<u64> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, (1..=N as u64).collect::<Vec<_>>());

    // --limit stops early, lowest ids first; filters page through the index.
    let some = ok_json(&cluster.xce(&["-o", "json", "jobs", "--limit", "2500"]));
    assert_eq!(some.as_array().unwrap().len(), 2500);
    let none = ok_json(&cluster.xce(&["-o", "json", "jobs", "--state", "running"]));
    assert_eq!(none, serde_json::json!([]));
    let bad = cluster.xce(&["jobs", "--state", "sleeping"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("'sleeping'")
            && String::from_utf8_lossy(&bad.stderr).contains("possible values: pending"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// One controller, one scheduler and worker host `w1`, ready to run jobs.
async fn one_host_cluster() -> Cluster {
    let cluster = Cluster::builder()
        .controllers(1)
        .workers(1, &[])
        .schedulers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster
        .wait_host("w1", xce_client::types::HostState::Ok)
        .await;
    cluster
}

/// `xce jobs` narrows by name, result and submit time, shows the columns asked for, and
/// `xce submit --parsable` prints the id alone.
#[tokio::test]
async fn jobs_are_listed_by_name_result_and_time_in_the_columns_asked_for() {
    let cluster = one_host_cluster().await;
    let submit = |name: &str, command: &str| {
        let out = cluster.xce(&[
            "submit",
            "--parsable",
            "-J",
            name,
            "--",
            "sh",
            "-c",
            command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8(out.stdout).unwrap();
        printed
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("not an id alone: {printed:?}"))
    };
    let ok = submit("good", "true");
    let bad = submit("bad", "exit 3");
    let also_good = submit("good", "true");
    for id in [ok, bad, also_good] {
        cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
    }
    let ids = |args: &[&str]| -> Vec<u64> {
        let mut all = vec!["-o", "json", "jobs"];
        all.extend_from_slice(args);
        ok_json(&cluster.xce(&all))
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids(&["--name", "good"]), vec![ok, also_good]);
    assert_eq!(ids(&["--result", "failed"]), vec![bad]);
    assert_eq!(
        ids(&["--result", "completed", "--name", "bad"]),
        Vec::<u64>::new()
    );
    assert_eq!(ids(&["--since", "now-1h"]), vec![ok, bad, also_good]);
    assert_eq!(ids(&["--since", "now+1h"]), Vec::<u64>::new());
    let since_bad = cluster.xce(&["-o", "json", "jobs", "--since", "last tuesday"]);
    assert!(!since_bad.status.success());
    let e = json_of(&since_bad);
    assert_eq!(e["error"]["code"], "invalid", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"last tuesday\""),
        "{e}"
    );

    let table = cluster.xce_ok(&[
        "jobs",
        "--format",
        "id,name,result,exit_code",
        "--name",
        "bad",
    ]);
    let text = String::from_utf8(table.stdout).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        vec![
            vec!["ID", "NAME", "RESULT", "EXIT"],
            vec![&bad.to_string(), "bad", "failed", "3"]
        ]
    );
    let unknown = cluster.xce(&["jobs", "--format", "id,wallclock"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no column \"wallclock\""));
}

/// A job gets the submitting shell's environment (`--export`, default ALL) but nothing bound
/// to the submitting host or session, `-e` over it, and its own `XCE_*` variables, which
/// nothing submitted can fake.
#[tokio::test]
async fn a_job_gets_the_submitter_s_environment_and_its_own_variables() {
    let cluster = one_host_cluster().await;
    // A time limit needs the cluster's newest version.
    cluster.wait_version().await;
    let submit_dir = tempfile::tempdir().unwrap();
    let run_dir = tempfile::tempdir().unwrap();
    let run = run_dir.path().to_string_lossy().into_owned();
    let submit = |file: &str, export: Option<&str>| -> u64 {
        let script = format!("env > {file}");
        let mut args = vec![
            "submit",
            "--parsable",
            "-J",
            "envjob",
            "--cwd",
            &run,
            "-t",
            "5",
        ];
        if let Some(e) = export {
            args.extend_from_slice(&["--export", e]);
        }
        args.extend_from_slice(&[
            "-e",
            "FROM_E=e",
            "-e",
            "XCE_JOB_ID=fake",
            "-e",
            "XCE_JOB_SPOOL=/tmp/fake-spool",
            "-e",
            "USER=mallory",
            "--",
            "sh",
            "-c",
        ]);
        args.push(&script);
        let out = cluster
            .xce_command(&args)
            .current_dir(submit_dir.path())
            .env("MY_EXPORTED", "hello")
            .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
            .env("XCE_JOB_ATTEMPT", "99")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let all = submit("all.env", None);
    let none = submit("none.env", Some("NONE,PICKED=1"));
    for id in [all, none] {
        let job = cluster.wait_job(id, "ended", |j| j.state.is_final()).await;
        assert_eq!(
            job.result,
            Some(xce_client::types::JobResult::Completed),
            "{job:?}"
        );
    }
    let read = |file: &str| -> std::collections::BTreeMap<String, String> {
        std::fs::read_to_string(run_dir.path().join(file))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let env = read("all.env");
    assert_eq!(env.get("MY_EXPORTED").map(String::as_str), Some("hello"));
    assert_eq!(env.get("FROM_E").map(String::as_str), Some("e"));
    assert_eq!(
        env.get("SSH_AUTH_SOCK"),
        None,
        "a session's agent is not the job's"
    );
    // Nothing submitted fakes the spool mark (how a restarted worker finds its jobs'
    // processes) or the account the job runs as.
    assert!(
        env.get("XCE_JOB_SPOOL")
            .is_some_and(|s| s != "/tmp/fake-spool"),
        "{env:?}"
    );
    assert_ne!(env.get("USER").map(String::as_str), Some("mallory"));
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let expected = [
        ("XCE_JOB_ID", all.to_string()),
        ("XCE_JOB_NAME", "envjob".to_string()),
        ("XCE_QUEUE", "normal".to_string()),
        ("XCE_SUBMIT_DIR", submit_dir.path().display().to_string()),
        ("XCE_SUBMIT_HOST", host),
        ("XCE_JOB_CPUS", "1".to_string()),
        ("XCE_JOB_MEM_MB", "0".to_string()),
        ("XCE_NODELIST", "w1".to_string()),
        ("XCE_JOB_ATTEMPT", "1".to_string()),
        ("XCE_TIME_LIMIT_S", "300".to_string()),
    ];
    for (name, value) in expected {
        assert_eq!(env.get(name), Some(&value), "{name}");
    }
    assert!(env.get("XCE_JOB_USER").is_some_and(|u| !u.is_empty()));
    let env = read("none.env");
    assert_eq!(env.get("MY_EXPORTED"), None, "--export NONE");
    assert_eq!(env.get("PICKED").map(String::as_str), Some("1"));
    assert_eq!(env.get("FROM_E").map(String::as_str), Some("e"));
    assert_eq!(env.get("XCE_JOB_ID"), Some(&none.to_string()));
    assert!(env.contains_key("PATH"), "a job always has a PATH");

    // A shell environment over format 7's 64 KiB goes through at version 8, where it shares
    // the script limit (4 MiB by default): the job gets it whole.
    let big = "x".repeat(70 * 1024);
    let out = cluster
        .xce_command(&[
            "submit",
            "--parsable",
            "--cwd",
            &run,
            "--",
            "sh",
            "-c",
            "printf %s \"$BIG_MODULE_TABLE\" | wc -c > big.count",
        ])
        .env("BIG_MODULE_TABLE", &big)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let job = cluster.wait_job(id, "done", |j| j.state.is_final()).await;
    assert_eq!(job.state, xce_client::types::JobState::Done, "{job:?}");
    let count = std::fs::read_to_string(run_dir.path().join("big.count")).unwrap();
    assert_eq!(count.trim(), (70 * 1024).to_string());
    let named = cluster
        .xce_command(&["submit", "--parsable", "--export", "PATH", "--", "true"])
        .env("BIG_MODULE_TABLE", &big)
        .output()
        .unwrap();
    assert!(
        named.status.success(),
        "{}",
        String::from_utf8_lossy(&named.stderr)
    );

    let bad = cluster.xce(&["-o", "json", "submit", "--export", "PATH,ALL", "--", "true"]);
    assert!(!bad.status.success());
    let e = json_of(&bad);
    assert_eq!(e["error"]["code"], "invalid", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ALL must come first"),
        "{e}"
    );
}
