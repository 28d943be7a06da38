//! A daemon's YAML config file, read the same way by every daemon: the file's type is a serde
//! struct with `deny_unknown_fields` and defaults, so an unknown key is an error naming the
//! key and an empty file is every default. The flags (and their `XCE_*` variables) win over
//! it; each daemon layers them in its own `config` module.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why a config file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    // Not named `source`: as the source too, a chain (`{:#}`) would print it twice.
    #[error("read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
}

/// Reads and parses the YAML file at `path`.
pub fn read_file<T: DeserializeOwned + Default>(path: &Path) -> Result<T, FileError> {
    let text = std::fs::read_to_string(path).map_err(|error| FileError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse(&text).map_err(|detail| FileError::Parse {
        path: path.to_path_buf(),
        detail,
    })
}

/// Reads the file when one is given, else every default.
pub fn read_optional<T: DeserializeOwned + Default>(path: Option<&Path>) -> Result<T, FileError> {
    path.map_or_else(|| Ok(T::default()), read_file)
}

/// Parses YAML text; an empty text (or only comments) is every default.
pub fn parse<T: DeserializeOwned + Default>(text: &str) -> Result<T, String> {
    let meaningful = text
        .lines()
        .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    if !meaningful {
        return Ok(T::default());
    }
    serde_yaml::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct File {
        name: Option<String>,
        ttl_ms: u64,
    }

    #[test]
    fn an_empty_file_is_every_default_and_an_unknown_key_is_named() {
        assert_eq!(parse::<File>(""), Ok(File::default()));
        assert_eq!(parse::<File>("# only a comment\n\n"), Ok(File::default()));
        assert_eq!(
            parse::<File>("name: s2\nttl_ms: 5\n"),
            Ok(File {
                name: Some("s2".into()),
                ttl_ms: 5
            })
        );
        let e = parse::<File>("nmae: s2\n").unwrap_err();
        assert!(e.contains("nmae"), "{e}");
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.yaml");
        let e = read_file::<File>(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.yaml"), "{e}");
        std::fs::write(dir.path().join("bad.yaml"), "ttl_ms: [").unwrap();
        let e = read_file::<File>(&dir.path().join("bad.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("config file ") && e.contains("bad.yaml"),
            "{e}"
        );
        assert_eq!(read_optional::<File>(None).unwrap(), File::default());
    }
}
