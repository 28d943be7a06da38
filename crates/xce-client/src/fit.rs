//! The one rule for whether a job fits on a host. The controller applies it when it validates
//! a dispatch and the scheduler when it places jobs, so the two can never disagree about room.

use std::fmt;

use crate::types::JobUsers;

/// An amount of the resources a host offers, its placed jobs use, or a job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Resources {
    pub cpus: u32,
    pub mem_mb: u64,
}

impl Resources {
    /// What a job asks for; negative requests (refused at submit) count as nothing.
    pub fn of_job(cpus: i32, mem_mb: i64) -> Resources {
        Resources {
            cpus: cpus.max(0) as u32,
            mem_mb: mem_mb.max(0) as u64,
        }
    }

    /// `self` plus `other`, saturating (a sum of bounded requests never wraps).
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_add(other.cpus),
            mem_mb: self.mem_mb.saturating_add(other.mem_mb),
        }
    }

    /// `self` minus `other`, saturating at zero.
    pub fn minus(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_sub(other.cpus),
            mem_mb: self.mem_mb.saturating_sub(other.mem_mb),
        }
    }
}

/// The first resource a host is short of for a job, with the figures a user needs to see why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    Cpus { free: u32, total: u32, need: u32 },
    Memory { free: u64, total: u64, need: u64 },
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shortfall::Cpus { free, total, need } => {
                write!(f, "{free} of {total} cpus free, {need} needed")
            }
            Shortfall::Memory { free, total, need } => {
                write!(f, "{free} of {total} MiB of memory free, {need} needed")
            }
        }
    }
}

/// Whether a job needing `job` fits on a host offering `host` whose placed jobs already use
/// `load`. Cpus are checked before memory; the error names the first shortfall.
pub fn fits(host: Resources, load: Resources, job: Resources) -> Result<(), Shortfall> {
    let free = host.minus(load);
    if job.cpus > free.cpus {
        return Err(Shortfall::Cpus {
            free: free.cpus,
            total: host.cpus,
            need: job.cpus,
        });
    }
    if job.mem_mb > free.mem_mb {
        return Err(Shortfall::Memory {
            free: free.mem_mb,
            total: host.mem_mb,
            need: job.mem_mb,
        });
    }
    Ok(())
}

/// Whether a host whose worker runs `users`' jobs may run a job of `user`; the error says why
/// not, for the job's pending reason or a refused dispatch.
pub fn may_run(users: &JobUsers, user: &str) -> Result<(), String> {
    match users {
        JobUsers::Any => Ok(()),
        JobUsers::EachUser { .. } if user.is_empty() => {
            Err("it runs each job as its user, and this job names none".into())
        }
        JobUsers::EachUser { root: false } if user == "root" => {
            Err("it does not run root's jobs".into())
        }
        JobUsers::EachUser { .. } => Ok(()),
        JobUsers::Only(only) if only == user => Ok(()),
        JobUsers::Only(only) => Err(format!("it runs only {only}'s jobs")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_host_runs_only_the_users_it_reported() {
        assert_eq!(may_run(&JobUsers::Any, ""), Ok(()));
        assert_eq!(may_run(&JobUsers::Any, "root"), Ok(()));
        let each = JobUsers::EachUser { root: false };
        assert_eq!(may_run(&each, "alice"), Ok(()));
        assert!(may_run(&each, "root").unwrap_err().contains("root"));
        assert!(may_run(&each, "").unwrap_err().contains("names none"));
        assert_eq!(may_run(&JobUsers::EachUser { root: true }, "root"), Ok(()));
        let only = JobUsers::Only("bob".into());
        assert_eq!(may_run(&only, "bob"), Ok(()));
        assert_eq!(
            may_run(&only, "alice").unwrap_err(),
            "it runs only bob's jobs"
        );
    }

    fn r(cpus: u32, mem_mb: u64) -> Resources {
        Resources { cpus, mem_mb }
    }

    #[test]
    fn names_the_first_shortfall() {
        assert_eq!(fits(r(4, 1000), r(2, 500), r(2, 500)), Ok(()));
        assert_eq!(
            fits(r(4, 1000), r(3, 0), r(2, 2000)),
            Err(Shortfall::Cpus {
                free: 1,
                total: 4,
                need: 2
            })
        );
        let short = fits(r(4, 1000), r(0, 900), r(1, 200)).unwrap_err();
        assert_eq!(
            short.to_string(),
            "100 of 1000 MiB of memory free, 200 needed"
        );
        // A job that asks for no memory fits a host that reports none.
        assert_eq!(fits(r(1, 0), r(0, 0), r(1, 0)), Ok(()));
    }

    proptest! {
        /// A job fits exactly when placing it keeps the host within its cpus and memory for
        /// every resource the job asks for (a request of zero fits even an overfull host).
        #[test]
        fn fits_is_exactly_room_for_the_job(
            cap in (0u32..16, 0u64..4096), used in (0u32..20, 0u64..5000), need in (0u32..16, 0u64..4096)
        ) {
            let (host, load, job) = (r(cap.0, cap.1), r(used.0, used.1), r(need.0, need.1));
            let cpus_ok = job.cpus == 0 || load.cpus + job.cpus <= host.cpus;
            let mem_ok = job.mem_mb == 0 || load.mem_mb + job.mem_mb <= host.mem_mb;
            match fits(host, load, job) {
                Ok(()) => prop_assert!(cpus_ok && mem_ok),
                Err(Shortfall::Cpus { .. }) => prop_assert!(!cpus_ok),
                Err(Shortfall::Memory { .. }) => prop_assert!(cpus_ok && !mem_ok),
            }
        }
    }
}
