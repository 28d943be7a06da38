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
}
