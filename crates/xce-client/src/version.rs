//! Cluster versions, client side. A controller build runs a cluster version (its store
//! format); the cluster runs the *active* version, raised by the primary once every member
//! runs a newer build. A request that uses what a newer version added (a time limit, generic
//! resources) is refused by a primary of this build while the cluster runs an older one; a
//! primary of an older build would not refuse it but drop what it does not know, so a client
//! that sends such a request asks the cluster's version first ([`check`]).

use crate::client::{Client, ClientError};
use crate::ops::GetCluster;
use crate::transport::Transport;
use crate::types::JobSpec;
use crate::Status;

/// The first cluster version with time limits and generic resources.
pub const TIME_LIMITS_AND_GRES: u32 = 7;
/// The first cluster version with job scripts, output files, holds, begin times, warning
/// signals and the requeue choice (and `xce update`, `xce signal`).
pub const BATCH_JOBS: u32 = 8;
/// The first cluster version with job dependencies (`--dependency`, `--kill-on-invalid-dep`)
/// and job arrays (`--array`).
pub const DEPENDENCIES: u32 = 9;
/// The first cluster version that judges a dependency on some tasks of an array
/// (`afterok:12_3`) and `aftercorr` (each task after the same task of another array).
pub const TASK_DEPENDENCIES: u32 = 11;
/// The first cluster version whose apply lets the scheduler send a host jobs beyond its free
/// room (up to [`crate::fit::MAX_AHEAD_ROUNDS`] more rounds of its resources), which its
/// worker holds until room frees: dispatch ahead.
pub const DISPATCH_AHEAD: u32 = 12;

/// The first cluster version with accounts (`--account`) and the expected start of a job
/// whose start backfill reserved.
pub const ACCOUNTING: u32 = 13;

/// What names an environment over [`crate::export::MAX_ENV_BYTES`], which format 8 takes (up
/// to the script limit, with which it shares the budget) and older ones refuse.
pub const BIG_ENV: &str = "env over 64 KiB";

/// The cluster version `spec` needs, and the field that needs it (the newest version's
/// first, in the controller's order); `None` when every version takes it.
pub fn needed_by(spec: &JobSpec) -> Option<(u32, &'static str)> {
    if !spec.account.is_empty() {
        return Some((ACCOUNTING, "account"));
    }
    if spec.dependency.as_ref().is_some_and(names_tasks) {
        return Some((
            TASK_DEPENDENCIES,
            "a dependency on tasks (ID_IDX, aftercorr)",
        ));
    }
    let dependencies = [
        ("array", spec.array.is_some()),
        ("dependency", spec.dependency.is_some()),
        ("kill_on_invalid_dep", spec.kill_on_invalid_dep.is_some()),
    ];
    if let Some((what, _)) = dependencies.into_iter().find(|(_, set)| *set) {
        return Some((DEPENDENCIES, what));
    }
    let batch = [
        ("script", spec.script.is_some()),
        ("stdout", spec.stdout.is_some()),
        ("stderr", spec.stderr.is_some()),
        ("open_mode", spec.open_mode.is_some()),
        ("hold", spec.hold),
        ("begin_time", spec.begin_time_ms.is_some()),
        ("signal", spec.warn_signal.is_some()),
        ("no_requeue", spec.no_requeue),
        (
            BIG_ENV,
            crate::export::size(&spec.env) > crate::export::MAX_ENV_BYTES,
        ),
    ];
    if let Some((what, _)) = batch.into_iter().find(|(_, set)| *set) {
        return Some((BATCH_JOBS, what));
    }
    if spec.limits.time_limit_s.is_some() {
        Some((TIME_LIMITS_AND_GRES, "time_limit_s"))
    } else if !spec.resources.gres.is_empty() {
        Some((TIME_LIMITS_AND_GRES, "gres"))
    } else {
        None
    }
}

/// Whether a dependency names some tasks of an array, or pairs tasks (`aftercorr`).
fn names_tasks(expr: &crate::dependency::Expr) -> bool {
    use crate::dependency::{Kind, Term};
    expr.terms().iter().any(|t| match t {
        Term::On(kind, job) => *kind == Kind::AfterCorr || job.tasks.is_some(),
        Term::Singleton => false,
    })
}

/// Refuses (`invalid`, naming the members on older builds) a spec that needs a newer cluster
/// version than the one the cluster runs; costs a round trip only for such a spec.
pub async fn check<T: Transport>(client: &Client<T>, spec: &JobSpec) -> Result<(), ClientError> {
    let Some((needs, what)) = needed_by(spec) else {
        return Ok(());
    };
    let info = client.call(GetCluster).await?;
    if info.active_version >= needs {
        return Ok(());
    }
    // A primary of a build from before versions were reported says 0 for both.
    let runs = match info.active_version {
        0 => "an older version (its primary runs a build from before cluster versions)".to_string(),
        v => format!("version {v}"),
    };
    let behind: Vec<String> = info
        .members
        .iter()
        .filter_map(|m| match m.version {
            Some(v) if v >= needs => None,
            Some(v) => Some(format!("{} (version {v})", m.name)),
            None => Some(format!("{} (an older build, or not heard from)", m.name)),
        })
        .collect();
    Err(ClientError::Status {
        status: Status::Invalid,
        message: format!(
            "{what} needs cluster version {needs}, and this cluster runs {runs} until every controller runs a build of version {needs} or newer; still on older builds: {}",
            behind.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Limits, Resources};

    #[test]
    fn only_what_an_older_version_lacks_needs_a_newer_one() {
        let mut spec = JobSpec::default();
        assert_eq!(needed_by(&spec), None);
        spec.resources = Resources::new(64, 1 << 20);
        assert_eq!(needed_by(&spec), None);
        spec.resources.set_gres("gpu", 1);
        assert_eq!(needed_by(&spec), Some((7, "gres")));
        spec.limits = Limits {
            time_limit_s: Some(1),
        };
        assert_eq!(needed_by(&spec), Some((7, "time_limit_s")));
        spec.hold = true;
        assert_eq!(needed_by(&spec), Some((8, "hold")));
        spec.kill_on_invalid_dep = Some(false);
        assert_eq!(needed_by(&spec), Some((9, "kill_on_invalid_dep")));
        spec.dependency = Some("afterok:1".parse().unwrap());
        assert_eq!(needed_by(&spec), Some((9, "dependency")));
        for tasks in ["afterok:1_3", "afterany:1?aftercorr:2"] {
            spec.dependency = Some(tasks.parse().unwrap());
            assert_eq!(needed_by(&spec).map(|n| n.0), Some(11), "{tasks}");
        }
    }
}
