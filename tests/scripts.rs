//! Batch jobs as their users write them (issue 33), through the real binaries: job scripts
//! with `#XCE` directives (from standard input, deleted as soon as the submit returns), output
//! files where users look for them, the submitter's environment, holds and begin times, the
//! warning signal before the time limit (across a worker restart), a running job's limit
//! changed, signals, and scripts stored once however many jobs share them.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use xce_client::types::{HostState, Job, JobResult, JobSpec, JobState, PendCode, RequestToken};
use xce_tests::{json_of, submitted_id, wait_for, Cluster};

/// A lost grace long enough that a restarted worker keeps its jobs.
const CONFIG: &str = "hosts:\n  heartbeat_ttl_ms: 3000\n  lost_grace_ms: 8000\n";
const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--kill-grace-ms", "1000"];
const SCHEDULER_ARGS: &[&str] = &["--lease-ttl-ms", "1500"];

/// A cluster that places jobs by itself: one controller, one worker, a scheduler.
async fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .controllers(1)
        .config(CONFIG)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    cluster
}

/// Kills, however the test ends, every pid its jobs wrote into `<dir>/*.pid`.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let pids = std::fs::read_dir(&self.0)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|s| s.trim().parse().ok());
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn workdir(cluster: &Cluster) -> (PathBuf, Reaper) {
    let dir = cluster.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    (dir.clone(), Reaper(dir))
}

/// Runs `xce -o json submit ARGS` in `dir` with `script` on its standard input and `env`
/// added to its environment.
fn submit_stdin(
    cluster: &Cluster,
    dir: &Path,
    args: &[&str],
    script: &[u8],
    env: &[(&str, &str)],
) -> Output {
    let mut all = vec!["-o", "json", "submit"];
    all.extend_from_slice(args);
    let mut cmd = cluster.xce_command(&all);
    cmd.current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(script).unwrap();
    child.wait_with_output().unwrap()
}

async fn ended(cluster: &Cluster, id: u64) -> Job {
    cluster.wait_job(id, "ended", |j| j.state.is_final()).await
}

fn shown(cluster: &Cluster, id: u64) -> serde_json::Value {
    json_of(&cluster.xce_ok(&["-o", "json", "job", &id.to_string()]))
}

/// A script with `#XCE --time`, `--stdout` and `-J` lines, submitted on standard input from
/// a file deleted as soon as the submit returns, runs with those options, sees a variable
/// exported in the submitting shell and its own variables, and writes `NAME-ID.out` in the
/// submit directory; `xce job --script` gives it back; a job whose command or interpreter
/// does not exist ends `failed`, naming it; a directive that does not parse is refused
/// naming its line.
#[tokio::test]
async fn a_script_from_stdin_runs_with_its_directives_after_its_file_is_gone() {
    let cluster = cluster().await;
    let (work, _reaper) = workdir(&cluster);
    let script = "#!/bin/sh\n\
                  #XCE -J sim --time 0:30\n\
                  #XCE --stdout %x-%j.out\n\
                  echo \"name=$XCE_JOB_NAME user=$XCE_JOB_USER limit=$XCE_TIME_LIMIT_S\"\n\
                  echo \"mark=$MARK dir=$XCE_SUBMIT_DIR cpus=$XCE_JOB_CPUS host=$XCE_NODELIST\"\n\
                  echo oops >&2\n";
    let file = work.join("job.sh");
    std::fs::write(&file, script).unwrap();
    let body = std::fs::read(&file).unwrap();
    let out = submit_stdin(&cluster, &work, &[], &body, &[("MARK", "exported")]);
    std::fs::remove_file(&file).unwrap();
    let id = submitted_id(&out);
    let job = ended(&cluster, id).await;
    assert_eq!((job.state, job.attempt), (JobState::Done, 1), "{job:?}");
    assert_eq!(job.spec.name, "sim");
    assert_eq!(job.spec.limits.time_limit_s, Some(30));
    let output = work.join(format!("sim-{id}.out"));
    let printed = std::fs::read_to_string(&output).unwrap();
    let user = job.spec.user.clone();
    assert_eq!(
        printed,
        format!(
            "name=sim user={user} limit=30\nmark=exported dir={} cpus=1 host=w1\noops\n",
            work.display()
        )
    );
    let json = shown(&cluster, id);
    assert_eq!(json["script"], true);
    assert_eq!(json["stdout"], output.display().to_string());
    assert_eq!(json["stderr"], output.display().to_string());
    assert_eq!(
        (&json["held"], &json["begin_time"]),
        (&serde_json::json!(false), &serde_json::Value::Null)
    );
    let back = cluster.xce_ok(&["job", &id.to_string(), "--script"]);
    assert_eq!(
        back.stdout, body,
        "the stored script is not the one submitted"
    );
    let text =
        String::from_utf8_lossy(&cluster.xce_ok(&["job", &id.to_string()]).stdout).into_owned();
    assert!(
        text.contains(&format!("{} (on w1)", output.display())),
        "{text}"
    );

    // `xce submit SCRIPT ARGS` and `--wrap`; the default output file, xce-ID.out.
    let path = work.join("args.sh");
    std::fs::write(&path, "echo \"$# $1 $2\"\n").unwrap();
    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &work.to_string_lossy(),
        path.to_str().unwrap(),
        "a b",
        "-c",
    ]);
    let with_args = json_of(&out)["id"].as_u64().unwrap();
    std::fs::remove_file(&path).unwrap();
    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &work.to_string_lossy(),
        "--wrap",
        "echo wrapped $XCE_JOB_ID",
    ]);
    let wrapped = json_of(&out)["id"].as_u64().unwrap();
    for id in [with_args, wrapped] {
        assert_eq!(ended(&cluster, id).await.state, JobState::Done);
    }
    let read = |id: u64| std::fs::read_to_string(work.join(format!("xce-{id}.out"))).unwrap();
    assert_eq!(read(with_args), "2 a b -c\n");
    assert_eq!(read(wrapped), format!("wrapped {wrapped}\n"));
    assert_eq!(shown(&cluster, with_args)["name"], "args.sh");

    // What cannot start ends failed, with the cause.
    let cwd = work.to_string_lossy().into_owned();
    let missing = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--",
        "/no/such/command",
    ]));
    let no_shell = submitted_id(&submit_stdin(
        &cluster,
        &work,
        &[],
        b"#!/no/such/shell\ntrue\n",
        &[],
    ));
    for (id, cause) in [(missing, "/no/such/command"), (no_shell, "/no/such/shell")] {
        let job = ended(&cluster, id).await;
        assert_eq!(job.result, Some(JobResult::Failed), "{job:?}");
        assert!(
            job.reason.as_deref().unwrap_or("").contains(cause),
            "{job:?}"
        );
    }

    // A directive that does not parse, and a binary file: refused before anything is sent.
    let bad = submit_stdin(
        &cluster,
        &work,
        &[],
        b"#!/bin/sh\n#XCE -J ok\n#XCE --cpuz 4\ntrue\n",
        &[],
    );
    assert!(!bad.status.success());
    let error = json_of(&bad);
    assert_eq!(error["error"]["code"], "invalid", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("line 3") && message.contains("--cpuz"),
        "{message}"
    );
    let binary = submit_stdin(&cluster, &work, &[], b"\x7fELF\0\0\0", &[]);
    assert_eq!(json_of(&binary)["error"]["code"], "invalid");
    cluster.assert_no_errors();
}

/// A held job waits with the code `held` until released; a job with `--begin now+3s` waits
/// with `begin_time` and starts no sooner.
#[tokio::test]
async fn a_held_job_runs_once_released_and_a_begin_time_is_kept() {
    let cluster = cluster().await;
    let (work, _reaper) = workdir(&cluster);
    let cwd = work.to_string_lossy().into_owned();
    let held = submitted_id(&cluster.xce(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--hold",
        "--wrap",
        "date +%s%3N > held.ms",
    ]));
    let job = cluster
        .wait_job(held, "its reason", |j| j.pend_code == Some(PendCode::Held))
        .await;
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(shown(&cluster, held)["held"], true);
    let listing = String::from_utf8_lossy(&cluster.xce_ok(&["jobs"]).stdout).into_owned();
    assert!(listing.contains("held"), "{listing}");
    let released_at = xce_client::when::now_ms();
    cluster.xce_ok(&["release", &held.to_string()]);
    let job = ended(&cluster, held).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert!(job.start_time_ms.unwrap() >= released_at);
    assert!(!job.spec.hold);

    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--begin",
        "now+3s",
        "--wrap",
        "date +%s%3N > begun.ms",
    ]);
    let submitted_at = xce_client::when::now_ms();
    let begins = json_of(&out)["id"].as_u64().unwrap();
    let waiting = cluster
        .wait_job(begins, "its reason", |j| {
            j.pend_code == Some(PendCode::BeginTime) || j.state.is_final()
        })
        .await;
    assert_eq!(waiting.state, JobState::Pending, "{waiting:?}");
    assert!(
        waiting
            .pend_reason
            .as_deref()
            .unwrap_or("")
            .starts_with("begins at"),
        "{waiting:?}"
    );
    let begin = waiting.spec.begin_time_ms.unwrap();
    assert!(
        begin + 1000 >= submitted_at + 2000,
        "begin {begin}, submitted {submitted_at}"
    );
    assert!(shown(&cluster, begins)["begin_time"].is_string());
    let job = ended(&cluster, begins).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let ran: u64 = std::fs::read_to_string(work.join("begun.ms"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        ran >= begin,
        "started at {ran}, before its begin time {begin}"
    );
    assert!(job.start_time_ms.unwrap() >= begin);

    // `xce hold` on a pending job: held until released, whatever its begin time.
    let out = cluster.xce_ok(&[
        "-o",
        "json",
        "submit",
        "--cwd",
        &cwd,
        "--begin",
        "now+1hour",
        "--wrap",
        "true",
    ]);
    let later = json_of(&out)["id"].as_u64().unwrap().to_string();
    cluster.xce_ok(&["hold", &later]);
    let job = cluster
        .wait_job(later.parse().unwrap(), "its hold", |j| {
            j.pend_code == Some(PendCode::Held)
        })
        .await;
    assert!(job.spec.hold, "{job:?}");
    assert_eq!(shown(&cluster, job.id)["held"], true);
    cluster.xce_ok(&["kill", &later]);
}

/// `--signal USR1@5` with `--time 0:08`: USR1 about 5 s before the TERM of the limit, each
/// once, though the worker restarts between them; `xce update --time` gives a running job
/// more time, which it gets without a restart; `xce signal` reaches a running job.
#[tokio::test]
async fn the_warning_signal_comes_before_the_limit_across_a_worker_restart() {
    let mut cluster = cluster().await;
    let (work, _reaper) = workdir(&cluster);
    let record = "trap 'echo usr1 $(date +%s%3N) >> signals' USR1\n\
                  trap 'echo term $(date +%s%3N) >> signals; exit 0' TERM\n\
                  echo $$ > job.pid\n\
                  date +%s%3N > start.ms\n\
                  while :; do sleep 0.1; done\n";
    let script = format!("#!/bin/sh\n#XCE --signal USR1@5 --time 0:08\n{record}");
    let id = submitted_id(&submit_stdin(&cluster, &work, &[], script.as_bytes(), &[]));
    let lines = |name: &str| -> Vec<(String, u64)> {
        std::fs::read_to_string(work.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (what, ms) = l.split_once(' ')?;
                Some((what.to_string(), ms.parse().ok()?))
            })
            .collect()
    };
    wait_for("the warning", Duration::from_secs(30), || async {
        lines("signals")
            .iter()
            .any(|(w, _)| w == "usr1")
            .then_some(())
    })
    .await;
    cluster.local.kill9_worker(0).unwrap();
    cluster.local.start_worker(0).unwrap();
    let job = ended(&cluster, id).await;
    assert_eq!(
        (job.result, job.attempt),
        (Some(JobResult::Timeout), 1),
        "{job:?}"
    );
    let start: u64 = std::fs::read_to_string(work.join("start.ms"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let got = lines("signals");
    let names: Vec<&str> = got.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(names, ["usr1", "term"], "{got:?}");
    let (warned, termed) = (got[0].1 - start, got[1].1 - start);
    assert!(
        (2000..=4500).contains(&warned),
        "USR1 {warned} ms after the start"
    );
    assert!(
        (4000..=6000).contains(&(termed - warned)),
        "TERM {} ms after USR1",
        termed - warned
    );

    // More time for a running job: a 3 s limit raised to 20 s; the job ends its own way.
    let cwd = work.to_string_lossy().into_owned();
    let out = cluster.xce_ok(&["-o", "json", "submit", "--cwd", &cwd, "--time", "0:03", "--wrap", "trap 'echo got-usr2 >> usr2' USR2; echo $$ > long.pid; i=0; while [ $i -lt 60 ]; do sleep 0.1; i=$((i+1)); done"]);
    let longer = json_of(&out)["id"].as_u64().unwrap();
    cluster
        .wait_job(longer, "running", |j| j.state == JobState::Running)
        .await;
    wait_for("its pid", Duration::from_secs(10), || async {
        work.join("long.pid").exists().then_some(())
    })
    .await;
    cluster.xce_ok(&["update", &longer.to_string(), "--time", "0:20"]);
    cluster.xce_ok(&["signal", &longer.to_string(), "USR2"]);
    let job = ended(&cluster, longer).await;
    assert_eq!(
        (job.state, job.result),
        (JobState::Done, Some(JobResult::Completed)),
        "{job:?}"
    );
    assert_eq!(job.spec.limits.time_limit_s, Some(20));
    assert_eq!(
        std::fs::read_to_string(work.join("usr2")).unwrap(),
        "got-usr2\n"
    );
    let bad = cluster.xce(&["-o", "json", "signal", &longer.to_string(), "NOPE"]);
    assert_eq!(json_of(&bad)["error"]["code"], "invalid");
}

/// 1,000 jobs sharing one 64 KiB script add under 1 MiB to the cluster's state (its backup,
/// which holds every job and every script): the script is stored once.
#[tokio::test]
async fn a_thousand_jobs_sharing_a_script_store_it_once() {
    let cluster = Cluster::start_full(1, None, 0, &[]);
    cluster.wait_primary().await;
    cluster.wait_version().await;
    let backup = |name: &str| -> u64 {
        let file = cluster.dir.path().join(name);
        cluster.xce_ok(&["admin", "snapshot", "save", file.to_str().unwrap()]);
        std::fs::metadata(&file).unwrap().len()
    };
    let before = backup("before");
    let mut body = b"#!/bin/sh\n".to_vec();
    while body.len() < 64 * 1024 {
        body.extend_from_slice(b"# padding padding padding padding padding padding padding\n");
    }
    let body: std::sync::Arc<[u8]> = body.into();
    let client = cluster.client();
    let spec = JobSpec {
        command: Vec::new(),
        script: Some(xce_client::script::ScriptId::of(&body)),
        hold: true,
        ..JobSpec::default()
    };
    for _ in 0..1000 {
        let op = xce_client::ops::Submit {
            token: RequestToken::random(),
            spec: spec.clone(),
            script: Some(body.clone()),
        };
        client.call(op).await.unwrap();
    }
    let after = backup("after");
    let added = after - before;
    eprintln!(
        "1,000 jobs sharing a {} byte script added {added} bytes to the backup",
        body.len()
    );
    assert!(added < 1 << 20, "1,000 jobs added {added} bytes");
    assert!(
        added > body.len() as u64,
        "the script is not in the backup at all"
    );
}

/// The same through the HTTP API: a held script job with its options, its script read back,
/// a change, a release, a signal refused for a job that does not run, and the job's output.
#[tokio::test]
async fn the_http_api_takes_scripts_holds_changes_and_signals() {
    let cluster = Cluster::builder()
        .controllers(1)
        .config(CONFIG)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .apiservers(1, &[])
        .start();
    cluster.wait_primary().await;
    cluster.wait_version().await;
    cluster.wait_host("w1", HostState::Ok).await;
    cluster.wait_active_scheduler().await;
    let (work, _reaper) = workdir(&cluster);
    let api = cluster.api(0);
    let script = "#!/bin/sh\necho \"http $1 $XCE_JOB_NAME\"\n";
    let body = serde_json::json!({
        "script": script,
        "command": ["arg"],
        "cwd": work.display().to_string(),
        "stdout": "%x.%j.log",
        "hold": true,
        "signal": "B:USR1@30",
        "time_limit_s": 600,
        "requeue": false,
    });
    let made = wait_for("the apiserver", Duration::from_secs(30), || async {
        let answer = api
            .request("POST", "/v1/jobs", Some(&body), &[])
            .await
            .ok()?;
        (answer.status == 201).then_some(answer)
    })
    .await;
    let id = made.body["id"].as_u64().unwrap();
    let job = &made.body["job"];
    assert_eq!(
        (&job["script"], &job["held"], &job["requeue"]),
        (
            &serde_json::json!(true),
            &serde_json::json!(true),
            &serde_json::json!(false)
        ),
        "{job}"
    );
    assert_eq!(job["warn_signal"], "B:USR1@30");
    let read = api.get(&format!("/v1/jobs/{id}/script")).await;
    assert_eq!(
        (read.status, read.body["script"].as_str()),
        (200, Some(script))
    );
    let signal = serde_json::json!({"signal": "USR1"});
    let refused = api.post(&format!("/v1/jobs/{id}/signal"), &signal).await;
    assert_eq!(
        (refused.status, &refused.body["error"]["code"]),
        (409, &serde_json::json!("conflict")),
        "{}",
        refused.body
    );
    let changed = api
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(&serde_json::json!({"name": "renamed"})),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (changed.status, &changed.body["name"]),
        (200, &serde_json::json!("renamed")),
        "{}",
        changed.body
    );
    let released = api
        .post(&format!("/v1/jobs/{id}/release"), &serde_json::json!({}))
        .await;
    assert_eq!(released.status, 200, "{}", released.body);
    let job = ended(&cluster, id).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let out = std::fs::read_to_string(work.join(format!("renamed.{id}.log"))).unwrap();
    assert_eq!(out, "http arg renamed\n");
    // No working directory: the home of the account it runs as, here the worker's (which
    // the test cluster sets to a directory of its own), and its output there; before, the
    // worker's spool.
    let homeless = serde_json::json!({"script": "#!/bin/sh\necho \"$(pwd) $HOME\"\n"});
    let made = api.post("/v1/jobs", &homeless).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["id"].as_u64().unwrap();
    let job = ended(&cluster, id).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let home = xce_devcluster::worker::home_of(cluster.dir.path(), "w1");
    let out = std::fs::read_to_string(home.join(format!("xce-{id}.out"))).unwrap();
    let pwd = std::fs::canonicalize(&home).unwrap();
    assert_eq!(out, format!("{} {}\n", pwd.display(), home.display()));
    let bad = api
        .post(
            "/v1/jobs",
            &serde_json::json!({"script": "#!/bin/sh\n", "signal": "NOPE@5"}),
        )
        .await;
    assert_eq!(
        (bad.status, &bad.body["error"]["code"]),
        (400, &serde_json::json!("invalid"))
    );
}

/// The TERM → KILL grace of a kill is kept by the job's shim: a worker killed and restarted
/// between the two neither repeats nor loses the KILL, and the job ends once, by it.
#[tokio::test]
async fn the_kill_grace_is_kept_across_a_worker_restart() {
    let mut cluster = cluster().await;
    let (work, _reaper) = workdir(&cluster);
    let cwd = work.to_string_lossy().into_owned();
    let stubborn = "trap 'echo term >> got' TERM; echo $$ > job.pid; while :; do sleep 0.1; done";
    let out = cluster.xce_ok(&["-o", "json", "submit", "--cwd", &cwd, "--wrap", stubborn]);
    let id = json_of(&out)["id"].as_u64().unwrap();
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    wait_for("its pid", Duration::from_secs(10), || async {
        work.join("job.pid").exists().then_some(())
    })
    .await;
    cluster.xce_ok(&["kill", &id.to_string()]);
    wait_for("the TERM", Duration::from_secs(10), || async {
        std::fs::read_to_string(work.join("got"))
            .ok()
            .filter(|t| t.contains("term"))
            .map(|_| ())
    })
    .await;
    let termed = std::time::Instant::now();
    cluster.local.kill9_worker(0).unwrap();
    cluster.local.start_worker(0).unwrap();
    let job = ended(&cluster, id).await;
    assert_eq!((job.signal, job.attempt), (Some(9), 1), "{job:?}");
    assert_eq!(job.result, Some(JobResult::Cancelled), "{job:?}");
    // The worker's kill grace is 1 s: the KILL came after it, though the worker restarted.
    assert!(termed.elapsed() < Duration::from_secs(15));
    assert_eq!(
        std::fs::read_to_string(work.join("got")).unwrap(),
        "term\n",
        "TERM sent twice"
    );
}

/// A running job's new limit reaches its worker though the worker was down when it was
/// given: its next join carries it (without it the job timed out at its old limit).
#[tokio::test]
async fn a_new_limit_a_worker_missed_reaches_it_at_its_next_join() {
    let mut cluster = cluster().await;
    let (work, _reaper) = workdir(&cluster);
    let cwd = work.to_string_lossy().into_owned();
    let job = "echo $$ > job.pid; i=0; while [ $i -lt 60 ]; do sleep 0.1; i=$((i+1)); done";
    let out = cluster.xce_ok(&[
        "-o", "json", "submit", "--cwd", &cwd, "--time", "0:03", "--wrap", job,
    ]);
    let id = json_of(&out)["id"].as_u64().unwrap();
    cluster
        .wait_job(id, "running", |j| j.state == JobState::Running)
        .await;
    cluster.local.kill9_worker(0).unwrap();
    cluster.xce_ok(&["update", &id.to_string(), "--time", "0:30"]);
    cluster.local.start_worker(0).unwrap();
    let job = ended(&cluster, id).await;
    assert_eq!(
        (job.state, job.result, job.attempt),
        (JobState::Done, Some(JobResult::Completed), 1),
        "{job:?}"
    );
}
