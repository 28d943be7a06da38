//! One cgroup per job, where the host has cgroups: a kill reaches every process the job
//! started however it left its process group, suspend freezes it whole, and its cpus and
//! memory are enforced (over the memory limit the kernel kills it, and the job ends "out of
//! memory").
//!
//! Both layouts are handled, and the hybrid of the two: cgroup v2 (one unified hierarchy;
//! `cgroup.kill`, `cgroup.freeze`, and `memory.max` / `cpu.max` where those controllers are
//! delegated) and v1 (a hierarchy per controller: `memory`, `cpu`, `pids`, `freezer`). In each
//! hierarchy this worker owns `<its own cgroup>/xce/<name>-<spool hash>/`: a job's cgroup is
//! `<id>.<attempt>` under it and the shims live in `shims/` (a leaf, as v2 requires). The spool
//! hash keeps two workers of one name apart (two test clusters on one host).
//!
//! A shim puts its job in the job's cgroup without running code between fork and exec: it
//! enters the job's cgroup itself, spawns the job (which inherits it) and goes back to
//! `shims/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use xce_client::types::JobId;

/// Which hierarchy, and so which files it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// cgroup v2: kill and freeze always; memory and cpu when delegated.
    Unified,
    Memory,
    Cpu,
    Pids,
    Freezer,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Unified => "v2",
            Kind::Memory => "memory",
            Kind::Cpu => "cpu",
            Kind::Pids => "pids",
            Kind::Freezer => "freezer",
        }
    }

    /// Whether a cgroup of this hierarchy can have the control file `name`: the others are
    /// never looked for there, so a v1 host is not asked for v2's files (and the reverse),
    /// each a failed path lookup per job. Whether a file it can have is there (a controller
    /// not delegated, swap accounting off, an older kernel) is found by opening it.
    fn may_have(self, name: &str) -> bool {
        let prefix = |p: &str| name.starts_with(p);
        match self {
            Kind::Unified => {
                !prefix("freezer.")
                    && !name.ends_with("_in_bytes")
                    && !name.ends_with("_us")
                    && name != "memory.oom_control"
            }
            Kind::Memory => {
                prefix("memory.")
                    && !matches!(name, "memory.max" | "memory.swap.max" | "memory.events")
            }
            Kind::Cpu => prefix("cpu.cfs_"),
            Kind::Pids => false,
            Kind::Freezer => name == "freezer.state",
        }
    }
}

/// One hierarchy this worker has a cgroup of its own in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    pub kind: Kind,
    /// This worker's cgroup in it; jobs' cgroups are made under it.
    pub base: PathBuf,
}

/// The cgroups this worker runs jobs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroups {
    pub hierarchies: Vec<Hierarchy>,
}

/// What a job may use, as its spec asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cpus: u32,
    /// 0: no limit.
    pub mem_mb: u64,
}

/// CFS period for cpu limits: 100 ms, the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

impl Cgroups {
    /// Finds the hierarchies this worker can make cgroups in, and makes its own there.
    /// `Err` says why there are none (no cgroup fs, read-only, not permitted, ...).
    pub fn detect(name: &str, spool: &Path) -> Result<Cgroups, String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts")
            .map_err(|e| format!("cannot read /proc/self/mounts: {e}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let leaf = format!("xce/{name}-{:08x}", spool_hash(spool));
        let mut hierarchies = Vec::new();
        let mut problems = Vec::new();
        let mut found = candidates(&mounts, &own);
        // On a hybrid host v1's memory, cpu and freezer do all v2 would: each more hierarchy
        // is one more mkdir and rmdir per job.
        let has = |k: Kind| found.iter().any(|(kind, _)| *kind == k);
        if has(Kind::Memory) && has(Kind::Freezer) {
            found.retain(|(kind, _)| !matches!(kind, Kind::Unified | Kind::Pids));
        }
        for (kind, dir) in found {
            let base = dir.join(&leaf);
            match std::fs::create_dir_all(base.join("shims")) {
                Ok(()) => {
                    if kind == Kind::Unified {
                        delegate(&dir.join("xce"), &dir.join(&leaf));
                    }
                    hierarchies.push(Hierarchy { kind, base });
                }
                Err(e) => problems.push(format!("{}: {e}", base.display())),
            }
        }
        if hierarchies.is_empty() {
            return Err(if problems.is_empty() {
                "no cgroup hierarchy is mounted".to_string()
            } else {
                problems.join("; ")
            });
        }
        Ok(Cgroups { hierarchies })
    }

    /// Which hierarchies, for the log: "memory, cpu, pids, freezer, v2".
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.hierarchies.iter().map(|h| h.kind.name()).collect();
        names.join(", ")
    }

    /// The cgroup of one attempt (which may not exist yet).
    pub fn job(&self, id: JobId, attempt: u32) -> JobCgroup {
        JobCgroup {
            dirs: self
                .hierarchies
                .iter()
                .map(|h| (h.kind, h.base.join(format!("{id}.{attempt}"))))
                .collect(),
        }
    }

    /// Where the shims live in each hierarchy.
    pub fn shims(&self) -> Vec<PathBuf> {
        self.hierarchies
            .iter()
            .map(|h| h.base.join("shims"))
            .collect()
    }

    /// Every attempt that has a cgroup here, in any hierarchy.
    pub fn attempts(&self) -> Vec<(JobId, u32)> {
        let mut found: Vec<(JobId, u32)> = self
            .hierarchies
            .iter()
            .filter_map(|h| std::fs::read_dir(&h.base).ok())
            .flat_map(|entries| entries.flatten())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let (id, attempt) = name.split_once('.')?;
                Some((id.parse().ok()?, attempt.parse().ok()?))
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Removes this worker's own cgroups (at a clean stop); what still holds processes stays.
    pub fn remove(&self) {
        for h in &self.hierarchies {
            let _ = std::fs::remove_dir(h.base.join("shims"));
            let _ = std::fs::remove_dir(&h.base);
        }
    }
}

/// A stable short hash of the spool path (FNV-1a), to tell workers of one name apart.
fn spool_hash(spool: &Path) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in spool.as_os_str().as_encoded_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The hierarchies mounted here and this process's cgroup in each: v1 ones by controller,
/// and the v2 one.
fn candidates(mounts: &str, own: &str) -> Vec<(Kind, PathBuf)> {
    let mut found = Vec::new();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(point), Some(fstype), Some(options)) =
            (fields.get(1), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let controllers: Vec<&str> = options.split(',').collect();
        let (kind, own_path) = match *fstype {
            "cgroup2" => (Kind::Unified, own_path(own, |c| c.is_empty())),
            "cgroup" => {
                let Some(kind) = [
                    (Kind::Memory, "memory"),
                    (Kind::Cpu, "cpu"),
                    (Kind::Pids, "pids"),
                    (Kind::Freezer, "freezer"),
                ]
                .into_iter()
                .find(|(_, c)| controllers.contains(c))
                .map(|(k, _)| k) else {
                    continue;
                };
                let wanted = kind.name();
                (kind, own_path(own, |c| c.split(',').any(|x| x == wanted)))
            }
            _ => continue,
        };
        let Some(own_path) = own_path else {
            continue;
        };
        if found.iter().any(|(k, _)| *k == kind) {
            continue;
        }
        let dir = Path::new(point).join(own_path.trim_start_matches('/'));
        found.push((kind, dir));
    }
    found
}

/// This process's path in the hierarchy whose controller list (from `/proc/self/cgroup`)
/// matches.
fn own_path(own: &str, matches: impl Fn(&str) -> bool) -> Option<String> {
    own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        matches(controllers).then(|| path.to_string())
    })
}

/// Asks v2 to hand the memory, cpu and pids controllers down to jobs' cgroups. Where the
/// worker's own cgroup has not been given them this does nothing, and only kill and freeze
/// are had from v2.
fn delegate(xce: &Path, base: &Path) {
    for dir in [xce, base] {
        for controller in ["+memory", "+cpu", "+pids"] {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), controller);
        }
    }
}

/// One attempt's cgroup, in every hierarchy the worker uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    dirs: Vec<(Kind, PathBuf)>,
}

impl JobCgroup {
    /// Control file `name` in each hierarchy that can have it.
    fn files(&self, name: &str) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .filter(|(kind, _)| kind.may_have(name))
            .map(|(_, dir)| dir.join(name))
            .collect()
    }

    /// Writes `value` to control file `name` wherever the job's cgroup has it; whether any
    /// had it.
    fn write_each(&self, name: &str, value: &str) -> std::io::Result<bool> {
        let mut found = false;
        for file in self.files(name) {
            match write_control(&file, value) {
                Ok(()) => found = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// The contents of control file `name` wherever the job's cgroup has it.
    fn read_each(&self, name: &str) -> Vec<String> {
        self.files(name)
            .into_iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .collect()
    }

    /// Makes the cgroup and sets its limits.
    pub fn create(&self, limits: Limits) -> std::io::Result<()> {
        for (_, dir) in &self.dirs {
            std::fs::create_dir_all(dir)?;
        }
        if limits.mem_mb > 0 {
            let bytes = (limits.mem_mb * 1024 * 1024).to_string();
            if !self.write_each("memory.max", &bytes)? {
                self.write_each("memory.limit_in_bytes", &bytes)?;
            }
            // Without swap as a way round the limit (v1 with swap accounting; v2 below).
            self.write_each("memory.memsw.limit_in_bytes", &bytes)?;
            self.write_each("memory.swap.max", "0")?;
        }
        if limits.cpus > 0 {
            let quota = u64::from(limits.cpus) * CPU_PERIOD_US;
            let v2 = format!("{quota} {CPU_PERIOD_US}");
            if !self.write_each("cpu.max", &v2)?
                && self.write_each("cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?
            {
                self.write_each("cpu.cfs_quota_us", &quota.to_string())?;
            }
        }
        Ok(())
    }

    /// Moves process `pid` into the cgroup, in every hierarchy.
    pub fn enter(&self, pid: i32) -> std::io::Result<()> {
        enter_all(self.dirs.iter().map(|(_, d)| d.as_path()), pid)
    }

    /// Every process in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|(_, dir)| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Freezes every process of the job where a freezer is had (suspend).
    pub fn freeze(&self) {
        self.set_frozen(true);
    }

    /// Thaws what [`JobCgroup::freeze`] froze (resume).
    pub fn thaw(&self) {
        self.set_frozen(false);
    }

    /// Whether the job has been frozen (suspended) and not thawed since: what its shim asks
    /// to leave time suspended out of the job's time limit.
    pub fn is_frozen(&self) -> bool {
        self.read_each("freezer.state")
            .iter()
            .any(|s| matches!(s.trim(), "FROZEN" | "FREEZING"))
            || self
                .read_each("cgroup.freeze")
                .iter()
                .any(|s| s.trim() == "1")
    }

    fn set_frozen(&self, frozen: bool) {
        let _ = self.write_each("freezer.state", if frozen { "FROZEN" } else { "THAWED" });
        let _ = self.write_each("cgroup.freeze", if frozen { "1" } else { "0" });
    }

    /// SIGKILLs every process in the cgroup and waits (bounded) until it is empty. Frozen
    /// meanwhile where it can be, so nothing forks away during the sweep.
    pub fn kill(&self) {
        let _ = self.write_each("cgroup.kill", "1");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let pids = self.pids();
            if pids.is_empty() || std::time::Instant::now() >= deadline {
                return;
            }
            self.freeze();
            for pid in pids {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            self.thaw();
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the job used, where its cgroup counts it: CPU time (user and system, ms) from
    /// v2's `cpu.stat`, and the most memory it held (KiB) from v2's `memory.peak` or v1's
    /// `memory.max_usage_in_bytes` (`crate::usage`). Read before the cgroup is removed.
    pub fn usage(&self) -> (Option<(u64, u64)>, Option<u64>) {
        let cpu = self
            .read_each("cpu.stat")
            .iter()
            .find_map(|text| crate::usage::cpu_of_v2_stat(text));
        let peak = ["memory.peak", "memory.max_usage_in_bytes"]
            .iter()
            .flat_map(|name| self.read_each(name))
            .find_map(|text| crate::usage::kib_of_bytes(&text));
        (cpu, peak)
    }

    /// Whether the kernel's OOM killer killed anything in the cgroup.
    pub fn oom_killed(&self) -> bool {
        ["memory.events", "memory.oom_control"]
            .iter()
            .flat_map(|name| self.read_each(name))
            .any(|text| {
                text.lines().any(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .is_some_and(|n| n > 0)
                })
            })
    }

    /// Removes the cgroup, killing what is left in it first if it is not empty (bounded: a
    /// cgroup that will not empty is left for the next start of the worker).
    pub fn remove(&self) {
        let busy: Vec<&Path> = self
            .dirs
            .iter()
            .map(|(_, dir)| dir.as_path())
            .filter(|dir| !removed(dir))
            .collect();
        if busy.is_empty() {
            return;
        }
        self.kill();
        for dir in busy {
            for _ in 0..50 {
                if removed(dir) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Removes an empty cgroup directory; true once it is gone.
fn removed(dir: &Path) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Writes a control file that must already exist: a cgroup's files are made by the kernel,
/// and one that is not there is not supported here (`NotFound`), never created.
fn write_control(file: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)?
        .write_all(value.as_bytes())
}

/// Moves process `pid` into each of `dirs`.
pub fn enter_all<'a>(dirs: impl Iterator<Item = &'a Path>, pid: i32) -> std::io::Result<()> {
    for dir in dirs {
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
proc /proc proc rw 0 0
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    const OWN: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/
";

    #[test]
    fn finds_each_hierarchy_and_this_process_s_place_in_it() {
        let found = candidates(MOUNTS, OWN);
        assert_eq!(
            found,
            vec![
                (Kind::Cpu, PathBuf::from("/sys/fs/cgroup/cpu/")),
                (
                    Kind::Memory,
                    PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
                ),
                (Kind::Freezer, PathBuf::from("/sys/fs/cgroup/freezer/")),
                (Kind::Pids, PathBuf::from("/sys/fs/cgroup/pids/")),
                (Kind::Unified, PathBuf::from("/sys/fs/cgroup/unified/")),
            ]
        );
        // Pure v2, and combined v1 controllers.
        let v2 = candidates(
            "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n",
            "0::/system.slice/xce-worker.service\n",
        );
        assert_eq!(
            v2,
            vec![(
                Kind::Unified,
                PathBuf::from("/sys/fs/cgroup/system.slice/xce-worker.service")
            )]
        );
        let combined = candidates(
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n",
            "3:cpu,cpuacct:/user\n",
        );
        assert_eq!(
            combined,
            vec![(Kind::Cpu, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/user"))]
        );
        assert_eq!(candidates("", OWN), vec![]);
    }

    #[test]
    fn each_hierarchy_is_asked_only_for_its_own_files() {
        let v1 = [
            (Kind::Memory, "memory.limit_in_bytes"),
            (Kind::Memory, "memory.memsw.limit_in_bytes"),
            (Kind::Memory, "memory.oom_control"),
            (Kind::Cpu, "cpu.cfs_quota_us"),
            (Kind::Cpu, "cpu.cfs_period_us"),
            (Kind::Freezer, "freezer.state"),
        ];
        let v2 = [
            "memory.max",
            "memory.swap.max",
            "memory.events",
            "cpu.max",
            "cgroup.kill",
            "cgroup.freeze",
        ];
        let kinds = [
            Kind::Unified,
            Kind::Memory,
            Kind::Cpu,
            Kind::Pids,
            Kind::Freezer,
        ];
        for kind in kinds {
            for (owner, file) in v1 {
                assert_eq!(kind.may_have(file), kind == owner, "{kind:?} {file}");
            }
            for file in v2 {
                assert_eq!(
                    kind.may_have(file),
                    kind == Kind::Unified,
                    "{kind:?} {file}"
                );
            }
        }
    }

    /// A v1 host without swap accounting, its control files stood in for by plain files: the
    /// limits go to the files that are there, and no file is made that the kernel did not.
    #[test]
    fn limits_are_written_where_the_files_are_and_nothing_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobCgroup {
            dirs: [Kind::Cpu, Kind::Memory, Kind::Freezer]
                .into_iter()
                .map(|k| (k, dir.path().join(k.name()).join("7.1")))
                .collect(),
        };
        let present = [
            "cpu/7.1/cpu.cfs_quota_us",
            "cpu/7.1/cpu.cfs_period_us",
            "memory/7.1/memory.limit_in_bytes",
            "freezer/7.1/freezer.state",
        ];
        for f in present {
            let path = dir.path().join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        job.create(Limits { cpus: 2, mem_mb: 3 }).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("cpu/7.1/cpu.cfs_quota_us"), "200000");
        assert_eq!(read("cpu/7.1/cpu.cfs_period_us"), "100000");
        assert_eq!(read("memory/7.1/memory.limit_in_bytes"), "3145728");
        job.freeze();
        assert_eq!(read("freezer/7.1/freezer.state"), "FROZEN");
        let mut files: Vec<String> = walk(dir.path())
            .into_iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        files.sort();
        let mut expected: Vec<String> = present.iter().map(|f| f.to_string()).collect();
        expected.sort();
        assert_eq!(files, expected);
    }

    /// An empty cgroup goes at the first try, in every hierarchy.
    #[test]
    fn an_empty_cgroup_is_removed_from_every_hierarchy() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobCgroup {
            dirs: [Kind::Cpu, Kind::Memory]
                .into_iter()
                .map(|k| (k, dir.path().join(k.name()).join("7.1")))
                .collect(),
        };
        job.create(Limits { cpus: 0, mem_mb: 0 }).unwrap();
        assert_eq!(walk(dir.path()).len(), 0);
        assert!(dir.path().join("cpu/7.1").is_dir());
        job.remove();
        assert!(!dir.path().join("cpu/7.1").exists());
        assert!(!dir.path().join("memory/7.1").exists());
    }

    /// Every file (not directory) under `dir`.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
        files
    }

    #[test]
    fn workers_of_one_name_on_different_spools_get_different_cgroups() {
        assert_ne!(
            spool_hash(Path::new("/tmp/a/w1")),
            spool_hash(Path::new("/tmp/b/w1"))
        );
        assert_eq!(
            spool_hash(Path::new("/tmp/a/w1")),
            spool_hash(Path::new("/tmp/a/w1"))
        );
    }
}
