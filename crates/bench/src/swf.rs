//! The Standard Workload Format of the Parallel Workloads Archive
//! (<https://www.cs.huji.ac.il/labs/parallel/workload/swf.html>): one job per line, 18
//! whitespace-separated numeric fields, `-1` where a value is unknown; lines starting with `;`
//! are comments, some of them header fields (`; MaxProcs: 128`).
//!
//! What a replay needs of a job is when it was submitted, how long it ran, how many processors
//! it held and how long it asked for. The format gives each of the last three twice or leaves
//! them out; the rules here, per the format's definition:
//! - processors: the requested number (field 8), else the allocated one (field 5); a job with
//!   neither is left out, as it cannot be placed;
//! - run time (field 4): a job without one (`-1`: it never ran, or was not logged) is left out,
//!   as is one without a submit time (field 2);
//! - requested time (field 9): `-1` (or 0) is none, a job with no time limit. A job cannot run
//!   past its limit on xce (it is ended there), so a logged run longer than its request counts
//!   as the request.
//!
//! Requested processors come first as that is what the scheduler was asked for (many
//! simulators take the allocated count; in most logs the two agree). The machine's size is the
//! header's `MaxProcs`; `MaxNodes` is not used, as a node may hold several processors.

use std::fmt;

/// One job of a trace, as a replay places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfJob {
    /// Field 1.
    pub id: u64,
    /// Seconds from the start of the log (field 2).
    pub submit_s: u64,
    /// Seconds it ran (field 4), at most its request.
    pub run_s: u64,
    pub procs: u32,
    /// Seconds it asked for (field 9); `None`: no limit.
    pub requested_s: Option<u64>,
    /// Field 12; `None` where unknown.
    pub user: Option<u64>,
    /// Field 15; `None` where unknown.
    pub queue: Option<u64>,
}

/// A parsed trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub jobs: Vec<SwfJob>,
    /// The header's `MaxProcs`, the machine's size.
    pub max_procs: Option<u32>,
    /// Jobs left out, with no submit time, run time or processor count.
    pub left_out: usize,
}

/// A line the format does not allow, by its number (from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct SwfError {
    pub line: usize,
    pub message: String,
}

/// The fields a line must have.
const FIELDS: usize = 18;

/// Parses a whole trace.
pub fn parse(text: &str) -> Result<Trace, SwfError> {
    let mut trace = Trace::default();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if let Some(comment) = line.strip_prefix(';') {
            if let Some((key, value)) = comment.split_once(':') {
                let value = value.trim().parse::<u32>().ok().filter(|v| *v > 0);
                if key.trim() == "MaxProcs" {
                    trace.max_procs = value;
                }
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        match job(line).map_err(|message| SwfError {
            line: line_no,
            message,
        })? {
            Some(job) => trace.jobs.push(job),
            None => trace.left_out += 1,
        }
    }
    Ok(trace)
}

/// One job line; `None` when it is left out (see the module's rules).
fn job(line: &str) -> Result<Option<SwfJob>, String> {
    let fields: Vec<i64> = line
        .split_whitespace()
        .enumerate()
        .map(|(i, f)| field(f).ok_or_else(|| format!("field {} is not a number: {f:?}", i + 1)))
        .collect::<Result<_, _>>()?;
    if fields.len() != FIELDS {
        return Err(format!("{} fields, the format has {FIELDS}", fields.len()));
    }
    let known = |n: usize| u64::try_from(fields[n - 1]).ok();
    let id = known(1).ok_or("field 1 (job number) is negative")?;
    let Some(submit_s) = known(2) else {
        return Ok(None);
    };
    let procs = [8, 5]
        .into_iter()
        .filter_map(known)
        .find(|p| *p > 0)
        .map(|p| u32::try_from(p).map_err(|_| format!("{p} processors")))
        .transpose()?;
    let (Some(procs), Some(run_s)) = (procs, known(4)) else {
        return Ok(None);
    };
    let requested_s = known(9).filter(|r| *r > 0);
    Ok(Some(SwfJob {
        id,
        submit_s,
        run_s: requested_s.map_or(run_s, |r| run_s.min(r)),
        procs,
        requested_s,
        user: known(12),
        queue: known(15),
    }))
}

/// A field's value: an integer, or a decimal (some logs write averages so) cut to one.
fn field(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().or_else(|| {
        let value = text.parse::<f64>().ok().filter(|v| v.is_finite())?;
        Some(value.trunc() as i64)
    })
}

/// A trace written in the format: what [`synthesize`] makes, and what `parse` reads back.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "; Version: 2.2")?;
        if let Some(max) = self.max_procs {
            writeln!(f, "; MaxProcs: {max}")?;
        }
        for j in &self.jobs {
            let opt = |v: Option<u64>| v.map_or(-1, |v| v as i64);
            writeln!(
                f,
                "{} {} -1 {} {} -1 -1 {} {} -1 1 {} -1 -1 {} -1 -1 -1",
                j.id,
                j.submit_s,
                j.run_s,
                j.procs,
                j.procs,
                opt(j.requested_s),
                opt(j.user),
                opt(j.queue)
            )?;
        }
        Ok(())
    }
}

/// A synthetic trace of `jobs` jobs on a machine of `procs` processors, the same for the same
/// `seed`: mostly small short jobs, some wide long ones, arriving at about the machine's
/// capacity, with requests that overestimate run times as users' do (up to 4 times).
pub fn synthesize(jobs: usize, procs: u32, seed: u64) -> Trace {
    let mut rng = Lcg(seed.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1));
    let procs = procs.max(1);
    let mut now = 0u64;
    let mut out = Vec::with_capacity(jobs);
    for id in 1..=jobs as u64 {
        let (width, run) = match rng.below(10) {
            // Wide and long.
            0 => (
                procs / 2 + rng.below(u64::from(procs / 2).max(1)) as u32,
                600 + rng.below(3000),
            ),
            // Middle.
            1 | 2 => (
                1 + rng.below(u64::from(procs / 4).max(1)) as u32,
                120 + rng.below(1200),
            ),
            // Small and short.
            _ => (1 + rng.below(4) as u32, 10 + rng.below(600)),
        };
        let width = width.clamp(1, procs);
        let requested = run + rng.below(run * 3 + 1);
        // A job's work over the machine's size is the gap that keeps it full; 10/9 of it on
        // average keeps it 90% busy.
        let full = (run * u64::from(width) / u64::from(procs)).max(1);
        now += rng.below(full * 20 / 9 + 1);
        out.push(SwfJob {
            id,
            submit_s: now,
            run_s: run,
            procs: width,
            requested_s: Some(requested),
            user: Some(1 + rng.below(20)),
            queue: Some(1),
        });
    }
    Trace {
        jobs: out,
        max_procs: Some(procs),
        left_out: 0,
    }
}

/// A small deterministic generator (Knuth's MMIX LCG), so the trace is the same everywhere.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if n == 0 {
            0
        } else {
            (self.0 >> 33) % n
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn fields_and_unknowns_follow_the_format() {
        let text = "; Computer: test\n; MaxNodes: 64\n; MaxProcs: 128\n\
            1 0 5 100 8 -1 -1 -1 200 -1 1 3 1 -1 2 -1 -1 -1\n\
            2 10 -1 300 4 -1 -1 16 100 -1 1 -1 -1 -1 -1 -1 -1 -1\n\
            3 20 -1 -1 4 -1 -1 4 100 -1 5 1 1 -1 1 -1 -1 -1\n\
            4 30 -1 50 -1 -1 -1 -1 -1 -1 0 1 1 -1 1 -1 -1 -1\n\
            5 40 -1 50.7 2 12.5 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n";
        let t = parse(text).unwrap();
        assert_eq!(t.max_procs, Some(128));
        assert_eq!(t.left_out, 2, "job 3 has no run time, job 4 no processors");
        let unknown = "6 -1 -1 5 1 -1 -1 1 1 -1 1 1 1 -1 1 -1 -1 -1\n\
            7 0 -1 5 1 -1 -1 1 0 -1 1 1 1 -1 1 -1 -1 -1\n";
        let u = parse(unknown).unwrap();
        assert_eq!(u.left_out, 1, "no submit time");
        assert_eq!(u.jobs[0].requested_s, None, "a request of 0 is none");
        assert_eq!(
            t.jobs,
            vec![
                SwfJob {
                    id: 1,
                    submit_s: 0,
                    run_s: 100,
                    procs: 8,
                    requested_s: Some(200),
                    user: Some(3),
                    queue: Some(2),
                },
                // Requested processors win; a run longer than its request ends there.
                SwfJob {
                    id: 2,
                    submit_s: 10,
                    run_s: 100,
                    procs: 16,
                    requested_s: Some(100),
                    user: None,
                    queue: None,
                },
                SwfJob {
                    id: 5,
                    submit_s: 40,
                    run_s: 50,
                    procs: 2,
                    requested_s: None,
                    user: Some(1),
                    queue: Some(1),
                },
            ]
        );
        assert_eq!(parse("; MaxNodes: 64\n").unwrap().max_procs, None);
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = parse("; x\n1 2 3\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2: 3 fields, the format has 18");
        let e = parse("1 0 -1 x 1 -1 -1 1 1 -1 1 1 1 -1 1 -1 -1 -1\n").unwrap_err();
        assert_eq!(e.to_string(), "line 1: field 4 is not a number: \"x\"");
    }

    #[test]
    fn the_committed_trace_is_what_the_generator_writes() {
        let committed = include_str!("../traces/synthetic-2000.swf");
        assert_eq!(committed, synthesize(2000, 64, 1).to_string());
    }

    proptest! {
        /// Whatever the generator makes reads back as it was, and no input line panics.
        #[test]
        fn traces_read_back_as_written(jobs in 0usize..50, procs in 1u32..256, seed in any::<u64>()) {
            let t = synthesize(jobs, procs, seed);
            prop_assert!(t.jobs.iter().all(|j| j.procs >= 1 && j.procs <= procs));
            prop_assert_eq!(parse(&t.to_string()).unwrap(), t);
        }

        #[test]
        fn any_line_parses_or_is_named(line in "[-0-9. ;a-zA-Z:]{0,80}") {
            if let Err(e) = parse(&line) {
                prop_assert_eq!(e.line, 1);
            }
        }
    }
}
