//! Signals as users name them (`USR1`, `SIGTERM`, `10`), for `xce signal`, `xce kill
//! --signal` and `--signal [B:]SIG[@SECONDS]` (Slurm's warning before the time limit, which
//! submitit and Nextflow use to checkpoint). Numbers are Linux's, where jobs run.

use std::fmt;

/// Linux's standard signals by name, without the `SIG` prefix.
const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// The highest signal number (the last real-time one).
pub const MAX_SIGNAL: i32 = 64;

/// A signal name or number that is none, or a `--signal` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signal: {0}")]
pub struct SignalError(String);

/// A signal by name (`USR1`, `SIGUSR1`, any case) or number (1 to [`MAX_SIGNAL`]).
pub fn parse(text: &str) -> Result<i32, SignalError> {
    if let Ok(n) = text.parse::<i32>() {
        return if (1..=MAX_SIGNAL).contains(&n) {
            Ok(n)
        } else {
            Err(SignalError(format!(
                "{n} is not a signal number (1 to {MAX_SIGNAL})"
            )))
        };
    }
    let upper = text.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    NAMES
        .iter()
        .find(|(name, _)| *name == bare)
        .map(|(_, n)| *n)
        .ok_or_else(|| SignalError(format!("no signal named {text:?}")))
}

/// The names of the signals [`parse`] knows (without `SIG`), for documents that list them.
pub fn names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().map(|(name, _)| *name)
}

/// A signal's name without `SIG` (`USR1`), or its number for a real-time one.
pub fn name(signal: i32) -> String {
    NAMES
        .iter()
        .find(|(_, n)| *n == signal)
        .map_or_else(|| signal.to_string(), |(name, _)| (*name).to_string())
}

/// A signal a job gets some time before its time limit (`--signal [B:]SIG[@SECONDS]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Warning {
    pub signal: i32,
    /// How long before the limit.
    pub before_s: u32,
    /// `B:`: to the job's leading process (the batch shell) alone, not its whole group.
    pub leader_only: bool,
}

/// Seconds before the limit when `--signal` names none (Slurm's default).
pub const DEFAULT_WARNING_S: u32 = 60;
/// The most seconds before the limit (Slurm's bound).
pub const MAX_WARNING_S: u32 = 65_535;

/// Splits Slurm's `B:` (the job's leading process alone) off a signal: whether it was there,
/// and the rest.
pub fn leader_only(text: &str) -> (bool, &str) {
    match text.strip_prefix("B:") {
        Some(rest) => (true, rest),
        None => (false, text),
    }
}

/// Parses `[B:]SIG[@SECONDS]`.
pub fn parse_warning(text: &str) -> Result<Warning, SignalError> {
    let (leader_only, rest) = leader_only(text);
    let (signal, before_s) = match rest.split_once('@') {
        Some((signal, seconds)) => {
            let before_s = seconds
                .parse::<u32>()
                .ok()
                .filter(|s| *s <= MAX_WARNING_S)
                .ok_or_else(|| {
                    SignalError(format!(
                        "{seconds:?} in {text:?} is not a number of seconds (0 to {MAX_WARNING_S})"
                    ))
                })?;
            (signal, before_s)
        }
        None => (rest, DEFAULT_WARNING_S),
    };
    Ok(Warning {
        signal: parse(signal)?,
        before_s,
        leader_only,
    })
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leader = if self.leader_only { "B:" } else { "" };
        write!(f, "{leader}{}@{}", name(self.signal), self.before_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_numbers_and_prefixes_are_all_signals() {
        assert_eq!(parse("USR1"), Ok(10));
        assert_eq!(parse("sigusr1"), Ok(10));
        assert_eq!(parse("SIGTERM"), Ok(15));
        assert_eq!(parse("9"), Ok(9));
        assert_eq!(parse("40"), Ok(40));
        for bad in ["USR3", "0", "65", "-1", "", "SIG"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("signal: "), "{bad}: {e}");
        }
        assert!(parse("USR3").unwrap_err().to_string().contains("\"USR3\""));
    }

    #[test]
    fn warnings_are_slurm_s_form() {
        let w = |signal, before_s, leader_only| Warning {
            signal,
            before_s,
            leader_only,
        };
        assert_eq!(parse_warning("USR1@5"), Ok(w(10, 5, false)));
        assert_eq!(parse_warning("B:TERM@120"), Ok(w(15, 120, true)));
        assert_eq!(parse_warning("USR2"), Ok(w(12, 60, false)));
        for bad in ["USR1@", "USR1@-3", "USR1@70000", "B:", "NOPE@5", "@5"] {
            assert!(parse_warning(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// A warning reads back from what it prints.
        #[test]
        fn a_warning_reads_back(signal in 1..=MAX_SIGNAL, before_s in 0..=MAX_WARNING_S, leader_only: bool) {
            let w = Warning { signal, before_s, leader_only };
            prop_assert_eq!(parse_warning(&w.to_string()), Ok(w));
        }
    }
}
