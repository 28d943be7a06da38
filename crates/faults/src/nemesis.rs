//! The nemesis: one fault at a time, chosen by a seeded random number generator, held for a
//! while, then healed; the cluster must be whole again (a primary, every worker `ok`, an
//! active scheduler, a ready apiserver) before the next.

use std::time::Duration;

use rand::Rng;
use serde::Serialize;
use xce_devcluster::DevCluster;

/// Every kind of fault, by the name the summary counts it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    KillPrimary,
    KillStandby,
    PausePrimary,
    PauseStandby,
    PartitionController,
    DelayController,
    PartitionWorker,
    PartitionScheduler,
    KillWorker,
    PauseWorker,
    KillScheduler,
    RestartEveryController,
}

impl Fault {
    const ALL: [Fault; 12] = [
        Fault::KillPrimary,
        Fault::KillStandby,
        Fault::PausePrimary,
        Fault::PauseStandby,
        Fault::PartitionController,
        Fault::DelayController,
        Fault::PartitionWorker,
        Fault::PartitionScheduler,
        Fault::KillWorker,
        Fault::PauseWorker,
        Fault::KillScheduler,
        Fault::RestartEveryController,
    ];

    /// Every kind once, in a random order: a run deals these rounds one after another, so
    /// a run of a dozen faults has met every kind.
    pub fn round(rng: &mut impl Rng) -> Vec<Fault> {
        let mut round = Fault::ALL.to_vec();
        for i in (1..round.len()).rev() {
            round.swap(i, rng.random_range(0..=i));
        }
        round
    }

    /// Whether it takes a majority of controllers down.
    pub fn takes_majority(self) -> bool {
        self == Fault::RestartEveryController
    }
}

/// What must be undone to heal a fault.
#[derive(Debug)]
pub enum Undo {
    StartController(usize),
    ResumeController(usize),
    StartWorker(usize),
    ResumeWorker(usize),
    StartScheduler(usize),
    StartEveryController,
    HealLinks,
}

/// Injects `fault`; `primary` is the index of the current primary (if known). Returns what
/// heals it and a description for the log.
pub fn inject(
    cluster: &mut DevCluster,
    fault: Fault,
    primary: Option<usize>,
    rng: &mut impl Rng,
) -> anyhow::Result<(Undo, String)> {
    let controllers = cluster.controllers.len();
    let primary = primary.unwrap_or_else(|| rng.random_range(0..controllers));
    let standby = (primary + rng.random_range(1..controllers)) % controllers;
    let any = |rng: &mut dyn rand::RngCore, n: usize| rng.random_range(0..n);
    let name = |c: &DevCluster, i: usize| c.controllers[i].name.clone();
    Ok(match fault {
        Fault::KillPrimary | Fault::KillStandby => {
            let i = if fault == Fault::KillPrimary {
                primary
            } else {
                standby
            };
            cluster.kill9(i)?;
            (
                Undo::StartController(i),
                format!("kill -9 {}", name(cluster, i)),
            )
        }
        Fault::PausePrimary | Fault::PauseStandby => {
            let i = if fault == Fault::PausePrimary {
                primary
            } else {
                standby
            };
            cluster.pause(i)?;
            (
                Undo::ResumeController(i),
                format!("pause {}", name(cluster, i)),
            )
        }
        Fault::PartitionController => {
            let i = any(rng, controllers);
            let who = name(cluster, i);
            cluster.isolate(&who)?;
            (
                Undo::HealLinks,
                format!("partition {who} from the other controllers"),
            )
        }
        Fault::DelayController => {
            let i = any(rng, controllers);
            let who = name(cluster, i);
            let delay = Duration::from_millis(rng.random_range(60..=170));
            cluster.delay(&who, delay);
            (Undo::HealLinks, format!("delay {who}'s links by {delay:?}"))
        }
        Fault::PartitionWorker | Fault::PartitionScheduler => {
            let daemons = if fault == Fault::PartitionWorker {
                &cluster.workers
            } else {
                &cluster.schedulers
            };
            let who = daemons[any(rng, daemons.len())].name.clone();
            cluster.isolate(&who)?;
            (
                Undo::HealLinks,
                format!("partition {who} from the controllers"),
            )
        }
        Fault::KillWorker => {
            let i = any(rng, cluster.workers.len());
            cluster.kill9_worker(i)?;
            (
                Undo::StartWorker(i),
                format!("kill -9 {}", cluster.workers[i].name),
            )
        }
        Fault::PauseWorker => {
            let i = any(rng, cluster.workers.len());
            cluster.pause_worker(i)?;
            (
                Undo::ResumeWorker(i),
                format!("pause {}", cluster.workers[i].name),
            )
        }
        Fault::KillScheduler => {
            let i = any(rng, cluster.schedulers.len());
            cluster.kill9_scheduler(i)?;
            (
                Undo::StartScheduler(i),
                format!("kill -9 {}", cluster.schedulers[i].name),
            )
        }
        Fault::RestartEveryController => {
            for i in 0..controllers {
                cluster.kill9(i)?;
            }
            (
                Undo::StartEveryController,
                "kill -9 every controller".to_string(),
            )
        }
    })
}

/// Heals what [`inject`] did.
pub fn heal(cluster: &mut DevCluster, undo: Undo) -> anyhow::Result<()> {
    match undo {
        Undo::StartController(i) => cluster.start_controller(i)?,
        Undo::ResumeController(i) => cluster.resume(i)?,
        Undo::StartWorker(i) => cluster.start_worker(i)?,
        Undo::ResumeWorker(i) => cluster.resume_worker(i)?,
        Undo::StartScheduler(i) => cluster.start_scheduler(i)?,
        Undo::StartEveryController => {
            for i in 0..cluster.controllers.len() {
                cluster.start_controller(i)?;
            }
        }
        Undo::HealLinks => cluster.heal()?,
    }
    Ok(())
}
