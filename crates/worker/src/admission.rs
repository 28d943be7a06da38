//! Which starts run now and which wait for room: the worker admits by its own resources.
//!
//! The primary may send a host more than it can run at once (dispatch ahead, cluster version
//! 12): the next jobs wait here, in the order they came, and the one at the head starts the
//! moment an attempt's end frees enough, with no replicated write in between. So this is
//! what keeps a host from ever running more than it offers, whatever it was sent. Pure
//! bookkeeping with no I/O: the job table decides what to do with what it returns.

use std::collections::{HashMap, VecDeque};

use xce_client::fit::{fits, Resources};
use xce_client::types::JobId;

/// One attempt, as admission counts it.
pub type Key = (JobId, u32);

/// The attempts that hold a share of the host, and the starts that wait for one.
#[derive(Debug)]
pub struct Admission<T> {
    capacity: Resources,
    /// What each admitted attempt holds; `None` while not known (an attempt a previous run of
    /// the worker started, adopted before its job was read): counted as the whole host.
    running: HashMap<Key, Option<Resources>>,
    /// In arrival order: the head starts first, so no later start overtakes it.
    waiting: VecDeque<(Key, Resources, T)>,
}

impl<T> Admission<T> {
    /// Admission for a host offering `capacity`.
    pub fn new(capacity: Resources) -> Admission<T> {
        Admission {
            capacity,
            running: HashMap::new(),
            waiting: VecDeque::new(),
        }
    }

    /// Admits `start` needing `need` now (returned, to be launched) when nothing waits before
    /// it and it fits beside what runs; otherwise it waits (`None`).
    pub fn admit(&mut self, key: Key, need: Resources, start: T) -> Option<T> {
        if self.waiting.is_empty() && self.fits_now(&need) {
            self.running.insert(key, Some(need));
            return Some(start);
        }
        self.waiting.push_back((key, need, start));
        None
    }

    /// Counts an attempt that already runs (adopted after a restart); `need` unknown counts as
    /// the whole host until [`Admission::learn`].
    pub fn adopt(&mut self, key: Key, need: Option<Resources>) {
        self.running.insert(key, need);
    }

    /// What an adopted attempt holds, once read: the starts that fit now are returned.
    pub fn learn(&mut self, key: Key, need: Resources) -> Vec<T> {
        if let Some(held) = self.running.get_mut(&key) {
            *held = Some(need);
        }
        self.admit_waiting()
    }

    /// Whether an adopted attempt's share is still unknown.
    pub fn unknown(&self, key: Key) -> bool {
        matches!(self.running.get(&key), Some(None))
    }

    /// An admitted attempt's processes are gone: its share is free, and the waiting starts that
    /// fit now are returned, in order, each admitted.
    pub fn ended(&mut self, key: Key) -> Vec<T> {
        self.running.remove(&key);
        self.admit_waiting()
    }

    /// Takes a waiting start of job `id` out (killed, or replaced by a newer attempt before it
    /// ran): it never runs. The starts behind it may fit now; they are returned too.
    pub fn withdraw(&mut self, id: JobId) -> (Option<(Key, T)>, Vec<T>) {
        let Some(at) = self.waiting.iter().position(|(k, _, _)| k.0 == id) else {
            return (None, Vec::new());
        };
        let taken = self.waiting.remove(at).map(|(key, _, start)| (key, start));
        (taken, self.admit_waiting())
    }

    /// Whether attempt `key` waits for room.
    pub fn waits(&self, key: Key) -> bool {
        self.waiting.iter().any(|(k, _, _)| *k == key)
    }

    /// Every waiting start, taken out (the worker stops: none of them ran).
    pub fn clear_waiting(&mut self) -> Vec<Key> {
        self.waiting.drain(..).map(|(key, _, _)| key).collect()
    }

    /// How many starts wait for room.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Admits from the head of the queue while the head fits.
    fn admit_waiting(&mut self) -> Vec<T> {
        let mut admitted = Vec::new();
        while let Some((_, need, _)) = self.waiting.front() {
            if !self.fits_now(need) {
                break;
            }
            if let Some((key, need, start)) = self.waiting.pop_front() {
                self.running.insert(key, Some(need));
                admitted.push(start);
            }
        }
        admitted
    }

    /// Whether `need` fits beside what runs. A job larger than the whole host (its size
    /// changed since the primary placed it) runs alone rather than wait forever.
    fn fits_now(&self, need: &Resources) -> bool {
        if self.running.is_empty() {
            return true;
        }
        let mut load = Resources::default();
        for held in self.running.values() {
            match held {
                Some(r) => load = load.plus(r),
                None => return false,
            }
        }
        fits(&self.capacity, &load, need).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cpus(n: u32) -> Resources {
        Resources::new(n, 0)
    }

    #[test]
    fn starts_what_fits_and_holds_the_rest_in_order() {
        let mut a = Admission::new(cpus(2));
        assert_eq!(a.admit((1, 1), cpus(1), "j1"), Some("j1"));
        assert_eq!(a.admit((2, 1), cpus(1), "j2"), Some("j2"));
        assert_eq!(a.admit((3, 1), cpus(2), "j3"), None);
        // Would fit a slot, but waits behind j3: nothing overtakes the head.
        assert_eq!(a.admit((4, 1), cpus(1), "j4"), None);
        assert!(a.waits((3, 1)) && a.waits((4, 1)));
        assert_eq!(a.ended((1, 1)), Vec::<&str>::new());
        assert_eq!(a.ended((2, 1)), vec!["j3"]);
        assert_eq!(a.ended((3, 1)), vec!["j4"]);
        assert_eq!(a.waiting(), 0);
    }

    #[test]
    fn a_withdrawn_head_lets_the_next_start() {
        let mut a = Admission::new(cpus(2));
        a.admit((1, 1), cpus(1), "j1");
        a.admit((2, 1), cpus(2), "j2");
        a.admit((3, 1), cpus(1), "j3");
        let (taken, admitted) = a.withdraw(2);
        assert_eq!(taken, Some(((2, 1), "j2")));
        assert_eq!(admitted, vec!["j3"]);
        assert_eq!(a.withdraw(2), (None, vec![]));
    }

    #[test]
    fn an_adopted_attempt_of_unknown_size_holds_the_host_until_read() {
        let mut a = Admission::new(cpus(4));
        a.adopt((1, 3), None);
        assert!(a.unknown((1, 3)));
        assert_eq!(a.admit((2, 1), cpus(1), "j2"), None);
        assert_eq!(a.learn((1, 3), cpus(2)), vec!["j2"]);
        assert!(!a.unknown((1, 3)));
    }

    #[test]
    fn a_job_larger_than_the_host_runs_alone() {
        let mut a = Admission::new(cpus(2));
        a.admit((1, 1), cpus(1), "j1");
        assert_eq!(a.admit((2, 1), cpus(8), "big"), None);
        assert_eq!(a.ended((1, 1)), vec!["big"]);
        assert_eq!(a.admit((3, 1), cpus(1), "j3"), None);
    }

    #[test]
    fn stopping_drops_what_waits() {
        let mut a = Admission::new(cpus(1));
        a.admit((1, 1), cpus(1), ());
        a.admit((2, 1), cpus(1), ());
        assert_eq!(a.clear_waiting(), vec![(2, 1)]);
        assert!(a.ended((1, 1)).is_empty());
    }

    #[derive(Debug, Clone)]
    enum Step {
        Start(u32),
        End(usize),
        Withdraw(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u32..=3).prop_map(Step::Start),
            (0usize..8).prop_map(Step::End),
            (0usize..8).prop_map(Step::Withdraw),
        ]
    }

    proptest! {
        /// Whatever arrives and ends, what runs never exceeds the host, starts run in arrival
        /// order, and none waits while the host has room for the head of the queue.
        #[test]
        fn never_more_than_the_host_and_never_idle_with_room(steps in proptest::collection::vec(step(), 1..60)) {
            let capacity = 3;
            let mut a = Admission::new(cpus(capacity));
            let mut running: Vec<(JobId, u32)> = Vec::new();
            let mut waiting: VecDeque<(JobId, u32)> = VecDeque::new();
            let mut started: Vec<JobId> = Vec::new();
            let mut next = 1;
            for s in steps {
                let admitted = match s {
                    Step::Start(n) => {
                        let id = next;
                        next += 1;
                        waiting.push_back((id, n));
                        a.admit((id, 1), cpus(n), (id, n)).into_iter().collect()
                    }
                    Step::End(i) if !running.is_empty() => {
                        let (id, _) = running.remove(i % running.len());
                        a.ended((id, 1))
                    }
                    Step::Withdraw(i) if !waiting.is_empty() => {
                        let (id, _) = waiting[i % waiting.len()];
                        let (taken, admitted) = a.withdraw(id);
                        prop_assert_eq!(taken.map(|t| t.0), Some((id, 1)));
                        waiting.retain(|w| w.0 != id);
                        admitted
                    }
                    _ => Vec::new(),
                };
                for (id, n) in admitted {
                    prop_assert_eq!(waiting.pop_front(), Some((id, n)), "out of order");
                    running.push((id, n));
                    started.push(id);
                }
                let used: u32 = running.iter().map(|r| r.1).sum();
                prop_assert!(used <= capacity, "{} cpus in use", used);
                if let Some((_, head)) = waiting.front() {
                    prop_assert!(used + head > capacity, "idle with room for the head");
                }
            }
        }
    }
}
