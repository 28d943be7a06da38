//! Whether a pending job may start yet, apart from resources: held (`--hold`, `xce hold`)
//! or before its begin time (`--begin`). One rule for the scheduler, which gives such a job
//! the pending code and reason below and places it nowhere, and for the controller's apply,
//! which refuses a placement that breaks it whoever proposed it.

use crate::types::{JobSpec, PendCode, PendReason};

/// Why `spec` may not start at `now_ms`, or `None` when nothing but resources holds it.
pub fn waiting(spec: &JobSpec, now_ms: u64) -> Option<PendReason> {
    waiting_for(spec.hold, spec.begin_time_ms, now_ms)
}

/// [`waiting`] from the two fields alone, for a view that keeps no whole spec. The reason's
/// text does not change while the job waits, so it is published once.
pub fn waiting_for(hold: bool, begin_time_ms: Option<u64>, now_ms: u64) -> Option<PendReason> {
    if hold {
        return Some(PendReason::new(
            PendCode::Held,
            "held: xce release lets it run",
        ));
    }
    match begin_time_ms {
        Some(begin) if begin > now_ms => Some(PendReason::new(
            PendCode::BeginTime,
            format!("begins at {}", crate::when::rfc3339(begin)),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_job_waits_and_so_does_one_before_its_begin_time() {
        let mut spec = JobSpec::default();
        assert_eq!(waiting(&spec, 10), None);
        spec.begin_time_ms = Some(1_800_000_000_000);
        let reason = waiting(&spec, 1_799_999_000_000).unwrap();
        assert_eq!(reason.code, PendCode::BeginTime);
        assert!(
            reason.text.starts_with("begins at 2027-01-15T08:00:00Z"),
            "{}",
            reason.text
        );
        assert_eq!(waiting(&spec, 1_800_000_000_000), None);
        spec.hold = true;
        assert_eq!(
            waiting(&spec, 1_800_000_000_000).unwrap().code,
            PendCode::Held
        );
    }
}
