//! The primary hint: which candidate answered the last command run with the same `--peers`,
//! kept in a small file under `$XDG_CACHE_HOME/xce/` (or `~/.cache/xce/`), so the next
//! one-shot command connects to the primary first instead of being redirected by a standby
//! listed before it (a second connection). A hint only: the client takes it only if it names
//! one of the candidates, a stale one costs one attempt of the normal rotation, and a missing,
//! unreadable or unwritable file costs nothing but the hint.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// Where the hint for one peers list lives and what it said when read.
#[derive(Debug)]
pub struct Hint {
    /// `None` when there is no cache directory (no `$XDG_CACHE_HOME` nor `$HOME`).
    path: Option<PathBuf>,
    /// The peers list as given; stored in the file, so a name collision is never a hint.
    peers: String,
    /// The address read at start, if any.
    pub addr: Option<String>,
}

impl Hint {
    /// Reads the hint for `peers` from the user's cache directory.
    pub fn load(peers: &str) -> Hint {
        let path = cache_dir().map(|d| d.join(file_name(peers)));
        let addr = path.as_deref().and_then(|p| read(p, peers));
        Hint {
            path,
            peers: peers.to_string(),
            addr,
        }
    }

    /// Remembers `addr` for the next command, unless it is what the file already says.
    /// Written to a temporary file and renamed, so concurrent commands never read half a
    /// hint. Failures are ignored: the hint is an optimisation.
    pub fn store(&self, addr: &str) {
        let Some(path) = &self.path else { return };
        if self.addr.as_deref() == Some(addr) {
            return;
        }
        if let Err(e) = write(path, &self.peers, addr) {
            tracing::debug!(path = %path.display(), error = %e, "primary hint not saved");
        }
    }
}

/// `$XDG_CACHE_HOME/xce` (when absolute, as the XDG spec requires), else `$HOME/.cache/xce`.
fn cache_dir() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".cache"))
        })
        .map(|d| d.join("xce"))
}

/// One file per peers list. The name only needs to be stable and distinct in practice: the
/// file holds the list itself, so a collision reads as no hint.
fn file_name(peers: &str) -> String {
    // FNV-1a: fixed and simple, unlike std's hasher whose output may change between releases.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    peers.hash(&mut h);
    format!("primary-{:016x}", h.finish())
}

/// The file is two lines: the peers list, then the address of the candidate that answered.
fn read(path: &Path, peers: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    (lines.next()? == peers).then_some(())?;
    let addr = lines.next()?.trim();
    (!addr.is_empty()).then(|| addr.to_string())
}

fn write(path: &Path, peers: &str, addr: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.{}", file_name(peers), std::process::id()));
    std::fs::write(&tmp, format!("{peers}\n{addr}\n"))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_is_read_back_only_for_the_same_peers_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("xce").join(file_name("a:1,b:2"));
        assert_eq!(read(&path, "a:1,b:2"), None, "no file is no hint");
        write(&path, "a:1,b:2", "b:2").unwrap();
        assert_eq!(read(&path, "a:1,b:2").as_deref(), Some("b:2"));
        assert_eq!(read(&path, "a:1,b:3"), None, "another list never takes it");
        std::fs::write(&path, "a:1,b:2\n").unwrap();
        assert_eq!(read(&path, "a:1,b:2"), None, "half a file is no hint");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(read(&path, "a:1,b:2"), None, "garbage is no hint");
        assert_ne!(file_name("a:1,b:2"), file_name("a:1,b:3"));
    }
}
