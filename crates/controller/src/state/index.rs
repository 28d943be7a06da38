//! Indexes over the jobs, derived from them and never serialized: rebuilt whenever a state is
//! restored from a snapshot, and kept current by the job transition helper. They keep the hot
//! paths (a dispatch, a host or queue listing, a page of jobs in one state) from scanning
//! every job ever submitted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use xce_client::dependency::Term;
use xce_client::fit::Resources;
use xce_client::types::{DependencyState, Job, JobId, JobState};

/// What one job contributes to the indexes; an update moves a job from its old slot to its new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    state: JobState,
    queue: String,
    /// The host it is placed on (dispatched, running or suspended), with what it takes there.
    placed: Option<(String, Resources)>,
    /// Its user and name while placed: what a `singleton` job waits out.
    placed_name: Option<(String, String)>,
    /// The jobs it waits for while its dependency is `waiting`.
    waits_on: Vec<JobId>,
    /// The jobs its dependency names while it has not ended (a met one may be judged again:
    /// an `aftercorr` array task by task, a `singleton` term): they may not retire.
    names: Vec<JobId>,
    /// Its user and name while it is pending with a `singleton` term.
    singleton: Option<(String, String)>,
    /// The array it is a task of, and its index there.
    array_of: Option<(JobId, u32)>,
    /// The array it is a task of while it is dispatched and not yet reported started.
    dispatched_task_of: Option<JobId>,
    /// Its user while it counts as one of their submits (`jobs.max_submitted_per_user`):
    /// until it ends; a task of an array only while placed (its array counts once).
    submit_of: Option<String>,
}

impl Slot {
    /// The job's state.
    pub(super) fn state(&self) -> JobState {
        self.state
    }

    pub(super) fn of(job: &Job) -> Slot {
        let placed = match (is_placed(job.state), &job.host) {
            (true, Some(host)) => Some((host.clone(), job.spec.resources.clone())),
            _ => None,
        };
        let name = || (job.spec.user.clone(), job.spec.name.clone());
        let pending = job.state == JobState::Pending;
        let waiting = pending && job.dependency_state == Some(DependencyState::Waiting);
        let dependency = job.spec.dependency.as_ref();
        Slot {
            state: job.state,
            queue: job.spec.queue.clone(),
            placed_name: placed.as_ref().map(|_| name()),
            placed,
            waits_on: dependency
                .filter(|_| waiting)
                .map(|d| d.job_ids())
                .unwrap_or_default(),
            names: dependency
                .filter(|_| !job.state.is_final())
                .map(|d| d.job_ids())
                .unwrap_or_default(),
            singleton: dependency
                .filter(|d| pending && d.terms().contains(&&Term::Singleton))
                .map(|_| name()),
            array_of: job.array_task.map(|t| (t.array_id, t.index)),
            dispatched_task_of: job
                .array_task
                .filter(|_| job.state == JobState::Dispatched)
                .map(|t| t.array_id),
            submit_of: (!job.state.is_final()
                && (job.array_task.is_none() || is_placed(job.state)))
            .then(|| job.spec.user.clone()),
        }
    }
}

/// Whether a job in this state holds a place on its host.
pub fn is_placed(state: JobState) -> bool {
    matches!(
        state,
        JobState::Dispatched | JobState::Running | JobState::Suspended
    )
}

/// The jobs placed on one host and what they take there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLoad {
    pub jobs: BTreeSet<JobId>,
    pub used: Resources,
}

/// Per queue: jobs pending, and jobs placed (dispatched, running or suspended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub pending: u32,
    pub placed: u32,
}

/// All indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Index {
    /// Job ids by state, in id order (`JobState::ALL` order).
    by_state: [BTreeSet<JobId>; 6],
    queues: HashMap<String, QueueCounts>,
    hosts: HashMap<String, HostLoad>,
    /// Jobs placed, by user and name (`singleton`).
    placed_names: HashMap<(String, String), u32>,
    /// Waiting jobs by each job they wait for.
    dependents: HashMap<JobId, BTreeSet<JobId>>,
    /// Unended jobs by each job their dependency names (`Slot::names`).
    named_by: HashMap<JobId, BTreeSet<JobId>>,
    /// Pending jobs with a `singleton` term, by user and name.
    singletons: HashMap<(String, String), BTreeSet<JobId>>,
    /// Each array's tasks split off into jobs of their own, by index (one record per index:
    /// a task never returns to its array's set).
    tasks: HashMap<JobId, BTreeMap<u32, JobId>>,
    /// Each array's tasks dispatched and not yet reported started (`Slot::dispatched_task_of`).
    dispatched_tasks: HashMap<JobId, u64>,
    /// Jobs submitted and not ended, by user (`Slot::submit_of`).
    submits: HashMap<String, u64>,
}

fn slot_of_state(state: JobState) -> usize {
    JobState::ALL
        .iter()
        .position(|s| *s == state)
        .unwrap_or_default()
}

impl Index {
    /// The indexes of a set of jobs, counted from scratch.
    pub(super) fn build<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Index {
        let mut index = Index::default();
        for job in jobs {
            index.add(job.id, &Slot::of(job));
        }
        index
    }

    pub(super) fn add(&mut self, id: JobId, slot: &Slot) {
        self.by_state[slot_of_state(slot.state)].insert(id);
        // A queue is counted only while it has jobs pending or placed (an ended job leaves
        // no empty entry, which a removal would not leave either).
        match slot.state {
            JobState::Pending => self.queues.entry(slot.queue.clone()).or_default().pending += 1,
            s if is_placed(s) => self.queues.entry(slot.queue.clone()).or_default().placed += 1,
            _ => {}
        }
        if let Some((host, need)) = &slot.placed {
            let load = self.hosts.entry(host.clone()).or_default();
            load.jobs.insert(id);
            load.used = load.used.plus(need);
        }
        if let Some(name) = &slot.placed_name {
            *self.placed_names.entry(name.clone()).or_default() += 1;
        }
        for parent in &slot.waits_on {
            self.dependents.entry(*parent).or_default().insert(id);
        }
        for parent in &slot.names {
            self.named_by.entry(*parent).or_default().insert(id);
        }
        if let Some(name) = &slot.singleton {
            self.singletons.entry(name.clone()).or_default().insert(id);
        }
        if let Some((array, index)) = slot.array_of {
            self.tasks.entry(array).or_default().insert(index, id);
        }
        if let Some(user) = &slot.submit_of {
            *self.submits.entry(user.clone()).or_default() += 1;
        }
        if let Some(array) = slot.dispatched_task_of {
            *self.dispatched_tasks.entry(array).or_default() += 1;
        }
    }

    pub(super) fn remove(&mut self, id: JobId, slot: &Slot) {
        self.by_state[slot_of_state(slot.state)].remove(&id);
        if let Some(counts) = self.queues.get_mut(&slot.queue) {
            match slot.state {
                JobState::Pending => counts.pending = counts.pending.saturating_sub(1),
                s if is_placed(s) => counts.placed = counts.placed.saturating_sub(1),
                _ => {}
            }
            if *counts == QueueCounts::default() {
                self.queues.remove(&slot.queue);
            }
        }
        if let Some((host, need)) = &slot.placed {
            if let Some(load) = self.hosts.get_mut(host) {
                load.jobs.remove(&id);
                load.used = load.used.minus(need);
                if load.jobs.is_empty() {
                    self.hosts.remove(host);
                }
            }
        }
        if let Some(name) = &slot.placed_name {
            if let Some(n) = self.placed_names.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.placed_names.remove(name);
                }
            }
        }
        for parent in &slot.waits_on {
            if let Some(set) = self.dependents.get_mut(parent) {
                set.remove(&id);
                if set.is_empty() {
                    self.dependents.remove(parent);
                }
            }
        }
        for parent in &slot.names {
            if let Some(set) = self.named_by.get_mut(parent) {
                set.remove(&id);
                if set.is_empty() {
                    self.named_by.remove(parent);
                }
            }
        }
        if let Some(name) = &slot.singleton {
            if let Some(set) = self.singletons.get_mut(name) {
                set.remove(&id);
                if set.is_empty() {
                    self.singletons.remove(name);
                }
            }
        }
        if let Some((array, index)) = slot.array_of {
            if let Some(set) = self.tasks.get_mut(&array) {
                set.remove(&index);
                if set.is_empty() {
                    self.tasks.remove(&array);
                }
            }
        }
        if let Some(user) = &slot.submit_of {
            if let Some(n) = self.submits.get_mut(user) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.submits.remove(user);
                }
            }
        }
        if let Some(array) = slot.dispatched_task_of {
            if let Some(n) = self.dispatched_tasks.get_mut(&array) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.dispatched_tasks.remove(&array);
                }
            }
        }
    }

    /// How many tasks of array `id` are dispatched and not yet reported started.
    pub(super) fn dispatched_tasks_of(&self, id: JobId) -> u64 {
        self.dispatched_tasks.get(&id).copied().unwrap_or(0)
    }

    /// How many jobs `user` has submitted and not yet ended (an array once, with its tasks
    /// while placed).
    pub(super) fn submits_of(&self, user: &str) -> u64 {
        self.submits.get(user).copied().unwrap_or(0)
    }

    /// The tasks of array `id` split off into jobs of their own, in index order.
    pub(super) fn tasks_of(&self, id: JobId) -> Vec<JobId> {
        self.tasks
            .get(&id)
            .map(|s| s.values().copied().collect())
            .unwrap_or_default()
    }

    /// The tasks of array `id` split off into jobs of their own with an index from `lo` to
    /// `hi`, as (index, job id) in index order.
    pub(super) fn tasks_between(
        &self,
        id: JobId,
        lo: u32,
        hi: u32,
    ) -> impl Iterator<Item = (u32, JobId)> + '_ {
        self.tasks
            .get(&id)
            .into_iter()
            .flat_map(move |s| s.range(lo..=hi).map(|(i, id)| (*i, *id)))
    }

    /// The job of task `index` of array `id`, once split off.
    pub(super) fn task_job(&self, id: JobId, index: u32) -> Option<JobId> {
        self.tasks.get(&id)?.get(&index).copied()
    }

    /// How many jobs of `user` called `name` are placed.
    pub(super) fn placed_named(&self, user: &str, name: &str) -> u32 {
        if self.placed_names.is_empty() {
            return 0;
        }
        self.placed_names
            .get(&(user.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Whether an unended job's dependency names `parent`.
    pub(super) fn is_named(&self, parent: JobId) -> bool {
        self.named_by.get(&parent).is_some_and(|s| !s.is_empty())
    }

    /// The waiting jobs that wait for `parent`.
    pub(super) fn dependents_of(&self, parent: JobId) -> Vec<JobId> {
        self.dependents
            .get(&parent)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The pending `singleton` jobs of `user` called `name`.
    pub(super) fn singletons_of(&self, user: &str, name: &str) -> Vec<JobId> {
        // Every change of a job asks: no key is built while no `singleton` job waits.
        if self.singletons.is_empty() {
            return Vec::new();
        }
        self.singletons
            .get(&(user.to_string(), name.to_string()))
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Ids of jobs in `state`, in id order.
    pub(super) fn in_state(&self, state: JobState) -> &BTreeSet<JobId> {
        &self.by_state[slot_of_state(state)]
    }

    /// What is placed on `host` (empty when nothing is).
    pub(super) fn load(&self, host: &str) -> Option<&HostLoad> {
        self.hosts.get(host)
    }

    /// Hosts with at least one placed job.
    pub(super) fn busy_hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }

    pub(super) fn queue_counts(&self, queue: &str) -> QueueCounts {
        self.queues.get(queue).copied().unwrap_or_default()
    }
}
