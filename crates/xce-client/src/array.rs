//! Job arrays: the task indices of an array as a set of ranges, the `--array` spec
//! (`0-999`, `1,3,5-7`, `1-99:2`, `%N`), and the `ID_IDX` / `ID_[1-5]` names of its tasks.
//!
//! An array's pending tasks are one [`TaskSet`], not one record per task, so a 1,000,000-task
//! array costs about what one job costs until its tasks run: a set holds runs of indices with
//! a step (`1-99:2` is one run), and splits a run only where a task leaves it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The largest task index (Slurm's and LSF's too: a signed 32-bit index).
pub const MAX_INDEX: u32 = i32::MAX as u32;

/// Tasks per array unless the cluster says otherwise (`jobs.max_array_tasks`).
pub const DEFAULT_MAX_TASKS: u64 = 10_000_000;

/// Why an array spec or a task name was refused: what was given, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{got:?}: {why}")]
pub struct ArrayError {
    pub got: String,
    pub why: String,
}

fn error(got: &str, why: impl Into<String>) -> ArrayError {
    ArrayError {
        got: got.to_string(),
        why: why.into(),
    }
}

/// Indices `start, start+step, …, end` (`end` is a member: `(end - start) % step == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start: u32,
    pub end: u32,
    pub step: u32,
}

impl Run {
    /// One index.
    pub fn single(i: u32) -> Run {
        Run {
            start: i,
            end: i,
            step: 1,
        }
    }

    /// `start..=end` every `step`, its end brought down to a member; `None` when empty.
    pub fn new(start: u32, end: u32, step: u32) -> Option<Run> {
        if step == 0 || end < start {
            return None;
        }
        let end = end - (end - start) % step;
        // One index has no step: one form per set of indices.
        let step = if start == end { 1 } else { step };
        Some(Run { start, end, step })
    }

    /// How many indices it holds.
    pub fn len(&self) -> u64 {
        u64::from((self.end - self.start) / self.step) + 1
    }

    /// Never true: a run holds at least its start. For clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `i` is one of its indices.
    pub fn contains(&self, i: u32) -> bool {
        i >= self.start && i <= self.end && (i - self.start).is_multiple_of(self.step)
    }

    /// Its members in `lo..=hi`, as a run.
    fn within(&self, lo: u32, hi: u32) -> Option<Run> {
        let lo = lo.max(self.start);
        let hi = hi.min(self.end);
        if lo > hi {
            return None;
        }
        let first = self.start + (lo - self.start).div_ceil(self.step) * self.step;
        // `first` may pass `hi` (or overflow past MAX_INDEX, which `new` refuses).
        Run::new(first, hi, self.step)
    }

    /// Its indices, in order.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..self.len()).map(move |k| self.start + (k as u32) * self.step)
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.start == self.end, self.step) {
            (true, _) => write!(f, "{}", self.start),
            (false, 1) => write!(f, "{}-{}", self.start, self.end),
            (false, step) => write!(f, "{}-{}:{step}", self.start, self.end),
        }
    }
}

/// A set of task indices, as runs whose spans (`start..=end`) never overlap, so a run of one
/// step holds any number of tasks in a few bytes. Ordered by index: the next tasks of an array
/// to run are its lowest.
#[derive(Debug, Clone, Default)]
pub struct TaskSet {
    /// By start.
    runs: BTreeMap<u32, Run>,
    len: u64,
}

impl TaskSet {
    /// No tasks.
    pub fn new() -> TaskSet {
        TaskSet::default()
    }

    /// How many tasks it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its runs, by start: what is stored, and what a listing shows.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.runs.values().copied()
    }

    /// Its indices, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.values().flat_map(|r| r.iter())
    }

    /// The lowest index.
    pub fn first(&self) -> Option<u32> {
        self.runs.keys().next().copied()
    }

    /// The highest index.
    pub fn last(&self) -> Option<u32> {
        self.runs.values().next_back().map(|r| r.end)
    }

    /// The run whose span holds `i`.
    fn span_of(&self, i: u32) -> Option<Run> {
        self.runs
            .range(..=i)
            .next_back()
            .map(|(_, r)| *r)
            .filter(|r| r.end >= i)
    }

    /// Whether `i` is in it.
    pub fn contains(&self, i: u32) -> bool {
        self.span_of(i).is_some_and(|r| r.contains(i))
    }

    /// The run that holds `i`, when it is in it: a scan over an array's tasks skips the rest
    /// of a run at once.
    pub fn run_holding(&self, i: u32) -> Option<Run> {
        self.span_of(i).filter(|r| r.contains(i))
    }

    /// Its lowest index from `i` on.
    pub fn first_from(&self, i: u32) -> Option<u32> {
        if let Some(run) = self.span_of(i) {
            let next = run.start + (i - run.start).div_ceil(run.step) * run.step;
            if next <= run.end {
                return Some(next);
            }
        }
        self.runs
            .range(i.checked_add(1)?..)
            .next()
            .map(|(start, _)| *start)
    }

    fn put(&mut self, run: Run) {
        self.len += run.len();
        self.runs.insert(run.start, run);
    }

    fn take(&mut self, start: u32) -> Option<Run> {
        let run = self.runs.remove(&start)?;
        self.len -= run.len();
        Some(run)
    }

    /// Adds `i` (a task requeued or released back to its array); false if it was there.
    pub fn insert(&mut self, i: u32) -> bool {
        match self.span_of(i) {
            Some(r) if r.contains(i) => return false,
            // Between two members of a stepped run: split it around `i`.
            Some(r) => {
                self.take(r.start);
                let below = Run::new(r.start, i - 1, r.step);
                let above = Run::new(
                    r.start + (i - r.start).div_ceil(r.step) * r.step,
                    r.end,
                    r.step,
                );
                for part in [below, above].into_iter().flatten() {
                    self.put(part);
                }
            }
            None => {}
        }
        self.put(Run::single(i));
        self.merge_around(i);
        true
    }

    /// Joins the one-step (or single) run holding `i` with the one-step or single runs that
    /// touch it, on either side, as far as they go.
    fn merge_around(&mut self, i: u32) {
        let joins = |r: &Run| r.step == 1 || r.start == r.end;
        loop {
            let Some(run) = self.span_of(i).filter(joins) else {
                return;
            };
            let prev = run
                .start
                .checked_sub(1)
                .and_then(|p| self.span_of(p))
                .filter(|p| joins(p) && p.end + 1 == run.start);
            let next = run
                .end
                .checked_add(1)
                .and_then(|n| self.runs.get(&n).copied())
                .filter(joins);
            let (lo, hi) = match (prev, next) {
                (Some(p), _) => (p, run),
                (None, Some(n)) => (run, n),
                (None, None) => return,
            };
            self.take(lo.start);
            self.take(hi.start);
            self.put(Run {
                start: lo.start,
                end: hi.end,
                step: 1,
            });
        }
    }

    /// Adds every index of `run`.
    pub fn insert_run(&mut self, run: Run) {
        let overlaps = self
            .runs
            .range(..=run.end)
            .next_back()
            .is_some_and(|(_, r)| r.end >= run.start);
        if overlaps {
            // Interleaved with what is there: index by index (rare: `1-9:2,2-10:2`).
            for i in run.iter() {
                self.insert(i);
            }
            return;
        }
        self.put(run);
        if run.step == 1 || run.start == run.end {
            self.merge_around(run.start);
        }
    }

    /// Removes `i`; false if it was not there.
    pub fn remove(&mut self, i: u32) -> bool {
        !self.remove_range(i, i).is_empty()
    }

    /// Removes every index in `lo..=hi` and gives them back (a kill or hold of `ID_[lo-hi]`).
    pub fn remove_range(&mut self, lo: u32, hi: u32) -> TaskSet {
        let mut removed = TaskSet::new();
        if lo > hi {
            return removed;
        }
        let touched: Vec<Run> = self
            .runs
            .range(..=hi)
            .rev()
            .take_while(|(_, r)| r.end >= lo)
            .map(|(_, r)| *r)
            .collect();
        for r in touched {
            let Some(inside) = r.within(lo, hi) else {
                continue;
            };
            self.take(r.start);
            let below = Run::new(r.start, inside.start.saturating_sub(1), r.step)
                .filter(|_| inside.start > r.start);
            let above = inside
                .end
                .checked_add(r.step)
                .and_then(|from| Run::new(from, r.end, r.step));
            for part in [below, above].into_iter().flatten() {
                self.put(part);
            }
            removed.put(inside);
        }
        removed
    }

    /// Removes and gives back every index it shares with `other` (what a kill or hold of
    /// `ID_[1-5,9]` takes from the tasks waiting in an array): a one-step run at the cost of
    /// the runs it touches, a stepped one index by index over the smaller side.
    pub fn take_set(&mut self, other: &TaskSet) -> TaskSet {
        let mut taken = TaskSet::new();
        for run in other.runs() {
            let mut inside = self.remove_range(run.start, run.end);
            if run.step == 1 || run.start == run.end {
                for r in inside.runs() {
                    taken.insert_run(r);
                }
                continue;
            }
            let hits: Vec<u32> = if run.len() < inside.len() {
                run.iter().filter(|i| inside.contains(*i)).collect()
            } else {
                inside.iter().filter(|i| run.contains(*i)).collect()
            };
            for i in hits {
                inside.remove(i);
                taken.insert(i);
            }
            // What the span held beyond the run goes back.
            for r in inside.runs() {
                self.insert_run(r);
            }
        }
        taken
    }

    /// Takes its `n` lowest indices: the next tasks to run, in index order.
    pub fn pop_first(&mut self, n: u64) -> Vec<u32> {
        let mut out = Vec::new();
        while (out.len() as u64) < n {
            let Some(start) = self.first() else {
                break;
            };
            let Some(run) = self.take(start) else {
                break;
            };
            let want = n - out.len() as u64;
            if run.len() <= want {
                out.extend(run.iter());
            } else {
                let taken = Run::new(
                    run.start,
                    run.start + (want as u32 - 1) * run.step,
                    run.step,
                );
                if let Some(t) = taken {
                    out.extend(t.iter());
                    if let Some(rest) = Run::new(t.end + run.step, run.end, run.step) {
                        self.put(rest);
                    }
                }
            }
        }
        out
    }
}

/// Two sets are equal when they hold the same indices, however their runs fell.
impl PartialEq for TaskSet {
    fn eq(&self, other: &TaskSet) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for TaskSet {}

impl fmt::Display for TaskSet {
    /// `0-999`, `1,3,5-7`, `1-99:2`: what `--array` takes back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, run) in self.runs.values().enumerate() {
            if k > 0 {
                f.write_str(",")?;
            }
            write!(f, "{run}")?;
        }
        Ok(())
    }
}

impl FromStr for TaskSet {
    type Err = ArrayError;

    /// A comma-separated list of `N`, `A-B` and `A-B:S`, each index at most [`MAX_INDEX`],
    /// whose spans do not overlap (`1-9:2,2-10:2` is refused: joined index by index, two
    /// short items could cost billions of steps).
    fn from_str(text: &str) -> Result<TaskSet, ArrayError> {
        let mut runs = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            runs.push((parse_run(text, item)?, item));
        }
        runs.sort_by_key(|(r, _)| r.start);
        for pair in runs.windows(2) {
            let ((a, a_text), (b, b_text)) = (pair[0], pair[1]);
            if b.start <= a.end {
                return Err(error(
                    text,
                    format!("{a_text} and {b_text} overlap: give each index once"),
                ));
            }
        }
        let mut set = TaskSet::new();
        for (run, _) in runs {
            set.insert_run(run);
        }
        Ok(set)
    }
}

fn parse_index(whole: &str, part: &str) -> Result<u32, ArrayError> {
    let n: u64 = part.parse().map_err(|_| {
        error(
            whole,
            format!("{part:?} is not an index (a number from 0 to {MAX_INDEX})"),
        )
    })?;
    if n > u64::from(MAX_INDEX) {
        return Err(error(
            whole,
            format!("index {n} is over the largest, {MAX_INDEX}"),
        ));
    }
    Ok(n as u32)
}

fn parse_run(whole: &str, item: &str) -> Result<Run, ArrayError> {
    if item.is_empty() {
        return Err(error(whole, "an empty item (expected N, A-B or A-B:STEP)"));
    }
    let (range, step) = match item.split_once(':') {
        Some((range, step)) => {
            let s = parse_index(whole, step)?;
            if s == 0 {
                return Err(error(whole, format!("{item}: a step of 0")));
            }
            (range, s)
        }
        None => (item, 1),
    };
    let (start, end) = match range.split_once('-') {
        Some((a, b)) => (parse_index(whole, a)?, parse_index(whole, b)?),
        None => {
            let i = parse_index(whole, range)?;
            (i, i)
        }
    };
    if end < start {
        return Err(error(whole, format!("{item}: {end} is below {start}")));
    }
    Run::new(start, end, step).ok_or_else(|| error(whole, format!("{item}: empty")))
}

/// Stored and sent as its text (what `--array` takes), which reads back the same.
impl serde::Serialize for TaskSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TaskSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TaskSet, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() {
            return Ok(TaskSet::new());
        }
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for ArraySpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ArraySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ArraySpec, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl ArraySpec {
    /// The step of its indices, for `XCE_ARRAY_TASK_STEP`: its one run's, or 1.
    pub fn step(&self) -> u32 {
        let mut runs = self.tasks.runs();
        match (runs.next(), runs.next()) {
            (Some(run), None) => run.step,
            _ => 1,
        }
    }
}

/// An array as submitted (`--array 0-999%50`): its tasks, and how many may run at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    pub tasks: TaskSet,
    /// At most this many tasks running at once (`%N`); `None`: no throttle.
    pub throttle: Option<u32>,
}

impl ArraySpec {
    /// Parses a spec and checks it against the cluster's largest array (`max_tasks`).
    pub fn parse(text: &str, max_tasks: u64) -> Result<ArraySpec, ArrayError> {
        let spec: ArraySpec = text.parse()?;
        spec.within(max_tasks).map_err(|why| error(text, why))?;
        Ok(spec)
    }

    /// Whether it holds at most the cluster's largest array (`jobs.max_array_tasks`); the
    /// submit service's check.
    pub fn within(&self, max_tasks: u64) -> Result<(), String> {
        match self.tasks.len() {
            n if n > max_tasks => Err(format!(
                "{n} tasks, over the cluster's limit of {max_tasks} (jobs.max_array_tasks)"
            )),
            _ => Ok(()),
        }
    }
}

impl FromStr for ArraySpec {
    type Err = ArrayError;

    fn from_str(text: &str) -> Result<ArraySpec, ArrayError> {
        let t = text.trim();
        let (tasks, throttle) = match t.split_once('%') {
            Some((tasks, n)) => {
                let n: u32 = n
                    .trim()
                    .parse()
                    .map_err(|_| error(text, format!("throttle {n:?} is not a number of tasks")))?;
                if n == 0 {
                    return Err(error(text, "a throttle of 0 would run no task"));
                }
                (tasks, Some(n))
            }
            None => (t, None),
        };
        if tasks.trim().is_empty() {
            return Err(error(
                text,
                "no tasks (expected e.g. 0-999, 1,3,5-7 or 1-99:2)",
            ));
        }
        let tasks = tasks.parse::<TaskSet>().map_err(|e| ArrayError {
            got: text.to_string(),
            why: e.why,
        })?;
        Ok(ArraySpec { tasks, throttle })
    }
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.tasks)?;
        if let Some(n) = self.throttle {
            write!(f, "%{n}")?;
        }
        Ok(())
    }
}

/// A job, or tasks of an array, as commands name them: `42`, `42_7`, `42_[1-5]`,
/// `42_[1,3,5-7]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    pub id: u64,
    /// `None`: the job, or every task of the array.
    pub tasks: Option<TaskSet>,
}

impl FromStr for JobRef {
    type Err = ArrayError;

    fn from_str(text: &str) -> Result<JobRef, ArrayError> {
        let t = text.trim();
        let (id, tasks) = match t.split_once('_') {
            Some((id, tasks)) => (id, Some(tasks)),
            None => (t, None),
        };
        let id: u64 = id
            .parse()
            .map_err(|_| error(text, "expected a job id: ID, ID_IDX or ID_[A-B,...]"))?;
        let tasks = match tasks {
            None => None,
            Some(t) => {
                let inner = match t.strip_prefix('[') {
                    Some(rest) => rest
                        .strip_suffix(']')
                        .ok_or_else(|| error(text, "a task list opened with [ is not closed"))?,
                    None => t,
                };
                let set = inner.parse::<TaskSet>().map_err(|e| ArrayError {
                    got: text.to_string(),
                    why: e.why,
                })?;
                Some(set)
            }
        };
        Ok(JobRef { id, tasks })
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tasks {
            None => write!(f, "{}", self.id),
            Some(t) if t.len() == 1 => write!(f, "{}_{t}", self.id),
            Some(t) => write!(f, "{}_[{t}]", self.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn set(text: &str) -> TaskSet {
        text.parse().unwrap()
    }

    fn members(s: &TaskSet) -> Vec<u32> {
        s.iter().collect()
    }

    #[test]
    fn specs_parse_and_print_back() {
        for (text, shown, len) in [
            ("0-999", "0-999", 1000),
            ("1,3,5-7", "1,3,5-7", 5),
            ("1-99:2", "1-99:2", 50),
            ("1-100:2", "1-99:2", 50),
            ("5,4,3", "3-5", 3),
            ("0-3,4-7", "0-7", 8),
            ("7", "7", 1),
            ("0-2147483647", "0-2147483647", 2_147_483_648),
        ] {
            let s = set(text);
            assert_eq!((s.to_string(), s.len()), (shown.to_string(), len), "{text}");
        }
        let spec: ArraySpec = "0-999%50".parse().unwrap();
        assert_eq!((spec.tasks.len(), spec.throttle), (1000, Some(50)));
        assert_eq!(spec.to_string(), "0-999%50");
    }

    #[test]
    fn bad_specs_name_what_is_wrong() {
        for (text, why) in [
            ("", "no tasks"),
            ("0-9%0", "throttle of 0"),
            ("0-9%x", "throttle"),
            ("5-1", "below"),
            ("1-9:0", "step of 0"),
            ("2147483648", "over the largest"),
            ("a-b", "not an index"),
            ("1,,2", "empty item"),
            ("-1", "not an index"),
            ("1-9:2,2-10:2", "overlap"),
            ("0-2000000000:2,1-2000000001:2", "overlap"),
        ] {
            let e = text.parse::<ArraySpec>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
        let e = ArraySpec::parse("0-10", 10).unwrap_err();
        assert!(e.to_string().contains("11 tasks, over"), "{e}");
        assert!(ArraySpec::parse("0-9", 10).is_ok());
    }

    #[test]
    fn job_refs_name_a_job_a_task_or_tasks() {
        let r: JobRef = "42".parse().unwrap();
        assert_eq!(
            r,
            JobRef {
                id: 42,
                tasks: None
            }
        );
        let r: JobRef = "42_7".parse().unwrap();
        assert_eq!(members(r.tasks.as_ref().unwrap()), vec![7]);
        assert_eq!(r.to_string(), "42_7");
        let r: JobRef = "42_[1-3,9]".parse().unwrap();
        assert_eq!(members(r.tasks.as_ref().unwrap()), vec![1, 2, 3, 9]);
        assert_eq!(r.to_string(), "42_[1-3,9]");
        for bad in ["x", "42_", "42_[1-3", "_4", "42_x"] {
            assert!(bad.parse::<JobRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_million_task_run_is_one_run() {
        let mut s = set("0-999999");
        assert_eq!(s.runs().count(), 1);
        assert_eq!(s.pop_first(3), vec![0, 1, 2]);
        s.remove(500_000);
        assert_eq!(s.to_string(), "3-499999,500001-999999");
        s.insert(500_000);
        assert_eq!(s.to_string(), "3-999999");
    }

    /// An operation on a set, for the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        RemoveRange(u32, u32),
        InsertRun(u32, u32, u32),
        PopFirst(u8),
        TakeSet(u32, u32, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let i = 0u32..200;
        prop_oneof![
            i.clone().prop_map(Op::Insert),
            i.clone().prop_map(Op::Remove),
            (i.clone(), 0u32..40).prop_map(|(a, n)| Op::RemoveRange(a, a + n)),
            (i, 0u32..60, 1u32..6).prop_map(|(a, n, s)| Op::InsertRun(a, a + n, s)),
            (0u8..8).prop_map(Op::PopFirst),
            (0u32..200, 0u32..60, 1u32..6).prop_map(|(a, n, s)| Op::TakeSet(a, a + n, s)),
        ]
    }

    proptest! {
        /// Split, kill and requeue of tasks against a `BTreeSet`: the same members, the same
        /// answers, and runs whose spans never overlap.
        #[test]
        fn a_task_set_is_the_set_of_its_indices(start in "[0-9]{1,3}(-[0-9]{1,3}(:[1-9])?)?", ops in prop::collection::vec(op(), 0..60)) {
            let mut s: TaskSet = match start.parse() {
                Ok(s) => s,
                Err(_) => TaskSet::new(),
            };
            let mut model: BTreeSet<u32> = s.iter().collect();
            for op in ops {
                match op {
                    Op::Insert(i) => prop_assert_eq!(s.insert(i), model.insert(i)),
                    Op::Remove(i) => prop_assert_eq!(s.remove(i), model.remove(&i)),
                    Op::RemoveRange(a, b) => {
                        let got: Vec<u32> = s.remove_range(a, b).iter().collect();
                        let want: Vec<u32> = model.range(a..=b).copied().collect();
                        for i in &want {
                            model.remove(i);
                        }
                        prop_assert_eq!(got, want);
                    }
                    Op::InsertRun(a, b, step) => {
                        let run = Run::new(a, b, step).unwrap();
                        s.insert_run(run);
                        model.extend(run.iter());
                    }
                    Op::PopFirst(n) => {
                        let want: Vec<u32> = model.iter().take(n as usize).copied().collect();
                        for i in &want {
                            model.remove(i);
                        }
                        prop_assert_eq!(s.pop_first(u64::from(n)), want);
                    }
                    Op::TakeSet(a, b, step) => {
                        let mut other = TaskSet::new();
                        let run = Run::new(a, b, step).unwrap();
                        other.insert_run(run);
                        other.insert(a / 2);
                        let got: Vec<u32> = s.take_set(&other).iter().collect();
                        let want: Vec<u32> =
                            model.iter().copied().filter(|i| other.contains(*i)).collect();
                        for i in &want {
                            model.remove(i);
                        }
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(members(&s), model.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(s.len(), model.len() as u64);
                prop_assert_eq!(s.first(), model.first().copied());
                prop_assert_eq!(s.last(), model.last().copied());
                for probe in [0u32, 3, 17, 60, 99, 150, 260] {
                    prop_assert_eq!(s.first_from(probe), model.range(probe..).next().copied());
                    let held = s.run_holding(probe);
                    prop_assert_eq!(held.is_some(), model.contains(&probe));
                    if let Some(run) = held {
                        prop_assert!(run.iter().all(|i| model.contains(&i)), "{:?}", run);
                    }
                }
                let runs: Vec<Run> = s.runs().collect();
                for pair in runs.windows(2) {
                    prop_assert!(pair[0].end < pair[1].start, "{:?}", runs);
                }
                for i in 0..260 {
                    prop_assert_eq!(s.contains(i), model.contains(&i));
                }
            }
            // What it prints parses back to the same set.
            if !s.is_empty() {
                let again: TaskSet = s.to_string().parse().unwrap();
                prop_assert_eq!(members(&again), members(&s));
            }
        }

        /// Whatever text: a set or an error naming the text, never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "[0-9,:%\\-\\[\\]_ ]{0,24}") {
            match text.parse::<ArraySpec>() {
                Ok(spec) => prop_assert!(!spec.tasks.is_empty()),
                Err(e) => prop_assert_eq!(e.got, text.clone()),
            }
            let _ = text.parse::<JobRef>();
        }
    }
}
