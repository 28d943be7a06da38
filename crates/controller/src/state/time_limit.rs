//! The time limit, controller side: how long a job may run is part of its spec (enforced by
//! its shim on its host, from its start, not counting time suspended: `worker::shim`); here is
//! the cluster's bound on it, checked before a submit is proposed, and the reason a job that
//! reached it ends with (result `timeout`).

use xce_client::time_limit;
use xce_client::types::JobSpec;

/// The longest time limit a cluster takes unless configured otherwise: 365 days.
pub const DEFAULT_MAX_TIME_LIMIT_S: u32 = time_limit::DEFAULT_MAX_S;

/// Refuses a spec whose time limit is over the cluster's `max_s`, naming both.
pub fn check(spec: &JobSpec, max_s: u32) -> Result<(), String> {
    match spec.limits.time_limit_s {
        Some(limit) if limit > max_s => Err(format!(
            "time_limit_s: {limit} s ({}) is over this cluster's maximum of {max_s} s ({})",
            time_limit::format(limit),
            time_limit::format(max_s)
        )),
        _ => Ok(()),
    }
}

/// A queue's time rules (Slurm's partition `DefaultTime` and `MaxTime`): from the
/// controller's configuration, applied when a submit is judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueTime {
    /// The limit a job that asks for none gets.
    pub default_s: Option<u32>,
    /// The longest limit a job may ask for.
    pub max_s: Option<u32>,
}

/// Gives a spec without a limit its queue's default (else its maximum, as Slurm does: a
/// queue with a maximum runs nothing unbounded), and refuses one over its queue's
/// maximum, naming both. A job over the maximum is refused at submit (Slurm's
/// `EnforcePartLimits`), never left pending for good: its user learns it where they submit.
/// `defaults_allowed` is false while the cluster runs a version that cannot store a limit:
/// the job then gets none, rather than a refusal for a limit nobody asked for.
pub fn fit_queue(
    spec: &mut JobSpec,
    queue: &str,
    rules: QueueTime,
    defaults_allowed: bool,
) -> Result<(), String> {
    if spec.limits.time_limit_s.is_none() && defaults_allowed {
        spec.limits.time_limit_s = rules.default_s.or(rules.max_s);
    }
    match (spec.limits.time_limit_s, rules.max_s) {
        (Some(limit), Some(max)) if limit > max => Err(format!(
            "time_limit_s: {limit} s ({}) is over queue {queue}'s maximum of {max} s ({})",
            time_limit::format(limit),
            time_limit::format(max)
        )),
        _ => Ok(()),
    }
}

/// Why a job that reached its time limit ended.
pub fn reason(limit_s: Option<u32>) -> String {
    match limit_s {
        Some(limit) => format!("time limit of {} reached", time_limit::format(limit)),
        None => "time limit reached".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_over_the_cluster_maximum_is_refused_by_name() {
        let mut spec = JobSpec::default();
        assert_eq!(check(&spec, 60), Ok(()));
        spec.limits.time_limit_s = Some(60);
        assert_eq!(check(&spec, 60), Ok(()));
        spec.limits.time_limit_s = Some(61);
        let e = check(&spec, 60).unwrap_err();
        assert!(
            e.starts_with("time_limit_s: 61 s (1:01)") && e.contains("60 s (1:00)"),
            "{e}"
        );
        assert_eq!(reason(Some(2)), "time limit of 0:02 reached");
    }

    #[test]
    fn a_queue_gives_its_default_and_refuses_over_its_maximum() {
        let rules = QueueTime {
            default_s: Some(60),
            max_s: Some(120),
        };
        let mut spec = JobSpec::default();
        assert_eq!(fit_queue(&mut spec, "short", rules, true), Ok(()));
        assert_eq!(spec.limits.time_limit_s, Some(60));
        // An older cluster version stores no limit: none is given.
        let mut old = JobSpec::default();
        assert_eq!(fit_queue(&mut old, "short", rules, false), Ok(()));
        assert_eq!(old.limits.time_limit_s, None);
        spec.limits.time_limit_s = Some(120);
        assert_eq!(fit_queue(&mut spec, "short", rules, true), Ok(()));
        assert_eq!(spec.limits.time_limit_s, Some(120));
        spec.limits.time_limit_s = Some(121);
        let e = fit_queue(&mut spec, "short", rules, true).unwrap_err();
        assert!(
            e.contains("121 s (2:01)") && e.contains("queue short's maximum of 120 s (2:00)"),
            "{e}"
        );
        let mut capped = JobSpec::default();
        let max_only = QueueTime {
            default_s: None,
            max_s: Some(300),
        };
        assert_eq!(fit_queue(&mut capped, "long", max_only, true), Ok(()));
        assert_eq!(capped.limits.time_limit_s, Some(300));
        let mut free = JobSpec::default();
        assert_eq!(
            fit_queue(&mut free, "normal", QueueTime::default(), true),
            Ok(())
        );
        assert_eq!(free.limits.time_limit_s, None);
    }
}
