//! `xce-worker`: flags, logging, signals; the daemon itself is `xce_worker::run`.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use xce_client::types::JobUsers;
use xce_worker::config::{self, CgroupMode, FileConfig, Overrides, RunJobsAs, Settings};
use xce_worker::{host, Config};

/// An xce worker: runs jobs on this host for the cluster.
#[derive(Debug, Parser)]
#[command(name = "xce-worker", version)]
struct Args {
    /// Controller candidates: name=host:port,...
    #[arg(long, env = "XCE_PEERS")]
    peers: Option<String>,
    /// This host's name in the cluster.
    #[arg(long, env = "XCE_NAME")]
    name: Option<String>,
    /// Where job output and the outbox live.
    #[arg(long, env = "XCE_SPOOL_DIR")]
    spool_dir: Option<PathBuf>,
    /// CPUs offered (default: detected).
    #[arg(long, env = "XCE_CPUS")]
    cpus: Option<u32>,
    /// Memory offered in MiB (default: detected).
    #[arg(long, env = "XCE_MEM_MB")]
    mem_mb: Option<u64>,
    /// Heartbeat interval in milliseconds (default 2000).
    #[arg(long, env = "XCE_HEARTBEAT_MS")]
    heartbeat_ms: Option<u64>,
    /// How long a killed job has to exit after SIGTERM before SIGKILL, in milliseconds
    /// (default 10000).
    #[arg(long, env = "XCE_KILL_GRACE_MS")]
    kill_grace_ms: Option<u64>,
    /// How often to re-sync held jobs with the primary without a failover, in milliseconds
    /// (default 60000).
    #[arg(long, env = "XCE_RESYNC_MS")]
    resync_ms: Option<u64>,
    /// Run each job in a cgroup of its own where the host has cgroups (`auto`, the default),
    /// or never (`off`: process groups only, no cpu or memory limits, and no cgroup setup per
    /// job).
    #[arg(long, env = "XCE_CGROUPS", value_enum)]
    cgroups: Option<CgroupMode>,
    /// Whom jobs run as: `user` (each job as its user, with their groups; needs root, the
    /// default as root), `worker` (only this account's jobs, as itself; the default otherwise)
    /// or `any` (every job as this account, whoever submitted it: dev and test clusters).
    #[arg(long, env = "XCE_RUN_JOBS_AS", value_enum)]
    run_jobs_as: Option<RunJobsAs>,
    /// Run jobs as root: root's own jobs with `--run-jobs-as user`, and needed to run a root
    /// worker with `--run-jobs-as worker` or `any` at all.
    #[arg(long, env = "XCE_ALLOW_ROOT_JOBS")]
    allow_root_jobs: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port).
    #[arg(long, env = "XCE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    daemon: xce_daemon::DaemonArgs,
}

/// Whose jobs this worker runs, from its settings and the account it runs as.
fn job_users(settings: &Settings) -> anyhow::Result<JobUsers> {
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name);
    let root = nix::unistd::geteuid().is_root();
    let mode = settings.run_jobs_as.unwrap_or(if root {
        RunJobsAs::User
    } else {
        RunJobsAs::Worker
    });
    // As root, `worker` and `any` run jobs as root: say so with --allow-root-jobs.
    if root && mode != RunJobsAs::User && !settings.allow_root_jobs {
        anyhow::bail!(
            "--run-jobs-as {}: as root this runs jobs as root; give --allow-root-jobs too, or \
             --run-jobs-as user",
            if mode == RunJobsAs::Any {
                "any"
            } else {
                "worker"
            }
        );
    }
    Ok(match mode {
        RunJobsAs::User if !root => anyhow::bail!(
            "--run-jobs-as user needs root: a worker not running as root can run jobs only as itself"
        ),
        RunJobsAs::User => JobUsers::EachUser {
            root: settings.allow_root_jobs,
        },
        RunJobsAs::Worker => JobUsers::Only(me.context(
            "this worker's account has no name in the user database: give --run-jobs-as any",
        )?),
        RunJobsAs::Any => {
            tracing::warn!(
                "--run-jobs-as any: every job runs as this worker's account, whoever submitted it"
            );
            JobUsers::Any
        }
    })
}

fn main() {
    xce_daemon::systemd::init();
    // The per-job supervisor, and the launcher that forks it, are this same program, so they
    // are always the worker's version.
    let role: Option<fn() -> i32> = match std::env::args_os().nth(1).as_deref() {
        Some(a) if a == xce_worker::shim::SHIM_ARG => Some(xce_worker::shim::main),
        Some(a) if a == xce_worker::launcher::LAUNCHER_ARG => Some(xce_worker::launcher::main),
        _ => None,
    };
    if let Some(role_main) = role {
        // The worker's own settings, handed over (already checked by the worker); a
        // launcher's forked shims keep them.
        let _ = xce_daemon::logging::LogSettings::take_handoff().install();
        std::process::exit(role_main());
    }
    xce_daemon::main("xce-worker", real_main);
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let d = args.daemon;
    let file: FileConfig = xce_daemon::config::read_optional(d.config.as_deref())?;
    let log = d.log.resolve(&file.log, "info");
    log.install()?;
    let check_config = d.check_config;
    let over = Overrides {
        peers: args.peers,
        name: args.name,
        spool_dir: args.spool_dir,
        cpus: args.cpus,
        mem_mb: args.mem_mb,
        heartbeat_ms: args.heartbeat_ms,
        kill_grace_ms: args.kill_grace_ms,
        resync_ms: args.resync_ms,
        cgroups: args.cgroups,
        run_jobs_as: args.run_jobs_as,
        allow_root_jobs: args.allow_root_jobs,
        insecure: d.insecure,
        metrics_listen: args.metrics_listen,
        tls: d.tls,
    };
    let settings = config::resolve(over, file)?;
    let mem_mb = match settings.mem_mb {
        Some(m) => m,
        None => host::detect_mem_mb().context("detect memory (give --mem-mb)")?,
    };
    let addrs: Vec<String> = settings.peers.iter().map(|c| c.addr()).collect();
    xce_daemon::check_transport(
        "xce-worker",
        settings.tls.as_ref(),
        addrs.iter().map(String::as_str),
        settings.insecure,
        check_config,
    )?;
    let job_users = job_users(&settings)?;
    let own_home = host::own_home().context(
        "this worker's account has no home directory (HOME is not an absolute path and the \
         user database has none); jobs of this account that name no working directory run \
         there: set HOME",
    )?;
    if check_config {
        println!("configuration ok: worker {}", settings.name);
        return Ok(());
    }
    let config = Config {
        tls: settings.tls,
        name: settings.name,
        peers: settings.peers,
        spool_dir: settings.spool_dir,
        cpus: settings.cpus.unwrap_or_else(host::detect_cpus),
        mem_mb,
        heartbeat: settings.heartbeat,
        kill_grace: settings.kill_grace,
        resync: settings.resync,
        shim_exe: own_program()?,
        cgroups: settings.cgroups == CgroupMode::Auto,
        job_users,
        own_home,
        metrics_listen: settings.metrics_listen,
        log: Some(log),
    };
    xce_worker::prepare_spool(&config.spool_dir)?;
    xce_daemon::runtime()?.block_on(xce_worker::run(config, xce_client::shutdown::signal()))
}

/// This very program, to run as the shim launcher: `/proc/self/exe` where there is one, which
/// names the running build even after an upgrade replaced the file on disk, so a worker never
/// starts a launcher of another version (whose protocol it may not speak).
fn own_program() -> anyhow::Result<std::path::PathBuf> {
    let proc = std::path::PathBuf::from("/proc/self/exe");
    if proc.exists() {
        return Ok(proc);
    }
    std::env::current_exe().context("find this program, to run job shims")
}
