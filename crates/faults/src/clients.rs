//! The clients of a fault run: submitters through the real `xce` CLI (one process per
//! submit, as people and scripts use it) and through the HTTP API (`POST /v1/jobs` with an
//! `Idempotency-Key`, retried after a 503 as its `Retry-After` says). Each records every
//! call for the history checker; each stops when told, and every call has a deadline.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::history::{ClientFailure, Submit};

/// The longest one CLI process or one HTTP request may take before it counts as failed.
const CALL_DEADLINE: Duration = Duration::from_secs(60);
/// How long an HTTP submit keeps retrying after 503s before it gives up.
const HTTP_RETRY_FOR: Duration = Duration::from_secs(30);

/// What every submitter shares.
#[derive(Debug, Clone)]
pub struct Target {
    pub xce: PathBuf,
    pub peers: String,
    /// `127.0.0.1:PORT` of the apiserver.
    pub api: String,
    /// Where jobs record their attempts (also their cwd).
    pub records: PathBuf,
    /// The CLI's primary-hint cache and config home.
    pub home: PathBuf,
    pub t0: Instant,
}

/// The submits recorded so far, shared by every submitter.
pub type Log = Arc<Mutex<Vec<Submit>>>;

/// The job every submit runs: it records its attempt's start, a line every 200 ms while it
/// runs, and its end, each with its shell's pid, appending to `<records>/<job id>`; it runs
/// for `ticks` × 200 ms.
pub fn script(records: &Path, ticks: u32) -> String {
    script_of(records, ticks, "")
}

/// [`script`], as a job script of its own: its options in `#XCE` lines, and a line naming
/// it (`own ATTEMPT NANOS PID NAME`) after its start, by which the checker knows each run ran
/// the script submitted for it.
pub fn job_script(
    records: &Path,
    ticks: u32,
    name: &str,
    limit_s: Option<u32>,
    dependency: Option<&str>,
) -> String {
    let mut limit = limit_s.map_or_else(String::new, |s| format!("#XCE --time 0:{s:02}\n"));
    if let Some(d) = dependency {
        limit.push_str(&format!("#XCE --dependency {d}\n"));
    }
    let own = format!("echo \"own $a $(date +%s%N) $$ {name}\" >> $f; ");
    format!(
        "#!/bin/sh\n#XCE --name {name} --cwd {dir}\n{limit}{body}\n",
        dir = records.display(),
        body = script_of(records, ticks, &own)
    )
}

fn script_of(records: &Path, ticks: u32, after_start: &str) -> String {
    format!(
        "f={dir}/$XCE_JOB_ID; a=$XCE_JOB_ATTEMPT; \
         echo \"start $a $(date +%s%N) $$\" >> $f; {after_start}i=0; \
         while [ $i -lt {ticks} ]; do sleep 0.2; echo \"alive $a $(date +%s%N) $$\" >> $f; i=$((i+1)); done; \
         echo \"end $a $(date +%s%N) $$\" >> $f",
        dir = records.display()
    )
}

/// One submit in four runs for 3 s under a 1 s time limit, which it must meet once
/// (the checker's `timed_out_once_never_early`); the others run 0–2 s with none.
fn workload(rng: &mut rand::rngs::StdRng) -> (u32, Option<u32>) {
    if rng.random_ratio(1, 4) {
        (TIMED_TICKS, Some(TIMED_LIMIT_S))
    } else {
        (rng.random_range(0..=10), None)
    }
}

/// A timed job's run (3 s) and its limit (1 s).
const TIMED_TICKS: u32 = 15;
const TIMED_LIMIT_S: u32 = 1;

fn record(log: &Log, submit: Submit) {
    log.lock().unwrap_or_else(|p| p.into_inner()).push(submit);
}

/// Submits through the CLI until `stop`, pausing 100–400 ms between submits.
pub async fn cli_submitter(
    target: Target,
    me: usize,
    seed: u64,
    log: Log,
    stop: watch::Receiver<bool>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    // This submitter's last acknowledged job, and whether it had a time limit.
    let mut last: Option<(u64, bool)> = None;
    while !*stop.borrow() {
        n += 1;
        let name = format!("cli{me}-{n}");
        let (ticks, limit) = workload(&mut rng);
        // Every other submit a job script on standard input, its options in directives.
        let as_script = n.is_multiple_of(2);
        // Every third waits for this submitter's last job: `afterok`, or `afterany` after a
        // job that times out (whose `afterok` could never be met), so chains form.
        let after = last.filter(|_| n.is_multiple_of(3));
        let dependency = after.map(|(id, timed)| {
            let kind = if timed { "afterany" } else { "afterok" };
            format!("{kind}:{id}")
        });
        // Every fifth (a command, not timed) an array of three tasks, each recording as the
        // job of its own it becomes.
        let array = (!as_script && limit.is_none() && n.is_multiple_of(5)).then_some("0-2");
        let started = target.t0.elapsed();
        let outcome = if as_script {
            let body = job_script(&target.records, ticks, &name, limit, dependency.as_deref());
            cli_submit_script(&target, &body).await
        } else {
            let script = script(&target.records, ticks);
            let options = Options {
                limit_s: limit,
                dependency: dependency.as_deref(),
                array,
            };
            cli_submit(&target, &name, &script, options).await
        };
        if let Ok(id) = outcome {
            last = Some((id, limit.is_some()));
        }
        record(
            &log,
            Submit {
                name,
                via: if as_script {
                    crate::history::CLI_SCRIPT
                } else {
                    "cli"
                },
                started,
                ended: target.t0.elapsed(),
                outcome,
                after: after.map(|(id, _)| id),
            },
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..=400))).await;
    }
}

/// A CLI submit's options beyond its name and command.
struct Options<'a> {
    limit_s: Option<u32>,
    dependency: Option<&'a str>,
    array: Option<&'a str>,
}

async fn cli_submit(
    target: &Target,
    name: &str,
    script: &str,
    options: Options<'_>,
) -> Result<u64, ClientFailure> {
    let records = target.records.display().to_string();
    let mut cmd = cli(target);
    cmd.args(["-o", "json", "submit", "--name", name, "--cwd", &records]);
    if let Some(limit) = options.limit_s {
        cmd.args(["--time", &format!("0:{limit:02}")]);
    }
    if let Some(d) = options.dependency {
        cmd.args(["-d", d]);
    }
    if let Some(a) = options.array {
        cmd.args(["--array", a]);
    }
    cmd.args(["--", "sh", "-c"])
        .arg(script)
        .stdin(std::process::Stdio::null());
    run_submit(cmd.output()).await
}

/// `xce submit < SCRIPT`: the script's directives hold its options.
async fn cli_submit_script(target: &Target, body: &str) -> Result<u64, ClientFailure> {
    let mut cmd = cli(target);
    cmd.args(["-o", "json", "submit"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let body = body.as_bytes().to_vec();
    let run = async move {
        let mut child = cmd.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&body).await?;
        }
        child.wait_with_output().await
    };
    run_submit(run).await
}

/// The `xce` command of a submitter, with its cluster and homes.
fn cli(target: &Target) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&target.xce);
    cmd.env("XCE_PEERS", &target.peers)
        .env("XDG_CACHE_HOME", &target.home)
        .env("XDG_CONFIG_HOME", target.home.join("config"))
        .env_remove("RUST_LOG")
        .env_remove("XCE_TOKEN")
        .kill_on_drop(true);
    cmd
}

/// The job id a submit process printed, or how it failed.
async fn run_submit(
    run: impl std::future::Future<Output = std::io::Result<std::process::Output>>,
) -> Result<u64, ClientFailure> {
    let out = match tokio::time::timeout(CALL_DEADLINE, run).await {
        Err(_) => {
            return Err(failure(
                "timeout",
                format!("no answer within {CALL_DEADLINE:?}"),
            ))
        }
        Ok(Err(e)) => return Err(failure("spawn", e.to_string())),
        Ok(Ok(out)) => out,
    };
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    if out.status.success() {
        return json["id"]
            .as_u64()
            .ok_or_else(|| failure("output", String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    let code = json["error"]["code"].as_str().unwrap_or("exit");
    let message = json["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned());
    Err(failure(code, message))
}

fn failure(code: &str, message: String) -> ClientFailure {
    ClientFailure {
        code: code.to_string(),
        message,
    }
}

/// Submits through the HTTP API until `stop`, pausing 100–400 ms between submits. A 503 is
/// recorded (the checker allows it only while a majority is down) and the same key is sent
/// again after its `Retry-After`.
pub async fn http_submitter(target: Target, seed: u64, log: Log, stop: watch::Receiver<bool>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let name = format!("http-{n}");
        let (ticks, limit) = workload(&mut rng);
        let body = serde_json::json!({
            "name": name,
            "cwd": target.records.display().to_string(),
            "command": ["sh", "-c", script(&target.records, ticks)],
            "time_limit_s": limit,
        })
        .to_string();
        let first = Instant::now();
        loop {
            let started = target.t0.elapsed();
            let outcome = http_submit(&target.api, &name, &body).await;
            let retry = matches!(&outcome, Err(e) if e.code.starts_with("http 503"))
                && first.elapsed() < HTTP_RETRY_FOR;
            record(
                &log,
                Submit {
                    name: name.clone(),
                    via: "http",
                    started,
                    ended: target.t0.elapsed(),
                    outcome,
                    after: None,
                },
            );
            if !retry {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..=400))).await;
    }
}

async fn http_submit(api: &str, key: &str, body: &str) -> Result<u64, ClientFailure> {
    let request = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(api).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = match tokio::time::timeout(CALL_DEADLINE, exchange).await {
        Err(_) => {
            return Err(failure(
                "timeout",
                format!("no answer within {CALL_DEADLINE:?}"),
            ))
        }
        Ok(Err(e)) => return Err(failure("transport", e.to_string())),
        Ok(Ok(answer)) => String::from_utf8_lossy(&answer).into_owned(),
    };
    let status: u16 = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let message = json["error"]["message"]
        .as_str()
        .unwrap_or(body)
        .to_string();
    match (status, json["error"]["code"].as_str()) {
        (200 | 201, _) => json["id"]
            .as_u64()
            .ok_or_else(|| failure("output", body.to_string())),
        // The apiserver's word for no primary; any other 503 (its connection limit) is not.
        (503, Some("clusterNotReady")) => Err(failure("http 503", message)),
        (_, code) => Err(failure(
            &format!("http {status} {}", code.unwrap_or("-")),
            message,
        )),
    }
}
