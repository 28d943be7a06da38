//! Where a benchmark's CPU went, measured in the same run as its throughput, so that a figure
//! can be read against what this machine charges for a process start: on a VM where each
//! `cpuid` traps to the hypervisor, glibc's start-up alone costs more than all of our code.
//!
//! Readers: the run's own reaped children (`getrusage`), a process's CPU clock (every thread,
//! nanoseconds), the time a process's children and everything they reaped used (`/proc`, in
//! clock ticks: fine over a run of seconds), and the machine's busy time (`/proc/stat`).

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use nix::sys::resource::{getrusage, UsageWho};
use nix::unistd::{sysconf, SysconfVar};

/// Upper bound on one process of the floor measurement.
const FLOOR_PROCESS_LIMIT: Duration = Duration::from_secs(10);

/// Processes the floor is measured over (fewer when a run had fewer operations).
pub const FLOOR_PROCESSES: usize = 500;

/// User + system CPU of every reaped child of this process so far, in ms.
pub fn children_ms() -> anyhow::Result<f64> {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage(RUSAGE_CHILDREN)")?;
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    Ok(ms(usage.user_time()) + ms(usage.system_time()))
}

/// CPU time of the given processes (every thread, the exited ones too), summed, in ms. Read
/// from each process's CPU clock, which counts nanoseconds: `/proc/<pid>/stat` counts 10 ms
/// ticks, and a short run's few ms per controller read as 0 from it.
pub fn processes_ms(pids: &[u32]) -> anyhow::Result<f64> {
    let mut ms = 0.0;
    for &pid in pids {
        ms += process_ms(pid)?;
    }
    Ok(ms)
}

fn process_ms(pid: u32) -> anyhow::Result<f64> {
    let raw = i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?;
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(raw))
        .with_context(|| format!("clock_getcpuclockid({pid})"))?;
    let time =
        nix::time::clock_gettime(clock).with_context(|| format!("CPU clock of process {pid}"))?;
    Ok(time.tv_sec() as f64 * 1000.0 + time.tv_nsec() as f64 / 1e6)
}

/// CPU of what each of `parents` reaped and of its living direct children with everything
/// they reaped, in ms: for a worker, its shim launcher, the shims that launcher forked and
/// the jobs they ran (a launcher the worker replaced, and reaped, counts through the worker).
/// Processes nobody of theirs reaps (a job's orphans, shims adopted after a restart) are not
/// counted.
pub fn descendants_ms(parents: &[u32]) -> anyhow::Result<f64> {
    let tick_ms = 1000.0 / ticks_per_second()?;
    let mut ticks = 0u64;
    for &parent in parents {
        let stat = std::fs::read_to_string(format!("/proc/{parent}/stat"))
            .with_context(|| format!("read /proc/{parent}/stat"))?;
        let fields = stat_fields(&stat).with_context(|| format!("parse /proc/{parent}/stat"))?;
        ticks += fields.cutime + fields.cstime;
    }
    for entry in std::fs::read_dir("/proc").context("read /proc")? {
        let Ok(entry) = entry else { continue };
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        // A process gone meanwhile is not one of theirs any more; one whose line does not
        // parse is not a child of a daemon of ours either.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Ok(fields) = stat_fields(&stat) else {
            continue;
        };
        if parents.contains(&fields.ppid) {
            ticks += fields.utime + fields.stime + fields.cutime + fields.cstime;
        }
    }
    Ok(ticks as f64 * tick_ms)
}

/// Busy CPU of the whole machine so far, in ms: every CPU, every state but idle, iowait and
/// steal (time the hypervisor gave to other guests). Machine-wide: other load on it counts.
pub fn machine_busy_ms() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
    Ok(machine_busy_ticks(&stat)? as f64 * 1000.0 / ticks_per_second()?)
}

/// The CPUs this run may use: what a throughput on this machine is divided by.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// What one start of `program` costs here (the CPU of the process, from its fork to its
/// reaping), run `n` times by `concurrency` launchers as the benchmarks run theirs: the
/// floor under anything that is one process per operation. A lower bound for a job, whose
/// shim forks it whole (it sets the job up before the exec) where this spawns it.
pub async fn process_floor_ms(program: &Path, n: usize, concurrency: usize) -> anyhow::Result<f64> {
    ensure!(
        n > 0 && concurrency > 0,
        "the floor needs processes and launchers"
    );
    let before = children_ms()?;
    let next = Arc::new(AtomicUsize::new(0));
    let mut launchers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (next, program) = (next.clone(), program.to_path_buf());
        launchers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let child = tokio::process::Command::new(&program)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .with_context(|| format!("start {}", program.display()))?;
                let status = tokio::time::timeout(FLOOR_PROCESS_LIMIT, child.wait_with_output())
                    .await
                    .with_context(|| format!("{} still running", program.display()))??
                    .status;
                ensure!(status.success(), "{} failed: {status}", program.display());
            }
            anyhow::Ok(())
        }));
    }
    for launcher in launchers {
        launcher.await??;
    }
    Ok((children_ms()? - before) / n as f64)
}

/// The program a `true` job runs: the first `true` on `PATH`.
pub fn true_program() -> anyhow::Result<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("true"))
        .find(|p| p.is_file())
        .context("no `true` on PATH")
}

fn ticks_per_second() -> anyhow::Result<f64> {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => Ok(t as f64),
        other => anyhow::bail!("sysconf(CLK_TCK) gave {other:?}"),
    }
}

/// The fields of `/proc/<pid>/stat` the accounting reads, all in clock ticks but the parent.
#[derive(Debug, PartialEq, Eq)]
struct StatFields {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses,
/// so the fields are counted from its last `)`.
fn stat_fields(stat: &str) -> anyhow::Result<StatFields> {
    let after_name = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .context("no command name")?;
    // Fields 3.. of the stat line: state, ppid, pgrp, ... utime is field 14.
    let rest: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        rest.get(n - 3)
            .with_context(|| format!("field {n} missing"))?
            .parse()
            .with_context(|| format!("field {n} is not a number"))
    };
    Ok(StatFields {
        ppid: u32::try_from(field(4)?).context("ppid out of range")?,
        utime: field(14)?,
        stime: field(15)?,
        cutime: field(16)?,
        cstime: field(17)?,
    })
}

/// Busy ticks from the `cpu` line of `/proc/stat`: user, nice, system, irq and softirq (guest
/// time is within user and nice already).
fn machine_busy_ticks(stat: &str) -> anyhow::Result<u64> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("a cpu field of /proc/stat is not a number")?;
    ensure!(
        ticks.len() >= 8,
        "the cpu line of /proc/stat is short: {line}"
    );
    // user nice system idle iowait irq softirq steal
    Ok(ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn another_process_s_cpu_is_read_below_a_tick() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 30",
            ])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut last = 0.0;
        // The loop's CPU shows up as it runs; a tick-based reading would step by 10 ms.
        while std::time::Instant::now() < deadline {
            last = processes_ms(&[pid]).unwrap();
            if last > 0.0 && last % 10.0 != 0.0 {
                break;
            }
            std::thread::yield_now();
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(last > 0.0 && last % 10.0 != 0.0, "read {last} ms");
        assert!(processes_ms(&[u32::MAX]).is_err());
    }

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (capnp (1) x) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    7 3 11 5 20 0 1 0 12345 1000 10 18446744073709551615";
        assert_eq!(
            stat_fields(line).unwrap(),
            StatFields {
                ppid: 17,
                utime: 7,
                stime: 3,
                cutime: 11,
                cstime: 5,
            }
        );
        assert!(stat_fields("4242 (x) S 17").is_err());
        assert!(stat_fields("no name here").is_err());
    }

    #[test]
    fn the_machine_s_busy_time_leaves_out_idle_iowait_and_steal() {
        let stat = "cpu  10 20 30 4000 500 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(machine_busy_ticks(stat).unwrap(), 10 + 20 + 30 + 6 + 7);
        assert!(machine_busy_ticks("cpu0 1 2 3\n").is_err());
        assert!(machine_busy_ticks("cpu  1 2 x 4 5 6 7 8\n").is_err());
    }

    #[test]
    fn a_reaped_grandchild_s_cpu_counts_for_its_parent_s_parent() {
        // sh (our child) runs a busy loop in a subshell it reaps, then waits to be read.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done); exec sleep 30",
            ])
            .spawn()
            .unwrap();
        let me = std::process::id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = 0.0;
        while std::time::Instant::now() < deadline {
            seen = descendants_ms(&[me]).unwrap();
            // The subshell's loop takes well over a tick; it shows once the subshell is reaped.
            if seen >= 20.0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A process that never had a child: none of the machine's other work is its.
        let mut idle = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let below = descendants_ms(&[idle.id()]).unwrap();
        for p in [&mut child, &mut idle] {
            let _ = p.kill();
            let _ = p.wait();
        }
        assert!(seen >= 20.0, "read {seen} ms");
        assert_eq!(below, 0.0, "read {below} ms below a sleep");
        assert!(descendants_ms(&[u32::MAX]).is_err());
    }

    #[tokio::test]
    async fn the_floor_is_the_cpu_of_one_process() {
        let floor = process_floor_ms(&true_program().unwrap(), 20, 2)
            .await
            .unwrap();
        assert!(floor > 0.0 && floor < 100.0, "{floor} ms");
        assert!(process_floor_ms(Path::new("/nonexistent/true"), 1, 1)
            .await
            .is_err());
    }
}
