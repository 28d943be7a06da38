//! The one rule for whether a job fits on a host. The controller applies it when it validates
//! a dispatch and the scheduler when it places jobs, so the two can never disagree about room.

use std::fmt;

pub use crate::resources::Resources;
use crate::types::JobUsers;

/// The first resource a host is short of for a job, with the figures a user needs to see why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    Cpus {
        free: u32,
        total: u32,
        need: u32,
    },
    Memory {
        free: u64,
        total: u64,
        need: u64,
    },
    /// A generic resource, by name.
    Gres {
        name: String,
        free: u64,
        total: u64,
        need: u64,
    },
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
            Shortfall::Gres {
                name,
                free,
                total,
                need,
            } => write!(f, "{free} of {total} {name} free, {need} needed"),
        }
    }
}

/// Most rounds of a host's resources that may wait on it beyond what it runs (dispatch ahead,
/// cluster version 12): the apply's bound, and the most a scheduler may be set to.
pub const MAX_AHEAD_ROUNDS: u32 = 3;

/// Whether a job needing `job` may be sent ahead to a host offering `host` whose placed jobs
/// already use `load`, with up to `rounds` rounds of its resources waiting there beyond what
/// it runs: it fits the host alone, and the placed jobs stay within `1 + rounds` times what the
/// host offers. The worker starts it once room frees.
pub fn fits_ahead(
    host: &Resources,
    load: &Resources,
    job: &Resources,
    rounds: u32,
) -> Result<(), Shortfall> {
    fits(host, &Resources::default(), job)?;
    let bound = (0..rounds).fold(host.clone(), |b, _| b.plus(host));
    fits(&bound, load, job)
}

/// Whether a job needing `job` fits on a host offering `host` whose placed jobs already use
/// `load`. Cpus are checked before memory, memory before generic resources (by name); the
/// error names the first shortfall.
pub fn fits(host: &Resources, load: &Resources, job: &Resources) -> Result<(), Shortfall> {
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
    for (name, need) in &job.gres {
        if *need > free.gres(name) {
            return Err(Shortfall::Gres {
                name: name.clone(),
                free: free.gres(name),
                total: host.gres(name),
                need: *need,
            });
        }
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
        Resources::new(cpus, mem_mb)
    }

    #[test]
    fn names_the_first_shortfall() {
        assert_eq!(fits(&r(4, 1000), &r(2, 500), &r(2, 500)), Ok(()));
        assert_eq!(
            fits(&r(4, 1000), &r(3, 0), &r(2, 2000)),
            Err(Shortfall::Cpus {
                free: 1,
                total: 4,
                need: 2
            })
        );
        let short = fits(&r(4, 1000), &r(0, 900), &r(1, 200)).unwrap_err();
        assert_eq!(
            short.to_string(),
            "100 of 1000 MiB of memory free, 200 needed"
        );
        // A job that asks for no memory fits a host that reports none.
        assert_eq!(fits(&r(1, 0), &r(0, 0), &r(1, 0)), Ok(()));
    }

    #[test]
    fn generic_resources_fit_by_name() {
        let mut host = r(4, 1000);
        host.set_gres("gpu", 2);
        let mut load = r(1, 0);
        load.set_gres("gpu", 1);
        let mut job = r(1, 0);
        job.set_gres("gpu", 1);
        assert_eq!(fits(&host, &load, &job), Ok(()));
        job.set_gres("gpu", 2);
        assert_eq!(
            fits(&host, &load, &job).unwrap_err().to_string(),
            "1 of 2 gpu free, 2 needed"
        );
        // A resource the host does not offer at all.
        let mut lic = r(1, 0);
        lic.set_gres("matlab", 1);
        assert_eq!(
            fits(&host, &load, &lic).unwrap_err().to_string(),
            "0 of 0 matlab free, 1 needed"
        );
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
            match fits(&host, &load, &job) {
                Ok(()) => prop_assert!(cpus_ok && mem_ok),
                Err(Shortfall::Cpus { .. }) => prop_assert!(!cpus_ok),
                Err(Shortfall::Memory { .. }) => prop_assert!(cpus_ok && !mem_ok),
                Err(Shortfall::Gres { .. }) => prop_assert!(false, "no generic resources asked"),
            }
        }
    }
}
