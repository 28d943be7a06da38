//! Partitions in the kernel: a cut link's port gets `iptables` rules that drop every packet
//! to and from it, so a connect hears no SYN-ACK and an open connection's segments are lost
//! and retransmitted, as across a real partition (the proxy of a [`crate::Link`] only holds
//! bytes). Slow links stay the proxies' (this machine's kernel has no netem).
//!
//! Rules change a network namespace's state, so they are only made in one this process made
//! for itself ([`enter_own_namespace`]): they vanish with it, even after a crash, and never
//! touch the host's or another test's traffic.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::LaunchError;

/// Moves this process into a new network namespace of its own with loopback up. Call before
/// any thread starts (a namespace is per thread; threads started later inherit it). Needs
/// root (CAP_SYS_ADMIN).
pub fn enter_own_namespace() -> Result<(), LaunchError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| LaunchError::Net(format!("make a network namespace (needs root): {e}")))?;
    run(&["ip", "link", "set", "lo", "up"])?;
    OWN_NAMESPACE.store(true, Ordering::SeqCst);
    Ok(())
}

/// Set once [`enter_own_namespace`] has moved this process.
static OWN_NAMESPACE: AtomicBool = AtomicBool::new(false);

/// Whether this process is in a network namespace it made for itself.
fn in_own_namespace() -> bool {
    OWN_NAMESPACE.load(Ordering::SeqCst)
}

/// The ports cut now, to heal them all.
#[derive(Debug, Default)]
pub struct PacketFilter {
    cut: Mutex<BTreeSet<u16>>,
}

impl PacketFilter {
    /// A filter for this process's own network namespace; refused in the host's.
    pub fn new() -> Result<PacketFilter, LaunchError> {
        if !in_own_namespace() {
            return Err(LaunchError::Net(
                "partitions in the kernel need a network namespace of this process's own \
                 (xce-faults --partitions kernel makes one)"
                    .into(),
            ));
        }
        Ok(PacketFilter::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u16>> {
        self.cut.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every TCP packet to or from `port`.
    pub fn cut(&self, port: u16) -> Result<(), LaunchError> {
        if self.lock().insert(port) {
            for rule in rules(port) {
                run(&iptables("-A", &rule))?;
            }
        }
        Ok(())
    }

    /// Lets every cut port's packets through again.
    pub fn heal(&self) -> Result<(), LaunchError> {
        let ports = std::mem::take(&mut *self.lock());
        for port in ports {
            for rule in rules(port) {
                run(&iptables("-D", &rule))?;
            }
        }
        Ok(())
    }
}

/// The two rules that cut `port` (on loopback every packet passes INPUT).
fn rules(port: u16) -> [Vec<String>; 2] {
    let p = port.to_string();
    ["--dport", "--sport"].map(|dir| {
        ["INPUT", "-p", "tcp", dir, p.as_str(), "-j", "DROP"]
            .map(String::from)
            .to_vec()
    })
}

fn iptables(op: &str, rule: &[String]) -> Vec<String> {
    let mut args = vec!["iptables".to_string(), "-w".to_string(), op.to_string()];
    args.extend(rule.iter().cloned());
    args
}

/// Runs a command to completion, or names it and what it printed.
fn run<S: AsRef<str>>(argv: &[S]) -> Result<(), LaunchError> {
    let argv: Vec<&str> = argv.iter().map(AsRef::as_ref).collect();
    let Some((program, args)) = argv.split_first() else {
        return Ok(());
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| LaunchError::Net(format!("{program}: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Net(format!(
            "{}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
