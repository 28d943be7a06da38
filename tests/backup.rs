//! Backups through the real binaries: `xce admin snapshot save` from a running cluster, and
//! `restore` into a new one, which then holds the same jobs, queues and hosts, and goes on.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use xce_client::backup_file::{self, FrameReader};
use xce_client::ops::{RestoreSnapshot, SaveSnapshot, Submit};
use xce_client::types::{HostState, JobSpec, JobState, RequestToken, Role};
use xce_client::{ClientError, Status};
use xce_tests::{json_of, Cluster};

const WORKER_ARGS: &[&str] = &["--heartbeat-ms", "200", "--cpus", "2"];
const SCHEDULER_ARGS: &[&str] = &["--lease-ttl-ms", "1500"];

/// Every job as `xce jobs -o json` lists it, without what a restore does not keep the same
/// (a pending reason is the scheduler's, and is re-derived).
fn jobs_of(cluster: &Cluster) -> Vec<serde_json::Value> {
    let listed = json_of(&cluster.xce_ok(&["-o", "json", "jobs"]));
    let mut jobs = listed.as_array().unwrap().clone();
    for job in &mut jobs {
        // Why a job waits says whether a scheduler holds the lease right now.
        job.as_object_mut().unwrap().remove("pend_reason");
        job.as_object_mut().unwrap().remove("pend_code");
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_restored_from_a_backup_holds_every_acknowledged_job_and_goes_on() {
    let old = Cluster::builder()
        .controllers(3)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    old.wait_active_scheduler().await;
    let work = tempfile::tempdir().unwrap();
    let done = old.submit_in(work.path(), &["true"]);
    old.wait_job(done, "done", |j| j.state == JobState::Done)
        .await;
    // Pending for good: no host has 64 cpus. The last write before the save.
    let out = old.xce_ok(&["-o", "json", "submit", "--cpus", "64", "--", "true"]);
    let pending = json_of(&out)["id"].as_u64().unwrap();
    old.xce_ok(&["queue", "inactivate", "normal"]);

    let file = work.path().join("xce.backup");
    let saved = json_of(&old.xce_ok(&[
        "-o",
        "json",
        "admin",
        "snapshot",
        "save",
        file.to_str().unwrap(),
    ]));
    assert!(saved["index"].as_u64().unwrap() > 0, "{saved}");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(saved["bytes"].as_u64(), Some(meta.len()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        meta.permissions().mode() & 0o077,
        0,
        "a backup is its owner's only"
    );
    let before = jobs_of(&old);
    let queues_before = json_of(&old.xce_ok(&["-o", "json", "queues"]));
    drop(old);

    let new = Cluster::builder()
        .controllers(3)
        .workers(1, WORKER_ARGS)
        .schedulers(1, SCHEDULER_ARGS)
        .start();
    new.wait_host("w1", HostState::Ok).await;
    new.xce_ok(&["admin", "snapshot", "restore", file.to_str().unwrap()]);

    assert_eq!(jobs_of(&new), before, "the restored cluster's jobs");
    assert_eq!(
        json_of(&new.xce_ok(&["-o", "json", "queues"])),
        queues_before
    );
    // Its worker, told to join again, is back; the cluster goes on where the backup ended.
    new.wait_host("w1", HostState::Ok).await;
    new.xce_ok(&["queue", "activate", "normal"]);
    let next = new.submit_in(work.path(), &["true"]);
    assert_eq!(next, pending + 1, "ids continue after the backup's");
    new.wait_job(next, "done", |j| j.state == JobState::Done)
        .await;

    // The same command again changes nothing: every part was applied.
    let again = new.xce_ok(&["admin", "snapshot", "restore", file.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("had been restored before"), "{said}");
    assert_eq!(new.job(next).await.unwrap().state, JobState::Done);
    // Another backup would undo the job this cluster now holds: refused.
    let other = work.path().join("other.backup");
    new.xce_ok(&["admin", "snapshot", "save", other.to_str().unwrap()]);
    let refused = new.xce(&["admin", "snapshot", "restore", other.to_str().unwrap()]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("already holds jobs"), "{err}");
    new.assert_no_errors();
}

#[tokio::test]
async fn a_file_that_is_not_a_backup_is_refused_naming_why() {
    let cluster = Cluster::start(1);
    cluster.wait_primary().await;
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not a backup at all").unwrap();
    let out = cluster.xce(&[
        "-o",
        "json",
        "admin",
        "snapshot",
        "restore",
        junk.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = json_of(&out);
    assert_eq!(err["error"]["code"], "invalid", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not an xce backup"),
        "{err}"
    );
    let missing = dir.path().join("missing");
    let out = cluster.xce(&["admin", "snapshot", "restore", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing"), "{err}");
    // Nothing was replaced: the cluster still takes a job as job 1.
    let first = json_of(&cluster.xce_ok(&["-o", "json", "submit", "--", "true"]));
    assert_eq!(first["id"], 1);
}

#[tokio::test]
async fn only_an_admin_may_save_or_restore() {
    let cluster = Cluster::builder().controllers(1).tls().start();
    cluster.wait_primary().await;
    let token = cluster
        .token("alice", xce_client::types::Role::Operator)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b");
    let out = cluster.xce_token(
        &token,
        &["admin", "snapshot", "save", file.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("saveSnapshot") && err.contains("not allowed"),
        "{err}"
    );
    assert!(!file.exists());
    cluster.xce_ok(&["admin", "snapshot", "save", file.to_str().unwrap()]);
    assert!(file.exists());
}

/// Jobs of about 60 KB each (the most a job's environment may hold is 64 KiB), so that a
/// backup of hundreds of them needs many parts of 4 MiB.
fn big_job(i: u64) -> Submit {
    Submit {
        token: RequestToken::random(),
        spec: JobSpec {
            command: vec!["true".into()],
            env: vec![("BLOB".into(), format!("{i:0>60000}"))],
            ..JobSpec::default()
        },
        script: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_larger_than_a_message_moves_in_parts_and_an_interrupted_restore_resumes() {
    const JOBS: u64 = 900;
    let old = Cluster::start(1);
    old.wait_primary().await;
    let client = old.client();
    // As the CLI does for admin commands while authentication is off.
    xce_client::ops::claim_role(&client, Role::Admin);
    for i in 1..=JOBS {
        assert_eq!(client.call(big_job(i)).await.unwrap(), i);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.backup");
    let path = file.to_str().unwrap();
    let saved = json_of(&old.xce_ok(&["-o", "json", "admin", "snapshot", "save", path]));
    // 54 MB of jobs: more than any one message (48 MiB) or Raft append (32 MiB) may carry.
    let bytes = saved["bytes"].as_u64().unwrap();
    assert!(bytes > xce_client::socket::MAX_INBOUND_BYTES, "{saved}");
    assert!(saved["frames"].as_u64().unwrap() >= 14, "{saved}");
    // A backup the controller no longer holds is named as such, so a save starts again.
    match client
        .call(SaveSnapshot {
            backup: 7,
            frame: 1,
        })
        .await
    {
        Err(ClientError::Status { status, message }) => {
            assert_eq!(status, Status::NoEnt, "{message}");
            assert!(message.contains("save again"), "{message}");
        }
        other => panic!("a backup never taken was read: {other:?}"),
    }
    let before = jobs_of(&old);
    drop(old);

    // A restore that stopped after its first two parts (as a killed `xce` would), with the
    // tokens the CLI derives from the file...
    let mut new = Cluster::start(3);
    new.wait_primary().await;
    let checked = backup_file::check_file(&file).unwrap();
    let mut frames = FrameReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let header: Arc<[u8]> = frames.next_frame().unwrap().unwrap().into();
    let base = backup_file::part_token(&checked.digest, 1);
    let client = new.client();
    xce_client::ops::claim_role(&client, Role::Admin);
    for part in 1..=2 {
        let op = RestoreSnapshot {
            token: backup_file::part_token(&checked.digest, part),
            base,
            header: header.clone(),
            part: frames.next_frame().unwrap().unwrap().into(),
        };
        client.call(op).await.unwrap();
    }
    let partial = jobs_of(&new).len() as u64;
    assert!(
        0 < partial && partial < JOBS,
        "{partial} jobs after two parts"
    );
    // ... is finished by running the command again: nothing twice, nothing missing.
    new.xce_ok(&["admin", "snapshot", "restore", path]);
    assert_eq!(jobs_of(&new), before);
    // Every controller holds it: the primary's successor lists the same.
    let (primary, _) = new.wait_primary().await;
    new.kill9(primary);
    new.wait_primary().await;
    assert_eq!(jobs_of(&new), before);
    assert_eq!(
        new.job(JOBS).await.unwrap().spec.env,
        big_job(JOBS).spec.env
    );
}
