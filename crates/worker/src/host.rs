//! What this host offers: CPUs and memory, detected unless given; and the home of the
//! account the worker runs as.

use std::ffi::OsString;
use std::path::PathBuf;

/// CPUs this process may use.
pub fn detect_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// Total memory in MiB from `/proc/meminfo`, or `None` where it cannot be read.
pub fn detect_mem_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_mb(&text)
}

/// The home of the account this worker runs as: where a job of that account that names no
/// working directory runs, and its `HOME`. The worker's own `HOME` where it is an absolute
/// path (what an operator, a unit file or a test cluster set), else the user database's.
pub fn own_home() -> Option<PathBuf> {
    let from_db = || {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.dir)
    };
    home_of(std::env::var_os("HOME"), from_db)
}

/// `HOME` when it is an absolute path, else `from_db`'s answer (which must be absolute too).
fn home_of(env: Option<OsString>, from_db: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    env.map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(from_db)
        .filter(|p| p.is_absolute())
}

/// The `MemTotal` line of `/proc/meminfo`, in MiB.
fn parse_meminfo_mb(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_an_absolute_home_variable_else_the_user_database() {
        let db = || Some(PathBuf::from("/home/db"));
        assert_eq!(
            home_of(Some("/srv/w1".into()), db),
            Some(PathBuf::from("/srv/w1"))
        );
        // Relative or empty: not a place to run a job from.
        assert_eq!(home_of(Some("w1".into()), db), Some("/home/db".into()));
        assert_eq!(home_of(Some("".into()), db), Some("/home/db".into()));
        assert_eq!(home_of(None, db), Some("/home/db".into()));
        assert_eq!(home_of(None, || Some("relative".into())), None);
        assert_eq!(home_of(None, || None), None);
    }

    #[test]
    fn reads_mem_total() {
        let text = "MemFree:  1 kB\nMemTotal:       24567896 kB\n";
        assert_eq!(parse_meminfo_mb(text), Some(23992));
        assert_eq!(parse_meminfo_mb("nothing"), None);
        assert!(detect_cpus() >= 1);
    }
}
