//! Job dependencies (`--dependency`): Slurm's types over job ids (`afterok:1:2,after:3`,
//! `afterany:4?afternotok:5`, `singleton`), as an expression of conditions joined by all or
//! any, so that LSF's `done(1) && (exit(2) || ended(3))` maps onto the same model; and its
//! verdict, decided from what each condition's job has done.
//!
//! A verdict is decided by the controller's state machine as each parent's end is applied, so
//! it is the same on every controller and across failovers and replays. A decided verdict is
//! final: as a parent's tasks move forward (not started → running → ended), no condition that
//! is met or can never be met changes back (a property test says so); and a parent requeued
//! after it ended changes no verdict decided on its first end (as in Slurm). A job *ran* once
//! it was ever placed: one requeued and then cancelled while pending ran.
//!
//! The text form is Slurm's, one level of `,` or `?`; a nested group (LSF's) prints in
//! parentheses, which the parser does not read: nothing builds one yet.

use std::fmt;
use std::str::FromStr;

use crate::array::JobRef;
use crate::types::JobResult;

/// How a condition's job must have gone, by Slurm's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Every task started (or ended, as a cancelled one did).
    After,
    /// Every task ended, however.
    AfterAny,
    /// Every task ended `completed`.
    AfterOk,
    /// Every task ended otherwise, having run (a job cancelled before it ran never satisfies
    /// it, as Flux had to learn).
    AfterNotOk,
    /// Task i of this array after task i of that one ended `completed`.
    AfterCorr,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::After,
        Kind::AfterAny,
        Kind::AfterOk,
        Kind::AfterNotOk,
        Kind::AfterCorr,
    ];

    /// Its name in `--dependency`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterOk => "afterok",
            Kind::AfterNotOk => "afternotok",
            Kind::AfterCorr => "aftercorr",
        }
    }
}

/// One thing a job waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A job (or tasks of an array) to have gone some way.
    On(Kind, JobRef),
    /// No other job of its name and user running (`singleton`).
    Singleton,
}

/// A dependency: its terms, joined by all or any, or groups of them (LSF's nesting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// One condition.
    Term(Term),
    /// All of them (`,` in Slurm's syntax, `&&` in LSF's).
    All(Vec<Expr>),
    /// Any of them (`?`, `||`).
    Any(Vec<Expr>),
}

/// Stored and sent as its text (what `--dependency` takes), which reads back the same.
impl serde::Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Expr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Expr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a dependency was refused: what was given, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dependency {}: {why}", shown(got))]
pub struct DependencyError {
    /// The text given.
    pub got: String,
    /// What is wrong with it (naming the item at fault where there is one).
    pub why: String,
}

/// The text given, quoted, cut short when long: an error names the item at fault anyway.
fn shown(got: &str) -> String {
    const MAX: usize = 80;
    match got.char_indices().nth(MAX) {
        Some((at, _)) => format!("{:?}…", &got[..at]),
        None => format!("{got:?}"),
    }
}

impl Expr {
    /// Every term, in order.
    pub fn terms(&self) -> Vec<&Term> {
        match self {
            Expr::Term(t) => vec![t],
            Expr::All(parts) | Expr::Any(parts) => parts.iter().flat_map(Expr::terms).collect(),
        }
    }

    /// The ids of the jobs it names (each once), for the checks at submit: each must exist,
    /// and none may be the job itself.
    pub fn job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = Vec::new();
        for t in self.terms() {
            if let Term::On(_, job) = t {
                if !ids.contains(&job.id) {
                    ids.push(job.id);
                }
            }
        }
        ids
    }
}

impl FromStr for Expr {
    type Err = DependencyError;

    /// Slurm's `--dependency`: `TYPE:ID[:ID...]` items joined by `,` (all) or `?` (any, not
    /// both), and `singleton`; an id may name an array's tasks (`12_3`, `12_[1-5]`).
    fn from_str(text: &str) -> Result<Expr, DependencyError> {
        let err = |why: String| DependencyError {
            got: text.to_string(),
            why,
        };
        let t = text.trim();
        if t.is_empty() {
            return Err(err(
                "empty; expected e.g. afterok:12 or afterany:12:13".into()
            ));
        }
        let all = split_outside(t, ',');
        let any_of = split_outside(t, '?');
        let (items, any) = match (all.len() > 1, any_of.len() > 1) {
            (true, true) => return Err(err("both , (all) and ? (any): use one of them".into())),
            (_, true) => (any_of, true),
            _ => (all, false),
        };
        let mut terms = Vec::new();
        for item in items {
            let item = item.trim();
            if item == "singleton" {
                terms.push(Expr::Term(Term::Singleton));
                continue;
            }
            let parts = split_outside(item, ':');
            let (name, parts) = (parts[0], &parts[1..]);
            let kind = Kind::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    err(format!(
                        "{item:?}: unknown type {name:?}; expected after, afterany, afterok, \
                         afternotok, aftercorr or singleton"
                    ))
                })?;
            let mut any_id = false;
            for &id in parts {
                if id.contains('+') {
                    return Err(err(format!(
                        "{item:?}: a delay (+MINUTES) is not supported; give a begin time \
                         (--begin) instead"
                    )));
                }
                let job: JobRef = id
                    .parse()
                    .map_err(|e: crate::array::ArrayError| err(format!("{item:?}: {}", e.why)))?;
                if kind == Kind::AfterCorr && job.tasks.is_some() {
                    return Err(err(format!(
                        "{item:?}: aftercorr pairs whole arrays; give the array's id"
                    )));
                }
                terms.push(Expr::Term(Term::On(kind, job)));
                any_id = true;
            }
            if !any_id {
                return Err(err(format!("{item:?}: {name} needs a job id ({name}:ID)")));
            }
        }
        Ok(match (terms.len(), any) {
            (1, _) => terms.remove(0),
            (_, true) => Expr::Any(terms),
            (_, false) => Expr::All(terms),
        })
    }
}

/// `text` split at each `sep` outside the brackets of a task list (`12_[1,3-9:2]`).
fn split_outside(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0u32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            c if c == sep && depth == 0 => {
                parts.push(&text[from..i]);
                from = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[from..]);
    parts
}

impl fmt::Display for Expr {
    /// Slurm's syntax where it can say it (one level, consecutive ids of a type together:
    /// `afterok:1:2,after:3`); a nested group in parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (parts, sep) = match self {
            Expr::Term(t) => return write_term(f, t),
            Expr::All(parts) => (parts, ","),
            Expr::Any(parts) => (parts, "?"),
        };
        let mut last: Option<Kind> = None;
        for (k, part) in parts.iter().enumerate() {
            match part {
                Expr::Term(Term::On(kind, job)) if last == Some(*kind) && sep == "," => {
                    write!(f, ":{job}")?;
                }
                Expr::Term(t) => {
                    if k > 0 {
                        f.write_str(sep)?;
                    }
                    write_term(f, t)?;
                    last = match t {
                        Term::On(kind, _) => Some(*kind),
                        Term::Singleton => None,
                    };
                }
                nested => {
                    if k > 0 {
                        f.write_str(sep)?;
                    }
                    write!(f, "({nested})")?;
                    last = None;
                }
            }
        }
        Ok(())
    }
}

fn write_term(f: &mut fmt::Formatter<'_>, t: &Term) -> fmt::Result {
    match t {
        Term::On(kind, job) => write!(f, "{}:{job}", kind.name()),
        Term::Singleton => f.write_str("singleton"),
    }
}

/// A job (or task) that ended, named for a reason: `job 12 ended failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// `12`, or `12_3` for a task.
    pub who: String,
    /// How it ended.
    pub result: JobResult,
}

/// What a condition sees of its job: of a plain job one count is 1; of an array, its tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Pending, held, or waiting to be split off; and dispatched, not yet reported started,
    /// where [`StartedAt::Report`] reads it so.
    pub not_started: u64,
    /// Running or suspended; and dispatched, where [`StartedAt::Dispatch`] reads it so.
    pub running: u64,
    /// Ended `completed`.
    pub completed: u64,
    /// Ended otherwise, after it ran.
    pub failed: u64,
    /// Ended without having run (cancelled, or failed, before it started).
    pub unrun: u64,
    /// The first to end `completed`, `failed` and unrun: what a reason names.
    pub first_completed: Option<Ended>,
    pub first_failed: Option<Ended>,
    pub first_unrun: Option<Ended>,
}

/// When a dispatched job counts as started for a dependency (`after:`): at its dispatch, on
/// clusters before version 12 (which dispatch only into free room, where a job starts at
/// once: the dispatch is as good as the start, and the logs they wrote were judged so), or
/// once its start is reported, from version 12 on (`crate::version::DISPATCH_AHEAD`: a job
/// sent ahead of free room may wait on its host behind a long one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedAt {
    Dispatch,
    Report,
}

impl StartedAt {
    /// The reading of a cluster at active version `version`.
    pub fn at_version(version: u32) -> StartedAt {
        if version >= crate::version::DISPATCH_AHEAD {
            StartedAt::Report
        } else {
            StartedAt::Dispatch
        }
    }
}

impl Progress {
    /// What a dependency sees of one (plain) job: the controller's verdicts and `xce job`'s
    /// list of conditions read a job alike ([`crate::types::Standing`]), a dispatched one as
    /// `started` says.
    pub fn of_job(job: &crate::types::Job, started: StartedAt) -> Progress {
        use crate::types::Standing;
        let mut p = Progress::default();
        if job.state == crate::types::JobState::Dispatched && started == StartedAt::Report {
            p.not_started = 1;
            return p;
        }
        let ended = || {
            Some(Ended {
                who: job.id.to_string(),
                result: job.result.unwrap_or(JobResult::Failed),
            })
        };
        match Standing::of(job) {
            Standing::NotStarted => p.not_started = 1,
            Standing::Running => p.running = 1,
            Standing::Completed => (p.completed, p.first_completed) = (1, ended()),
            Standing::Failed => (p.failed, p.first_failed) = (1, ended()),
            Standing::Unrun => (p.unrun, p.first_unrun) = (1, ended()),
        }
        p
    }

    /// What a dependency on a whole array sees of its tasks, from the array's own counts (a
    /// task dispatched and not yet started among the running; the first to end each way
    /// unnamed): the controller's verdicts and `xce job`'s list alike.
    pub fn of_array(p: &crate::types::ArrayProgress) -> Progress {
        Progress {
            not_started: p.not_started(),
            running: p.running,
            completed: p.completed,
            failed: p.failed,
            unrun: p.unrun,
            ..Progress::default()
        }
    }

    /// Counts `n` of its running jobs as not started: tasks of an array dispatched but not
    /// yet reported started, which [`StartedAt::Report`] does not count as started.
    pub fn not_yet_started(&mut self, n: u64) {
        let n = n.min(self.running);
        self.running -= n;
        self.not_started += n;
    }

    /// Adds one task's progress, naming it `who` (`12_3`) in a reason: what a condition on
    /// some tasks of an array sees, the controller's verdicts and `xce job`'s list alike.
    pub fn add_task(&mut self, one: Progress, who: &str) {
        let named = |e: Option<Ended>| {
            e.map(|e| Ended {
                who: who.to_string(),
                result: e.result,
            })
        };
        self.not_started += one.not_started;
        self.running += one.running;
        self.completed += one.completed;
        self.failed += one.failed;
        self.unrun += one.unrun;
        if self.first_completed.is_none() {
            self.first_completed = named(one.first_completed);
        }
        if self.first_failed.is_none() {
            self.first_failed = named(one.first_failed);
        }
        if self.first_unrun.is_none() {
            self.first_unrun = named(one.first_unrun);
        }
    }

    /// Whether every one has ended.
    fn all_ended(&self) -> bool {
        self.not_started == 0 && self.running == 0
    }
}

/// Where a dependency is: still waiting, met, or never to be met and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Some condition may still be met.
    Waiting,
    /// Met: the job may be placed.
    Met,
    /// "job 12 ended failed".
    Never(String),
}

/// What the evaluation asks of the cluster's state.
pub trait Parents {
    /// What `job` has done; `None`: no such job (never submitted, or forgotten).
    fn progress(&self, job: &JobRef) -> Option<Progress>;
    /// Whether another job of this one's name and user is running (`singleton`).
    fn singleton_busy(&self) -> bool;
    /// This job's task index, when it is an array's task (`aftercorr`).
    fn own_task(&self) -> Option<u32>;
}

/// The verdict of one term.
pub fn term_verdict(term: &Term, parents: &impl Parents) -> Verdict {
    let (kind, job) = match term {
        Term::Singleton if parents.singleton_busy() => return Verdict::Waiting,
        Term::Singleton => return Verdict::Met,
        Term::On(kind, job) => (*kind, job),
    };
    let job = match (kind, parents.own_task()) {
        // The task of that array with this one's index; a job that is no task has none.
        (Kind::AfterCorr, task) => JobRef {
            id: job.id,
            tasks: Some(task.map(single).unwrap_or_default()),
        },
        _ => job.clone(),
    };
    let Some(p) = parents.progress(&job) else {
        return Verdict::Never(format!("job {job} is gone"));
    };
    let never = |e: &Option<Ended>| {
        let why = match e {
            Some(e) => format!("job {} ended {}", e.who, e.result),
            None => format!("job {job} ended"),
        };
        Verdict::Never(why)
    };
    match kind {
        Kind::After if p.not_started == 0 => Verdict::Met,
        Kind::After => Verdict::Waiting,
        Kind::AfterAny if p.all_ended() => Verdict::Met,
        Kind::AfterAny => Verdict::Waiting,
        Kind::AfterOk | Kind::AfterCorr if p.failed > 0 => never(&p.first_failed),
        Kind::AfterOk | Kind::AfterCorr if p.unrun > 0 => never(&p.first_unrun),
        Kind::AfterOk | Kind::AfterCorr if p.all_ended() => Verdict::Met,
        Kind::AfterOk | Kind::AfterCorr => Verdict::Waiting,
        Kind::AfterNotOk if p.completed > 0 => never(&p.first_completed),
        Kind::AfterNotOk if p.unrun > 0 => match &p.first_unrun {
            Some(e) => Verdict::Never(format!("job {} ended {} before it ran", e.who, e.result)),
            None => Verdict::Never(format!("job {job} ended before it ran")),
        },
        Kind::AfterNotOk if p.all_ended() => Verdict::Met,
        Kind::AfterNotOk => Verdict::Waiting,
    }
}

fn single(i: u32) -> crate::array::TaskSet {
    let mut s = crate::array::TaskSet::new();
    s.insert(i);
    s
}

/// The verdict of a whole expression: all of a group met, or any; never as soon as it can
/// no longer be.
pub fn verdict(expr: &Expr, parents: &impl Parents) -> Verdict {
    match expr {
        Expr::Term(t) => term_verdict(t, parents),
        Expr::All(parts) => {
            let mut waiting = false;
            for part in parts {
                match verdict(part, parents) {
                    Verdict::Never(why) => return Verdict::Never(why),
                    Verdict::Waiting => waiting = true,
                    Verdict::Met => {}
                }
            }
            if waiting {
                Verdict::Waiting
            } else {
                Verdict::Met
            }
        }
        Expr::Any(parts) => {
            let mut whys = Vec::new();
            let mut waiting = false;
            for part in parts {
                match verdict(part, parents) {
                    Verdict::Met => return Verdict::Met,
                    Verdict::Waiting => waiting = true,
                    Verdict::Never(why) => whys.push(why),
                }
            }
            if waiting || whys.is_empty() {
                Verdict::Waiting
            } else {
                Verdict::Never(whys.join("; "))
            }
        }
    }
}

/// A dependency with the terms already decided taken out (`settle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// What is left to wait for.
    Waits(Expr),
    /// Met already.
    Met,
    /// Can never be met; why.
    Never(String),
}

/// Takes out of `expr` the terms `decided` has a final verdict for (the terms on jobs that
/// retired to history, which the state no longer judges): a met term leaves an all-of
/// group and meets an any-of one; a never term fails an all-of group and leaves an any-of
/// one. What is left is judged as the whole would have been.
pub fn settle(expr: &Expr, decided: &impl Fn(&Term) -> Option<Verdict>) -> Settled {
    match expr {
        Expr::Term(t) => match decided(t) {
            Some(Verdict::Met) => Settled::Met,
            Some(Verdict::Never(why)) => Settled::Never(why),
            Some(Verdict::Waiting) | None => Settled::Waits(expr.clone()),
        },
        Expr::All(parts) => {
            let mut left = Vec::new();
            for part in parts {
                match settle(part, decided) {
                    Settled::Never(why) => return Settled::Never(why),
                    Settled::Met => {}
                    Settled::Waits(e) => left.push(e),
                }
            }
            match left.len() {
                0 => Settled::Met,
                1 => Settled::Waits(left.remove(0)),
                _ => Settled::Waits(Expr::All(left)),
            }
        }
        Expr::Any(parts) => {
            let mut left = Vec::new();
            let mut whys = Vec::new();
            for part in parts {
                match settle(part, decided) {
                    Settled::Met => return Settled::Met,
                    Settled::Never(why) => whys.push(why),
                    Settled::Waits(e) => left.push(e),
                }
            }
            match left.len() {
                0 => Settled::Never(whys.join("; ")),
                1 => Settled::Waits(left.remove(0)),
                _ => Settled::Waits(Expr::Any(left)),
            }
        }
    }
}

/// The pending reason of a job whose dependency can never be met.
pub fn never_reason(why: &str) -> String {
    format!("never satisfied: {why}")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn expr(text: &str) -> Expr {
        text.parse().unwrap()
    }

    #[test]
    fn slurm_forms_parse_and_print_back() {
        for text in [
            "afterok:12",
            "afterok:1:2,after:3",
            "afterany:4?afternotok:5",
            "singleton",
            "afterok:12_3,aftercorr:7",
            "afterok:12_[1-5]",
            "afterok:12_[1,3-9:2]:13,afterany:14",
            "afterok:12_[1-5]?after:2",
            "after:1,singleton",
        ] {
            assert_eq!(expr(text).to_string(), text);
        }
        assert_eq!(
            expr("afterok:1:2"),
            Expr::All(vec![
                Expr::Term(Term::On(Kind::AfterOk, "1".parse().unwrap())),
                Expr::Term(Term::On(Kind::AfterOk, "2".parse().unwrap())),
            ])
        );
        assert_eq!(expr("afterok:1:2,afterany:1").job_ids(), vec![1, 2]);
    }

    #[test]
    fn bad_dependencies_name_the_part() {
        for (text, why) in [
            ("", "empty"),
            ("afterok", "needs a job id"),
            ("afterok:x", "expected a job id"),
            ("afterwards:1", "unknown type \"afterwards\""),
            ("afterok:1,afterany:2?after:3", "use one of them"),
            ("after:1+10", "delay"),
            ("aftercorr:4_2", "whole arrays"),
        ] {
            let e = text.parse::<Expr>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    /// How one task of a parent stands, for the model.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Task {
        NotStarted,
        Running,
        Completed,
        Failed,
        Unrun,
    }

    fn task() -> impl Strategy<Value = Task> {
        prop_oneof![
            Just(Task::NotStarted),
            Just(Task::Running),
            Just(Task::Completed),
            Just(Task::Failed),
            Just(Task::Unrun),
        ]
    }

    /// A cluster for the tests: each parent's tasks by index.
    struct Model {
        jobs: HashMap<u64, Vec<Task>>,
        busy: bool,
        own: Option<u32>,
    }

    impl Parents for Model {
        fn progress(&self, job: &JobRef) -> Option<Progress> {
            let tasks = self.jobs.get(&job.id)?;
            let mut p = Progress::default();
            for (i, t) in tasks.iter().enumerate() {
                if job.tasks.as_ref().is_some_and(|s| !s.contains(i as u32)) {
                    continue;
                }
                let ended = |result| {
                    Some(Ended {
                        who: format!("{}_{i}", job.id),
                        result,
                    })
                };
                match t {
                    Task::NotStarted => p.not_started += 1,
                    Task::Running => p.running += 1,
                    Task::Completed => {
                        p.completed += 1;
                        p.first_completed =
                            p.first_completed.or_else(|| ended(JobResult::Completed));
                    }
                    Task::Failed => {
                        p.failed += 1;
                        p.first_failed = p.first_failed.or_else(|| ended(JobResult::Failed));
                    }
                    Task::Unrun => {
                        p.unrun += 1;
                        p.first_unrun = p.first_unrun.or_else(|| ended(JobResult::Cancelled));
                    }
                }
            }
            Some(p)
        }

        fn singleton_busy(&self) -> bool {
            self.busy
        }

        fn own_task(&self) -> Option<u32> {
            self.own
        }
    }

    /// The definition, task by task: met when every task named has gone the kind's way,
    /// never when one has gone where it cannot.
    fn model_term(kind: Kind, tasks: &[Task]) -> Verdict {
        type Is = fn(&Task) -> bool;
        let (met, never): (Is, Is) = match kind {
            Kind::After => (|t| *t != Task::NotStarted, |_| false),
            Kind::AfterAny => (
                |t| !matches!(t, Task::NotStarted | Task::Running),
                |_| false,
            ),
            Kind::AfterOk | Kind::AfterCorr => (
                |t| *t == Task::Completed,
                |t| matches!(t, Task::Failed | Task::Unrun),
            ),
            Kind::AfterNotOk => (
                |t| *t == Task::Failed,
                |t| matches!(t, Task::Completed | Task::Unrun),
            ),
        };
        if tasks.iter().any(never) {
            Verdict::Never(String::new())
        } else if tasks.iter().all(met) {
            Verdict::Met
        } else {
            Verdict::Waiting
        }
    }

    fn same(a: &Verdict, b: &Verdict) -> bool {
        std::mem::discriminant(a) == std::mem::discriminant(b)
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::After),
            Just(Kind::AfterAny),
            Just(Kind::AfterOk),
            Just(Kind::AfterNotOk),
            Just(Kind::AfterCorr),
        ]
    }

    proptest! {
        /// Every type, on a plain job or an array's tasks, against its definition task by task.
        #[test]
        fn each_type_agrees_with_its_definition(k in kind(), tasks in prop::collection::vec(task(), 1..6), own in 0u32..6) {
            let model = Model { jobs: HashMap::from([(1, tasks.clone())]), busy: false, own: Some(own) };
            let term = Term::On(k, "1".parse().unwrap());
            let named: Vec<Task> = match k {
                Kind::AfterCorr => tasks.get(own as usize).copied().into_iter().collect(),
                _ => tasks.clone(),
            };
            let got = term_verdict(&term, &model);
            prop_assert!(same(&got, &model_term(k, &named)), "{:?} on {:?}: {:?}", k, tasks, got);
        }

        /// All and any combine as logic does, and a decided verdict stays decided as tasks move
        /// forward (the state machine decides it once, at the end it applies).
        #[test]
        fn combinations_agree_and_decided_verdicts_are_final(
            terms in prop::collection::vec((kind().prop_filter("no pairs", |k| *k != Kind::AfterCorr), 1u64..4), 1..5),
            any in any::<bool>(),
            tasks in prop::collection::vec(prop::collection::vec(task(), 1..4), 3),
            steps in prop::collection::vec((0usize..3, 0usize..4), 0..12),
        ) {
            let parts: Vec<Expr> = terms.iter().map(|(k, id)| Expr::Term(Term::On(*k, JobRef { id: *id, tasks: None }))).collect();
            let e = if any { Expr::Any(parts) } else { Expr::All(parts) };
            let mut model = Model {
                jobs: (1..=3).zip(tasks).collect(),
                busy: false,
                own: None,
            };
            let mut decided: Option<Verdict> = None;
            for (job, t) in std::iter::once((0, usize::MAX)).chain(steps) {
                if t != usize::MAX {
                    // One task moves forward: not started → running → an end.
                    let tasks = model.jobs.get_mut(&(job as u64 + 1)).unwrap();
                    if let Some(task) = tasks.get_mut(t) {
                        *task = match *task {
                            Task::NotStarted if t % 2 == 0 => Task::Running,
                            Task::NotStarted => Task::Unrun,
                            Task::Running if t % 3 == 0 => Task::Failed,
                            Task::Running => Task::Completed,
                            ended => ended,
                        };
                    }
                }
                let got = verdict(&e, &model);
                let each: Vec<Verdict> = terms
                    .iter()
                    .map(|(k, id)| model_term(*k, &model.jobs[id]))
                    .collect();
                let want = if any {
                    if each.contains(&Verdict::Met) { Verdict::Met }
                    else if each.iter().all(|v| matches!(v, Verdict::Never(_))) { Verdict::Never(String::new()) }
                    else { Verdict::Waiting }
                } else if each.iter().any(|v| matches!(v, Verdict::Never(_))) { Verdict::Never(String::new()) }
                else if each.iter().all(|v| *v == Verdict::Met) { Verdict::Met }
                else { Verdict::Waiting };
                prop_assert!(same(&got, &want), "{} : {:?} vs {:?}", e, got, want);
                if let Some(d) = &decided {
                    prop_assert!(same(d, &got), "{} was {:?}, now {:?}", e, d, got);
                }
                if got != Verdict::Waiting {
                    decided = Some(got);
                }
            }
        }
    }

    proptest! {
        /// Settling the terms on jobs that have ended (as a retired job's record decides them)
        /// leaves a dependency judged as the whole one is, nested groups too.
        #[test]
        fn settling_decided_terms_keeps_the_verdict(
            terms in prop::collection::vec((kind().prop_filter("no pairs", |k| *k != Kind::AfterCorr), 1u64..4), 1..6),
            any_outer in any::<bool>(),
            split in 0usize..6,
            tasks in prop::collection::vec(prop::collection::vec(task(), 1..4), 3),
        ) {
            let term = |(k, id): &(Kind, u64)| Expr::Term(Term::On(*k, JobRef { id: *id, tasks: None }));
            let (a, b) = terms.split_at(split.min(terms.len()));
            let group = |parts: &[(Kind, u64)], any: bool| {
                let parts: Vec<Expr> = parts.iter().map(term).collect();
                if any { Expr::Any(parts) } else { Expr::All(parts) }
            };
            // A group holds a term at least, as any the syntax writes does.
            let mut outer: Vec<Expr> = (!a.is_empty()).then(|| group(a, !any_outer)).into_iter().collect();
            outer.extend(b.iter().map(term));
            let e = if any_outer { Expr::Any(outer) } else { Expr::All(outer) };
            let model = Model { jobs: (1..=3).zip(tasks).collect(), busy: false, own: None };
            // Job 1 retired: its terms are decided where its tasks have decided them.
            let decided = |t: &Term| match t {
                Term::On(_, job) if job.id == 1 => Some(term_verdict(t, &model)).filter(|v| *v != Verdict::Waiting),
                _ => None,
            };
            let whole = verdict(&e, &model);
            match settle(&e, &decided) {
                Settled::Met => prop_assert_eq!(whole, Verdict::Met, "{}", e),
                Settled::Never(_) => prop_assert!(matches!(whole, Verdict::Never(_)), "{}: {:?}", e, whole),
                Settled::Waits(left) => {
                    prop_assert!(same(&verdict(&left, &model), &whole), "{} left {}", e, left);
                }
            }
        }
    }

    #[test]
    fn reasons_name_the_job_and_how_it_ended() {
        let model = Model {
            jobs: HashMap::from([(12, vec![Task::Failed]), (13, vec![Task::Unrun])]),
            busy: true,
            own: None,
        };
        assert_eq!(
            verdict(&expr("afterok:12"), &model),
            Verdict::Never("job 12_0 ended failed".into())
        );
        assert_eq!(
            verdict(&expr("afternotok:13"), &model),
            Verdict::Never("job 13_0 ended cancelled before it ran".into())
        );
        assert_eq!(
            verdict(&expr("afterok:99"), &model),
            Verdict::Never("job 99 is gone".into())
        );
        assert_eq!(verdict(&expr("singleton"), &model), Verdict::Waiting);
        assert_eq!(
            verdict(&expr("afterok:12?afternotok:12"), &model),
            Verdict::Met
        );
        assert_eq!(
            never_reason("job 12 ended failed"),
            "never satisfied: job 12 ended failed"
        );
    }
}
