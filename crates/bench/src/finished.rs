//! `xce-bench scale --finished`: the jobs run to their end on real workers and retire from
//! the replicated state to every controller's history store (`history.retire_after` 1 s);
//! then the controllers' memory with only history behind them (`scale_rss_mb_after_retire`),
//! and the first page of one user's history, through `listHistory` as `xce history --user`
//! asks it (`history_query_p99_ms`, over every retired job of the run).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use xce_client::history::HistoryFilter;
use xce_client::ops::{list_history, ListHistory, ListJobs};
use xce_client::types::{JobFilter, JobSpec};
use xce_client::ClientConfig;

use crate::cluster::{BenchCluster, BenchSpec};
use crate::scale::{controller_pids, fmt_mib, load, rss_all, ScaleArgs};
use crate::{metric, quantile};

/// Queries timed for the p99.
const QUERIES: usize = 200;

/// The user every job of the run is submitted as: the query asks for their first page.
const USER: &str = "bench";

pub async fn run(args: &ScaleArgs) -> anyhow::Result<()> {
    let config = format!(
        "history: {{retire_after: 1s}}\nraft:\n  snapshot_logs: {}\n",
        args.snapshot_logs
    );
    let cluster = BenchCluster::start_spec(BenchSpec {
        controllers: args.controllers,
        workers: 2,
        worker_args: &["--cpus", "32"],
        config: Some(&config),
        schedulers: 1,
        ..BenchSpec::default()
    })
    .await?;
    let pids = controller_pids(&cluster)?;
    let baseline = rss_all(&pids);
    let spec = JobSpec {
        name: "bench".into(),
        user: USER.into(),
        command: vec!["true".into()],
        ..JobSpec::default()
    };
    eprintln!(
        "xce-bench scale --finished: {} controllers, 2 workers of 32 cpus, {} jobs; idle RSS {} MiB",
        args.controllers,
        args.jobs,
        fmt_mib(&baseline)
    );
    let (load_time, _) = load(&cluster, args, &spec, Arc::new(AtomicUsize::new(0))).await?;
    eprintln!(
        "xce-bench scale --finished: {} jobs submitted in {:.1} s; RSS {} MiB",
        args.jobs,
        load_time.as_secs_f64(),
        fmt_mib(&rss_all(&pids))
    );
    let client = cluster.client(ClientConfig::default())?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.load_timeout_s);
    loop {
        let page = client
            .call(ListJobs {
                filter: JobFilter::default(),
                after: 0,
                limit: 1,
            })
            .await?;
        if page.jobs.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "jobs still live {:.0} s after the load",
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after_retire = rss_all(&pids);
    eprintln!(
        "xce-bench scale --finished: every job ran and retired {:.1} s after the load; RSS {} MiB",
        started.elapsed().as_secs_f64(),
        fmt_mib(&after_retire)
    );
    let filter = HistoryFilter {
        user: Some(USER.into()),
        ..HistoryFilter::default()
    };
    let listed = list_history(&client, filter.clone(), 0, usize::MAX, u64::MAX, |_| {}).await?;
    ensure!(
        listed.jobs == args.jobs,
        "history lists {} jobs, {} ran",
        listed.jobs,
        args.jobs
    );
    let mut ms = Vec::with_capacity(QUERIES);
    for _ in 0..QUERIES {
        let asked = Instant::now();
        let page = client
            .call(ListHistory {
                filter: filter.clone(),
                after: 0,
                limit: 100,
            })
            .await?;
        ms.push(asked.elapsed().as_secs_f64() * 1000.0);
        ensure!(!page.jobs.is_empty(), "an empty first page");
    }
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "xce-bench scale --finished: first page of {USER}'s history ({} records): p50 {:.2} ms, p99 {:.2} ms",
        args.jobs,
        quantile(&ms, 0.5),
        quantile(&ms, 0.99)
    );
    metric(
        "scale_rss_mb_after_retire",
        after_retire.iter().copied().fold(0.0, f64::max),
        "MiB",
    );
    metric("history_query_p99_ms", quantile(&ms, 0.99), "ms");
    Ok(())
}
