//! A job's usage, controller side: what each attempt used, as its host measured it, added up
//! over its attempts in the apply of each end (CPU time summed, the largest peak of memory),
//! for history and fair share.

use xce_client::types::{Job, Usage};

/// Adds one attempt's usage (`None`: not measured, as by an older worker) to the job's.
pub fn add(job: &mut Job, attempt: Option<Usage>) {
    let Some(u) = attempt else {
        return;
    };
    let total = job.usage.get_or_insert_with(Usage::default);
    total.cpu_user_ms = total.cpu_user_ms.saturating_add(u.cpu_user_ms);
    total.cpu_sys_ms = total.cpu_sys_ms.saturating_add(u.cpu_sys_ms);
    total.max_rss_kb = total.max_rss_kb.max(u.max_rss_kb);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_add_their_cpu_and_keep_the_largest_peak() {
        let mut s = crate::state::State::default();
        let spec = crate::state::testing::spec(&["true"]);
        crate::state::testing::submit(&mut s, 1, spec);
        let mut job = s.job(1).unwrap().clone();
        add(&mut job, None);
        assert_eq!(job.usage, None);
        let u = |user, sys, rss| Usage {
            cpu_user_ms: user,
            cpu_sys_ms: sys,
            max_rss_kb: rss,
        };
        add(&mut job, Some(u(100, 10, 2048)));
        add(&mut job, Some(u(50, 5, 1024)));
        assert_eq!(job.usage, Some(u(150, 15, 2048)));
    }
}
