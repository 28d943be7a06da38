//! `#XCE` lines: the options a job script carries for `xce submit`, as `#SBATCH` and `#BSUB`
//! lines do for Slurm and LSF. They are read after the `#!` line and before the first
//! command (blank lines and other comments may come between); each is shell-split and taken
//! as options of `xce submit`, with the same long names as the command line, which comes after
//! them and so overrides them (a repeatable option, like `-e`, adds to them).

use std::fmt;

/// The prefix of a directive line.
pub const PREFIX: &str = "#XCE";

/// A directive line, split into the options it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// 1-based line number in the script.
    pub line: usize,
    /// The line as written, for errors.
    pub text: String,
    /// Its options, shell-split.
    pub args: Vec<String>,
}

/// A directive that does not parse: its line number and text, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectiveError {
    pub line: usize,
    pub text: String,
    pub why: String,
}

impl fmt::Display for DirectiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "script line {}: {:?}: {}",
            self.line, self.text, self.why
        )
    }
}

impl std::error::Error for DirectiveError {}

/// The directives of `script`, in order.
pub fn extract(script: &str) -> Result<Vec<Directive>, DirectiveError> {
    let mut found = Vec::new();
    for (i, line) in script.lines().enumerate() {
        let trimmed = line.trim();
        if i == 0 && trimmed.starts_with("#!") {
            continue;
        }
        // At the start of the line, as `#SBATCH` for sbatch: an indented one is a comment.
        if let Some(rest) = line.trim_end().strip_prefix(PREFIX) {
            // `#XCEFOO` is some other comment.
            if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                continue;
            }
            let error = |why: &str| DirectiveError {
                line: i + 1,
                text: line.to_string(),
                why: why.to_string(),
            };
            let args = shlex::split(rest).ok_or_else(|| error("unbalanced quotes"))?;
            if args.is_empty() {
                return Err(error("no option"));
            }
            // After `--` the command line would become the job's command.
            if args.iter().any(|a| a == "--") {
                return Err(error(
                    "\"--\" has no place in a directive: it holds options only",
                ));
            }
            found.push(Directive {
                line: i + 1,
                text: line.to_string(),
                args,
            });
        } else if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        } else {
            break;
        }
    }
    Ok(found)
}

/// The options of `directives` and then `command_line`, parsed as one command line of `P`
/// (whose command must let a later option override an earlier one: `args_override_self`).
/// Each directive is first parsed alone, so an error names its line; `options_only` refuses
/// what a directive may not hold (the command to run, say).
pub fn parse_with<P: clap::Parser>(
    directives: &[Directive],
    command_line: &[String],
    options_only: impl Fn(&P) -> Result<(), String>,
) -> Result<P, ParseError> {
    // Any program name: clap skips it (and building the command to ask for its name is what
    // this avoids).
    let bin = "directives".to_string();
    let all = std::iter::once(&bin)
        .chain(directives.iter().flat_map(|d| &d.args))
        .chain(command_line);
    // The directives together first: each parse builds the clap command, which costs more
    // than anything else a submit does here; each line alone is parsed only to name the one
    // at fault.
    if let Ok(parsed) = P::try_parse_from(all.clone()) {
        if options_only(&parsed).is_ok() {
            return Ok(parsed);
        }
    }
    for d in directives {
        let error = |why: String| {
            ParseError::Directive(DirectiveError {
                line: d.line,
                text: d.text.clone(),
                why,
            })
        };
        let alone = P::try_parse_from(std::iter::once(&bin).chain(&d.args))
            .map_err(|e| error(first_line(&e.to_string())))?;
        options_only(&alone).map_err(error)?;
    }
    let parsed = P::try_parse_from(all).map_err(ParseError::CommandLine)?;
    match options_only(&parsed) {
        Ok(()) => Ok(parsed),
        Err(why) => Err(ParseError::Directive(DirectiveError {
            line: directives.last().map_or(0, |d| d.line),
            text: directives
                .last()
                .map_or_else(String::new, |d| d.text.clone()),
            why,
        })),
    }
}

/// What [`parse_with`] refuses: a directive, or the command line (clap's own error, which
/// prints its usage).
#[derive(Debug)]
pub enum ParseError {
    Directive(DirectiveError),
    CommandLine(clap::Error),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Directive(e) => e.fmt(f),
            ParseError::CommandLine(e) => f.write_str(&first_line(&e.to_string())),
        }
    }
}

/// The first line of clap's error, without its `error: ` prefix.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_come_before_the_first_command() {
        let script = "#!/bin/bash\n#XCE -J sim --time 1:00\n\n# a comment\n#XCE -e 'A=x y'\n\
                      echo hi\n#XCE --cpus 4\n";
        let found = extract(script).unwrap();
        let args: Vec<_> = found.iter().map(|d| (d.line, d.args.clone())).collect();
        assert_eq!(
            args,
            vec![
                (
                    2,
                    vec!["-J".into(), "sim".into(), "--time".into(), "1:00".into()]
                ),
                (5, vec!["-e".into(), "A=x y".into()]),
            ]
        );
    }

    #[test]
    fn a_script_without_an_interpreter_line_has_directives_too() {
        let found = extract("#XCE --hold\ntrue\n").unwrap();
        assert_eq!(found[0].line, 1);
        assert_eq!(found[0].args, vec!["--hold".to_string()]);
        // Other comments that merely begin like one are not directives, nor an indented one.
        assert!(extract("#XCEX --hold\ntrue\n").unwrap().is_empty());
        assert!(extract("  #XCE --hold\ntrue\n").unwrap().is_empty());
    }

    #[test]
    fn a_bad_directive_names_its_line() {
        let e = extract("#!/bin/sh\n#XCE -J 'open\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.to_string()
                .starts_with("script line 2: \"#XCE -J 'open\""),
            "{e}"
        );
        let e = extract("#!/bin/sh\n#XCE -J a --\n#XCE --cpus 2\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("\"--\" has no place"), "{e}");
        let e = extract("#XCE\n").unwrap_err();
        assert!(e.to_string().contains("no option"), "{e}");
    }
}
