//! What an attempt used, measured by its shim at its end: CPU time and the most memory it held.
//! A cgroup counts every process of the job, also those that left its process group; where
//! the job has none (or its hierarchy does not count CPU: cgroup v1 without `cpuacct`), the
//! kernel's accounting of the shim's reaped children stands in (`getrusage(RUSAGE_CHILDREN)`:
//! the job's leader and what it waited for, `wait4`'s figures). The shim runs one attempt, so
//! its children are that attempt's.

use xce_client::types::Usage;

/// `cpu.stat` of a cgroup v2: `user_usec` and `system_usec`, in milliseconds.
pub fn cpu_of_v2_stat(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("user_usec")? / 1000, field("system_usec")? / 1000))
}

/// A byte count (`memory.peak` of v2, `memory.max_usage_in_bytes` of v1) in KiB.
pub fn kib_of_bytes(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().map(|b| b.div_ceil(1024))
}

/// What the shim's reaped children used (the attempt's leader, and whatever it waited for).
pub fn of_children() -> Usage {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(r) = getrusage(UsageWho::RUSAGE_CHILDREN) else {
        return Usage::default();
    };
    let ms = |t: nix::sys::time::TimeVal| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1000
            + u64::try_from(t.tv_usec()).unwrap_or(0) / 1000
    };
    Usage {
        cpu_user_ms: ms(r.user_time()),
        cpu_sys_ms: ms(r.system_time()),
        // Linux gives KiB.
        max_rss_kb: u64::try_from(r.max_rss()).unwrap_or(0),
    }
}

/// The attempt's usage: the cgroup's CPU time where it counts it, else the children's; the
/// larger of the two peaks (the cgroup's counts every process, the children's the largest
/// one).
pub fn combine(
    cgroup_cpu: Option<(u64, u64)>,
    cgroup_peak_kb: Option<u64>,
    children: Usage,
) -> Usage {
    let (cpu_user_ms, cpu_sys_ms) =
        cgroup_cpu.unwrap_or((children.cpu_user_ms, children.cpu_sys_ms));
    Usage {
        cpu_user_ms,
        cpu_sys_ms,
        max_rss_kb: cgroup_peak_kb.unwrap_or(0).max(children.max_rss_kb),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_cpu_stat_and_a_peak_read_as_milliseconds_and_kib() {
        let stat = "usage_usec 5123456\nuser_usec 4000999\nsystem_usec 1122457\nnr_periods 0\n";
        assert_eq!(cpu_of_v2_stat(stat), Some((4000, 1122)));
        assert_eq!(cpu_of_v2_stat("usage_usec 5\n"), None);
        assert_eq!(kib_of_bytes("1048577\n"), Some(1025));
        assert_eq!(kib_of_bytes("max\n"), None);
    }

    #[test]
    fn the_cgroup_s_cpu_wins_and_the_larger_peak_stands() {
        let children = Usage {
            cpu_user_ms: 10,
            cpu_sys_ms: 2,
            max_rss_kb: 900,
        };
        let both = combine(Some((50, 5)), Some(800), children);
        assert_eq!(
            (both.cpu_user_ms, both.cpu_sys_ms, both.max_rss_kb),
            (50, 5, 900)
        );
        let none = combine(None, None, children);
        assert_eq!(none, children);
    }

    /// A reaped child that burned CPU and held memory shows in the children's figures.
    #[test]
    fn a_reaped_child_s_cpu_and_memory_are_counted() {
        let before = of_children();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let after = of_children();
        assert!(
            after.cpu_user_ms + after.cpu_sys_ms > before.cpu_user_ms + before.cpu_sys_ms,
            "{before:?} then {after:?}"
        );
        assert!(after.max_rss_kb > 0);
    }
}
