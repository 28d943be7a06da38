//! Job scripts as the cluster keeps them: by content. A script is named by the SHA-256 of its
//! bytes, so the controller stores each distinct script once however many jobs run it (a
//! workflow tool submits thousands of jobs from one template), and a replica or a worker can
//! check that the bytes it holds are the ones the job was submitted with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The largest script (with the job's environment) a controller takes unless configured
/// otherwise (`jobs.max_script_bytes`).
pub const DEFAULT_MAX_SCRIPT_BYTES: usize = 4 << 20;

/// A script's name: the SHA-256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ScriptId(pub [u8; 32]);

impl ScriptId {
    /// The id of these bytes.
    pub fn of(body: &[u8]) -> ScriptId {
        let digest = ring::digest::digest(&ring::digest::SHA256, body);
        let mut out = [0; 32];
        out.copy_from_slice(digest.as_ref());
        ScriptId(out)
    }

    /// From its 64 lowercase hex digits, as [`fmt::Display`] writes it.
    pub fn parse(hex: &str) -> Option<ScriptId> {
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ScriptId(out))
    }
}

impl fmt::Display for ScriptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for ScriptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScriptId({self})")
    }
}

/// Why a script is not one the cluster runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("the script is empty")]
    Empty,
    #[error("the script is a binary file (it holds a NUL byte at offset {0}); submit a text script, or run the program with `xce submit -- PROGRAM`")]
    Binary(usize),
    #[error("the script is {size} bytes, over the {max} bytes a job may hold")]
    TooBig { size: usize, max: usize },
}

/// Refuses what is no text script a shell or interpreter line could run: empty, binary (a
/// NUL byte, which no script holds and every executable does), or over `max` bytes.
pub fn check(body: &[u8], max: usize) -> Result<(), ScriptError> {
    if body.is_empty() {
        return Err(ScriptError::Empty);
    }
    if body.len() > max {
        return Err(ScriptError::TooBig {
            size: body.len(),
            max,
        });
    }
    match body.iter().position(|&b| b == 0) {
        Some(at) => Err(ScriptError::Binary(at)),
        None => Ok(()),
    }
}

/// `--wrap CMD`: the command as a `/bin/sh` script.
pub fn wrap(command: &str) -> Vec<u8> {
    format!("#!/bin/sh\n{command}\n").into_bytes()
}

/// The shell a script without an interpreter line runs with (as LSF does).
pub const DEFAULT_SHELL: &str = "/bin/sh";

/// The command that runs the script at `path` with `args`: its `#!` interpreter (and the one
/// optional argument the kernel would pass it) given the path, or [`DEFAULT_SHELL`] without a
/// `#!` line. The interpreter is run rather than the script itself so that the copy need not
/// be executable and is never exec'd while some process still holds it open for writing (a
/// fork elsewhere in the worker at the wrong moment: `ETXTBSY`).
pub fn command_of(body: &[u8], path: &str, args: &[String]) -> Vec<String> {
    let line = body
        .strip_prefix(b"#!")
        .map(|rest| rest.split(|&b| b == b'\n').next().unwrap_or(rest))
        .map(|line| String::from_utf8_lossy(line).trim().to_string())
        .filter(|line| !line.is_empty());
    let mut command: Vec<String> = match line {
        Some(line) => match line.split_once([' ', '\t']) {
            Some((interpreter, arg)) => vec![interpreter.to_string(), arg.trim().to_string()],
            None => vec![line],
        },
        None => vec![DEFAULT_SHELL.to_string()],
    };
    command.push(path.to_string());
    command.extend(args.iter().cloned());
    command
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_script_runs_with_its_interpreter_line_or_the_shell() {
        let args = ["a b".to_string()];
        assert_eq!(
            command_of(b"#!/bin/bash\necho", "/s/1", &args),
            ["/bin/bash", "/s/1", "a b"]
        );
        assert_eq!(
            command_of(b"#! /usr/bin/env  python3 -u \nprint()", "/s/1", &[]),
            ["/usr/bin/env", "python3 -u", "/s/1"],
            "one optional argument, the rest of the line, as the kernel passes it"
        );
        assert_eq!(command_of(b"echo hi\n", "/s/1", &[]), ["/bin/sh", "/s/1"]);
        assert_eq!(command_of(b"#!\necho", "/s/1", &[]), ["/bin/sh", "/s/1"]);
    }

    #[test]
    fn the_id_is_the_sha256_of_the_bytes() {
        assert_eq!(
            ScriptId::of(b"").to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_script_must_be_text_within_the_limit() {
        assert_eq!(check(b"", 10), Err(ScriptError::Empty));
        assert_eq!(check(b"\x7fELF\0", 10), Err(ScriptError::Binary(4)));
        assert_eq!(
            check(b"echo hello", 4),
            Err(ScriptError::TooBig { size: 10, max: 4 })
        );
        assert_eq!(check(b"echo hi\n", 10), Ok(()));
        assert_eq!(wrap("echo hi"), b"#!/bin/sh\necho hi\n");
    }

    proptest! {
        #[test]
        fn an_id_reads_back_from_its_text(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let id = ScriptId::of(&body);
            prop_assert_eq!(ScriptId::parse(&id.to_string()), Some(id));
        }
    }
}
