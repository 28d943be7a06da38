//! Accounts through the real binaries: a controller configured with an account tree charges a
//! job to the account it names, which must exist and hold its user, or to its user's default;
//! a bad tree is refused at start naming what is wrong. The account is in the job's JSON.

#![allow(clippy::unwrap_used)]

use xce_client::ops::Submit;
use xce_client::types::{JobSpec, RequestToken};
use xce_client::{ClientError, Status};
use xce_tests::{json_of, Cluster};

const CONFIG: &str = "accounts:
  physics:
    shares: 40
    users: [alice]
    accounts:
      theory: {shares: 10, users: [bob]}
  chemistry: {shares: 60, users: [carol]}
users:
  bob: {default_account: physics}
";

async fn submit(cluster: &Cluster, user: &str, account: &str) -> Result<u64, ClientError> {
    let spec = JobSpec {
        command: vec!["true".into()],
        user: user.into(),
        account: account.into(),
        ..JobSpec::default()
    };
    let op = Submit {
        token: RequestToken::random(),
        spec,
        script: None,
    };
    cluster.client().call(op).await
}

fn refusal(result: Result<u64, ClientError>) -> String {
    match result {
        Err(ClientError::Status {
            status: Status::Invalid,
            message,
        }) => message,
        other => panic!("not refused as invalid: {other:?}"),
    }
}

#[tokio::test]
async fn a_job_is_charged_to_an_account_of_its_user_or_to_the_user_s_default() {
    let cluster = Cluster::builder().controllers(1).config(CONFIG).start();
    cluster.wait_version().await;
    let account = |id: u64| {
        let out = cluster.xce_ok(&["-o", "json", "job", &id.to_string()]);
        json_of(&out)["account"].as_str().unwrap().to_string()
    };
    let alice = submit(&cluster, "alice", "").await.unwrap();
    assert_eq!(account(alice), "physics");
    // bob's default is physics, though he is listed in theory; either may be charged.
    let bob = submit(&cluster, "bob", "").await.unwrap();
    assert_eq!(account(bob), "physics");
    let bob = submit(&cluster, "bob", "theory").await.unwrap();
    assert_eq!(account(bob), "theory");
    assert_eq!(
        refusal(submit(&cluster, "alice", "chemistry").await),
        "account: user alice may not charge account chemistry"
    );
    assert_eq!(
        refusal(submit(&cluster, "alice", "biology").await),
        "account: no account named \"biology\" (known: chemistry, physics, theory)"
    );
    assert!(refusal(submit(&cluster, "dave", "").await).contains("user dave is in no account"));
    // The CLI's --account goes the same way, and `xce jobs --format` shows it.
    let out = cluster.xce(&["submit", "-A", "biology", "--", "true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no account named \"biology\""));
    let listed = cluster.xce_ok(&["jobs", "--format", "id,account"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains(&format!("{alice:<8} physics")), "{listed}");
    cluster.assert_no_errors();
}

#[test]
fn a_bad_account_tree_is_refused_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, said) in [
        (
            "accounts:\n  a: {users: [alice]}\n  b: {users: [alice]}\n",
            "user alice is also in account a",
        ),
        (
            "accounts:\n  a: {shares: -1}\n",
            "accounts: a: shares must not be negative (got -1)",
        ),
        (
            "accounts:\n  a: {}\nusers:\n  bob: {default_account: nope}\n",
            "users: bob: default_account \"nope\" is no account in accounts:",
        ),
    ] {
        let path = dir.path().join("controller.yaml");
        std::fs::write(&path, yaml).unwrap();
        let out = std::process::Command::new(xce_tests::bin("xce-controller"))
            .args(["--check-config", "--config"])
            .arg(&path)
            .args(["--name", "c1", "--peers", "c1=127.0.0.1:1", "--insecure"])
            .args(["--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{yaml}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{yaml}: {stderr}");
    }
}
