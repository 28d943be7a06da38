//! Indexes over the jobs, derived from them and never serialized: rebuilt whenever a state is
//! restored from a snapshot, and kept current by the job transition helper. They keep the hot
//! paths (a dispatch, a host or queue listing, a page of jobs in one state) from scanning
//! every job ever submitted.

use std::collections::{BTreeSet, HashMap};

use xce_client::fit::Resources;
use xce_client::types::{Job, JobId, JobState};

/// What one job contributes to the indexes; an update moves a job from its old slot to its new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    state: JobState,
    queue: String,
    /// The host it is placed on (dispatched, running or suspended), with what it takes there.
    placed: Option<(String, Resources)>,
}

impl Slot {
    pub(super) fn of(job: &Job) -> Slot {
        let placed = match (is_placed(job.state), &job.host) {
            (true, Some(host)) => Some((host.clone(), job.spec.resources.clone())),
            _ => None,
        };
        Slot {
            state: job.state,
            queue: job.spec.queue.clone(),
            placed,
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
        let counts = self.queues.entry(slot.queue.clone()).or_default();
        match slot.state {
            JobState::Pending => counts.pending += 1,
            s if is_placed(s) => counts.placed += 1,
            _ => {}
        }
        if let Some((host, need)) = &slot.placed {
            let load = self.hosts.entry(host.clone()).or_default();
            load.jobs.insert(id);
            load.used = load.used.plus(need);
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
