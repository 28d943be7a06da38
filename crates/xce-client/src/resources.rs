//! Amounts of resources: what a job asks for, what a host offers, what a host's placed jobs
//! use. One type for all three, so that a new kind of resource (GPUs, licenses, scratch
//! space) is a name in [`Resources::gres`], not a field at every layer; the one rule for
//! whether a request fits is [`crate::fit::fits`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An amount of resources. cpus and memory are named fields because every job and host has
/// them; every other countable resource is a named count in `gres` (a name absent there is
/// zero of it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: u32,
    pub mem_mb: u64,
    /// Generic resources by name (`gpu`, `gpu:a100`, `nvme`, ...), each a count. Zero counts
    /// are never kept, so two equal amounts compare equal.
    pub gres: BTreeMap<String, u64>,
}

impl Resources {
    /// cpus and memory only.
    pub fn new(cpus: u32, mem_mb: u64) -> Resources {
        Resources {
            cpus,
            mem_mb,
            gres: BTreeMap::new(),
        }
    }

    /// The count of generic resource `name` (zero when absent).
    pub fn gres(&self, name: &str) -> u64 {
        self.gres.get(name).copied().unwrap_or(0)
    }

    /// Sets the count of generic resource `name`; zero removes it.
    pub fn set_gres(&mut self, name: &str, count: u64) {
        if count == 0 {
            self.gres.remove(name);
        } else {
            self.gres.insert(name.to_string(), count);
        }
    }

    /// `self` plus `other`, saturating (a sum of bounded requests never wraps).
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut sum = Resources::new(
            self.cpus.saturating_add(other.cpus),
            self.mem_mb.saturating_add(other.mem_mb),
        );
        sum.gres = self.gres.clone();
        for (name, count) in &other.gres {
            let total = sum.gres(name).saturating_add(*count);
            sum.set_gres(name, total);
        }
        sum
    }

    /// `self` minus `other`, saturating at zero.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut rest = Resources::new(
            self.cpus.saturating_sub(other.cpus),
            self.mem_mb.saturating_sub(other.mem_mb),
        );
        for (name, count) in &self.gres {
            rest.set_gres(name, count.saturating_sub(other.gres(name)));
        }
        rest
    }

    /// Whether this is nothing at all.
    pub fn is_empty(&self) -> bool {
        self.cpus == 0 && self.mem_mb == 0 && self.gres.is_empty()
    }
}

/// A job's limits: what it may use beyond what it is given at placement. One group, so that
/// a later limit (memory per cpu, cpu time, files) joins it rather than the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock seconds the job may run from its start, not counting time suspended;
    /// `None`: no limit.
    pub time_limit_s: Option<u32>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn r(cpus: u32, mem_mb: u64, gres: &[(&str, u64)]) -> Resources {
        let mut r = Resources::new(cpus, mem_mb);
        for (name, count) in gres {
            r.set_gres(name, *count);
        }
        r
    }

    #[test]
    fn generic_resources_add_and_subtract_by_name() {
        let host = r(8, 1000, &[("gpu", 2), ("nvme", 1)]);
        let job = r(2, 100, &[("gpu", 1)]);
        let left = host.minus(&job);
        assert_eq!(left, r(6, 900, &[("gpu", 1), ("nvme", 1)]));
        assert_eq!(left.plus(&job), host);
        // Zero counts vanish, so equal amounts are equal.
        assert_eq!(
            r(0, 0, &[("gpu", 1)]).minus(&r(0, 0, &[("gpu", 5)])),
            r(0, 0, &[])
        );
        assert!(r(0, 0, &[("gpu", 0)]).is_empty());
    }

    proptest! {
        /// Adding then subtracting the same amount gives back what was there, and no count
        /// ever kept is zero.
        #[test]
        fn plus_then_minus_is_the_identity(
            a in (0u32..1000, 0u64..1 << 40, proptest::collection::btree_map("[a-c]", 1u64..10, 0..3)),
            b in (0u32..1000, 0u64..1 << 40, proptest::collection::btree_map("[a-c]", 1u64..10, 0..3)),
        ) {
            let a = Resources { cpus: a.0, mem_mb: a.1, gres: a.2 };
            let b = Resources { cpus: b.0, mem_mb: b.1, gres: b.2 };
            let sum = a.plus(&b);
            prop_assert_eq!(sum.minus(&b), a);
            prop_assert!(sum.gres.values().all(|c| *c > 0));
        }
    }
}
