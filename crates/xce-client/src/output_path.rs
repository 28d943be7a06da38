//! Where a job's output goes: `--stdout`/`--stderr` patterns (Slurm's `%j`, `%x`, `%u`, `%N`,
//! `%%`, and `%A`/`%a` for arrays), relative to the job's working directory, by default
//! `xce-%j.out` there, as Slurm's `slurm-%j.out`. Checked at submit (an unknown `%` letter is
//! refused, naming it) and expanded on the job's host once it is known.

use std::path::{Path, PathBuf};

/// The pattern of a job's output file when it names none.
pub const DEFAULT_PATTERN: &str = "xce-%j.out";

/// What the letters of a pattern stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts<'a> {
    pub id: u64,
    pub name: &'a str,
    pub user: &'a str,
    pub host: &'a str,
    /// The array's id and this task's index, for an array task.
    pub array: Option<(u64, u32)>,
}

/// A pattern that does not parse: what, and where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("output pattern {pattern:?}: {why}")]
pub struct PatternError {
    pub pattern: String,
    pub why: String,
}

/// The letters a pattern may hold, each with what it stands for.
pub const LETTERS: &[(char, &str)] = &[
    ('j', "the job id"),
    ('x', "the job name"),
    ('u', "the user"),
    ('N', "the host"),
    ('A', "the array's job id (the job id outside an array)"),
    ('a', "the array task index (0 outside an array)"),
];

/// One piece of a parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    /// A letter and its zero-padding width (`%4j`).
    Letter(char, usize),
}

fn pieces(pattern: &str) -> Result<Vec<Piece<'_>>, PatternError> {
    let error = |why: String| PatternError {
        pattern: pattern.to_string(),
        why,
    };
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some(at) = rest.find('%') {
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let after = &rest[at + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let width = if digits == 0 {
            0
        } else {
            after[..digits]
                .parse::<usize>()
                .ok()
                .filter(|w| *w <= 10)
                .ok_or_else(|| error(format!("width {:?} is over 10", &after[..digits])))?
        };
        let letter = after[digits..]
            .chars()
            .next()
            .ok_or_else(|| error("ends in a lone %".to_string()))?;
        match letter {
            '%' if digits == 0 => out.push(Piece::Text("%")),
            l if LETTERS.iter().any(|(c, _)| *c == l) => out.push(Piece::Letter(l, width)),
            l => {
                let known: Vec<String> = LETTERS.iter().map(|(c, _)| format!("%{c}")).collect();
                return Err(error(format!(
                    "%{l} is not one of {}, %%",
                    known.join(", ")
                )));
            }
        }
        rest = &after[digits + letter.len_utf8()..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// Checks a pattern at submit.
pub fn check(pattern: &str) -> Result<(), PatternError> {
    if pattern.is_empty() {
        return Err(PatternError {
            pattern: String::new(),
            why: "empty".into(),
        });
    }
    pieces(pattern).map(drop)
}

/// The pattern with its letters replaced.
pub fn expand(pattern: &str, facts: &Facts<'_>) -> Result<String, PatternError> {
    let mut out = String::new();
    for piece in pieces(pattern)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Letter(letter, width) => {
                let (array_id, index) = facts.array.unwrap_or((facts.id, 0));
                let text = match letter {
                    'j' => format!("{:0width$}", facts.id),
                    'A' => format!("{array_id:0width$}"),
                    'a' => format!("{index:0width$}"),
                    'x' => facts.name.to_string(),
                    'u' => facts.user.to_string(),
                    _ => facts.host.to_string(),
                };
                out.push_str(&text);
            }
        }
    }
    Ok(out)
}

/// The file a pattern names for a job working in `cwd`.
pub fn resolve(pattern: &str, facts: &Facts<'_>, cwd: &Path) -> Result<PathBuf, PatternError> {
    Ok(cwd.join(expand(pattern, facts)?))
}

/// Where one job's output goes on `host`: stdout's file, and stderr's when it is apart
/// (`None`: in stdout's file). Relative to the job's working directory, joined to it when
/// the job names one (a job that names none runs in the home of the account it runs as).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutput {
    pub stdout: PathBuf,
    pub stderr: Option<PathBuf>,
}

/// The files of job `id` on `host`, as its host opens them and `xce job` shows them: one
/// function for both, so they never disagree.
pub fn of_job(
    spec: &crate::types::JobSpec,
    id: u64,
    task: Option<&crate::types::ArrayTask>,
    host: &str,
) -> Result<JobOutput, PatternError> {
    let facts = Facts {
        id,
        name: &spec.name,
        user: &spec.user,
        host,
        array: task.map(|t| (t.array_id, t.index)),
    };
    let cwd = Path::new(&spec.cwd);
    let stdout = resolve(
        spec.stdout.as_deref().unwrap_or(DEFAULT_PATTERN),
        &facts,
        cwd,
    )?;
    let stderr = match &spec.stderr {
        Some(pattern) => Some(resolve(pattern, &facts, cwd)?),
        None => None,
    };
    Ok(JobOutput { stdout, stderr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts() -> Facts<'static> {
        Facts {
            id: 1234,
            name: "sim",
            user: "alice",
            host: "w1",
            array: None,
        }
    }

    #[test]
    fn letters_are_replaced_as_slurm_does() {
        let f = facts();
        assert_eq!(expand(DEFAULT_PATTERN, &f).unwrap(), "xce-1234.out");
        assert_eq!(expand("%x-%j.out", &f).unwrap(), "sim-1234.out");
        assert_eq!(
            expand("/logs/%u/%N/%8j.err", &f).unwrap(),
            "/logs/alice/w1/00001234.err"
        );
        assert_eq!(expand("100%%-%A_%a", &f).unwrap(), "100%-1234_0");
        let task = Facts {
            array: Some((1200, 34)),
            ..facts()
        };
        assert_eq!(expand("%A_%3a.out", &task).unwrap(), "1200_034.out");
        assert_eq!(
            resolve("out/%j", &f, Path::new("/home/alice")).unwrap(),
            PathBuf::from("/home/alice/out/1234")
        );
        assert_eq!(
            resolve("/abs/%j", &f, Path::new("/home/alice")).unwrap(),
            PathBuf::from("/abs/1234")
        );
    }

    #[test]
    fn a_bad_pattern_names_what_is_wrong() {
        for (bad, says) in [
            ("out-%q", "%q is not one of %j"),
            ("out-%", "lone %"),
            ("%99999999999j", "over 10"),
            ("", "empty"),
        ] {
            let e = check(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    proptest! {
        /// Text without `%` is its own expansion, and every pattern that checks expands.
        #[test]
        fn plain_text_is_itself_and_checked_patterns_expand(text in "[^%]{0,20}", pattern in "([a-z/._-]|%[jxuNAa%]|%[0-9][jAa]){0,8}") {
            prop_assert_eq!(expand(&text, &facts()).unwrap(), text);
            if !pattern.is_empty() {
                prop_assert!(check(&pattern).is_ok());
            }
            prop_assert!(expand(&pattern, &facts()).is_ok());
        }
    }
}
