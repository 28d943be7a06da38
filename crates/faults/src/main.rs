//! `xce-faults --minutes N --seed S [--dir DIR]`: the fault suite. Progress on stderr; the
//! summary as JSON on the last line of stdout; exit 0 only when every check passed.

use std::time::Duration;

use clap::Parser;

/// A local cluster under a seeded nemesis, then a history checker.
#[derive(Debug, Parser)]
#[command(name = "xce-faults", version)]
struct Args {
    /// How long the nemesis runs (fractions allowed: 0.5 is 30 s).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Picks the faults, their targets and their timing; random (and printed) when not given.
    #[arg(long)]
    seed: Option<u64>,
    /// Keep the daemons' logs and the jobs' records here (a temporary directory otherwise).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// How partitions are made: `kernel` runs the whole cluster in a network namespace of its
    /// own and drops packets with iptables (needs root); `proxy` has the fault links hold the
    /// bytes. Default: kernel as root, proxy otherwise (the summary says which).
    #[arg(long, value_enum)]
    partitions: Option<Partitions>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Partitions {
    Kernel,
    Proxy,
}

fn main() {
    let outcome = match Args::try_parse() {
        Ok(args) => real_main(args),
        // --help and --version print and exit 0.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => Err(anyhow::anyhow!("{}", e.to_string().trim_end())),
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("xce-faults: {e:#}");
            // The contract: a JSON summary on the last line, whatever happened.
            println!(
                "{}",
                serde_json::json!({ "ok": false, "error": format!("{e:#}") })
            );
            std::process::exit(2);
        }
    }
}

fn real_main(args: Args) -> anyhow::Result<bool> {
    if !(args.minutes.is_finite() && args.minutes > 0.0 && args.minutes <= 24.0 * 60.0) {
        anyhow::bail!(
            "--minutes {}: expected a number above 0, at most a day",
            args.minutes
        );
    }
    let partitions = args
        .partitions
        .unwrap_or(if nix::unistd::geteuid().is_root() {
            Partitions::Kernel
        } else {
            Partitions::Proxy
        });
    if partitions == Partitions::Kernel {
        // Before any thread: the runtime's threads and every daemon inherit the namespace.
        xce_devcluster::packet_filter::enter_own_namespace()?;
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    eprintln!(
        "xce-faults: seed {seed}, {} minutes, partitions by {partitions:?}",
        args.minutes
    );
    let settings = xce_faults::Settings {
        span: Duration::from_secs_f64(args.minutes * 60.0),
        seed,
        dir: args.dir,
        bin_dir: xce_devcluster::sibling_bin_dir()?,
        kernel_cuts: partitions == Partitions::Kernel,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let summary = runtime.block_on(xce_faults::run(settings, |line| eprintln!("{line}")))?;
    for v in &summary.checks.violations {
        eprintln!("violation: {v}");
    }
    println!("{}", serde_json::to_string(&summary)?);
    Ok(summary.ok)
}
