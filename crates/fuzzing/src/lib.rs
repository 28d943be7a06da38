//! The bodies of xce's fuzz targets, one module each. `fuzz/` (cargo-fuzz, nightly) runs them
//! under libFuzzer; the test suite runs every input of the committed corpus
//! (`fuzz/corpus/<target>/`) through them on stable, so a crash once found stays fixed.
//!
//! A target panics only when a rule it checks is broken: bad input must come back as an
//! error, never as a panic, an overflow, or a state that breaks its invariants.

pub mod apply;
pub mod config;
pub mod peers;
pub mod raft;
pub mod seeds;
pub mod snapshot;
pub mod wire;

/// A target's body: any bytes in, a panic only when a rule is broken.
pub type Target = fn(&[u8]);

/// Every target by name: the names of `fuzz/fuzz_targets/*.rs` and of the corpus folders.
pub const TARGETS: &[(&str, Target)] = &[
    ("peers", peers::run),
    ("config", config::run),
    ("wire", wire::run),
    ("raft", raft::run),
    ("snapshot", snapshot::run),
    ("apply", apply::run),
];
