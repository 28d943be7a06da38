//! What this host offers: CPUs and memory, detected unless given.

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
    fn reads_mem_total() {
        let text = "MemFree:  1 kB\nMemTotal:       24567896 kB\n";
        assert_eq!(parse_meminfo_mb(text), Some(23992));
        assert_eq!(parse_meminfo_mb("nothing"), None);
        assert!(detect_cpus() >= 1);
    }
}
