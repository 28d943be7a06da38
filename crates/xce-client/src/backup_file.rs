//! The framing of a backup file (`xce admin snapshot save|restore`): the magic, the number of
//! frames, then each frame as a little-endian `u32` length and that many bytes. The first
//! frame is the backup's header; each later one is a *part*, restored as one replicated
//! write, so a backup of any size moves in pieces that fit a message and a Raft entry.
//!
//! This side reads and writes frames, never what is in them (that is the controller's store
//! format). It derives each part's request token from the file's digest, so running an
//! interrupted restore again resumes it: the parts the cluster applied are answered from its
//! token memory, and only the rest are applied.

use std::io::{Read, Write};
use std::path::Path;

use crate::types::RequestToken;

/// The first bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"XCEBKUP\n";

/// The largest frame: below a controller's largest inbound message, with room for the header
/// frame sent beside each part.
pub const MAX_FRAME_BYTES: usize = 40 << 20;

/// The most frames a file may declare (a part is at least one job; a million-job cluster
/// takes a few hundred parts).
pub const MAX_FRAMES: u32 = 1 << 20;

/// Why a file is not a readable backup.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not an xce backup (it does not start with the backup magic)")]
    NotABackup,
    #[error("the backup declares {0} frames; at most {MAX_FRAMES} are allowed")]
    TooManyFrames(u32),
    #[error("the backup declares no frames")]
    Empty,
    #[error("frame {frame} is {size} bytes; at most {MAX_FRAME_BYTES} are allowed")]
    TooLarge { frame: u32, size: usize },
    #[error("the backup is truncated in frame {frame} of {frames}")]
    Truncated { frame: u32, frames: u32 },
    #[error("the backup has bytes after its last frame")]
    Trailing,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes a backup file's frames as they arrive: `frames` must be their number.
pub struct FrameWriter<W: Write> {
    out: W,
}

impl<W: Write> FrameWriter<W> {
    /// Starts a file of `frames` frames.
    pub fn new(mut out: W, frames: u32) -> std::io::Result<Self> {
        out.write_all(MAGIC)?;
        out.write_all(&frames.to_le_bytes())?;
        Ok(FrameWriter { out })
    }

    /// Appends one frame.
    pub fn frame(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|&l| l as usize <= MAX_FRAME_BYTES)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("a frame of {} bytes is too large", bytes.len()),
                )
            })?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(bytes)
    }

    /// The underlying writer, once every frame is written.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads a backup file's frames one at a time (a file larger than memory streams through).
pub struct FrameReader<R: Read> {
    input: R,
    frames: u32,
    next: u32,
}

impl<R: Read> FrameReader<R> {
    /// Checks the magic and reads the number of frames.
    pub fn new(mut input: R) -> Result<Self, FrameError> {
        let mut magic = [0u8; 8];
        read_or(&mut input, &mut magic, FrameError::NotABackup)?;
        if &magic != MAGIC {
            return Err(FrameError::NotABackup);
        }
        let mut count = [0u8; 4];
        read_or(&mut input, &mut count, FrameError::NotABackup)?;
        let frames = u32::from_le_bytes(count);
        if frames == 0 {
            return Err(FrameError::Empty);
        }
        if frames > MAX_FRAMES {
            return Err(FrameError::TooManyFrames(frames));
        }
        Ok(FrameReader {
            input,
            frames,
            next: 0,
        })
    }

    /// How many frames the file declares (the header and every part).
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// The next frame, or `None` after the last one (once the file is checked to end there).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let (frame, frames) = (self.next, self.frames);
        if frame == frames {
            let mut extra = [0u8; 1];
            return match self.input.read(&mut extra)? {
                0 => Ok(None),
                _ => Err(FrameError::Trailing),
            };
        }
        let truncated = || FrameError::Truncated { frame, frames };
        let mut len = [0u8; 4];
        read_or(&mut self.input, &mut len, truncated())?;
        let size = u32::from_le_bytes(len) as usize;
        if size > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge { frame, size });
        }
        let mut bytes = vec![0u8; size];
        read_or(&mut self.input, &mut bytes, truncated())?;
        self.next += 1;
        Ok(Some(bytes))
    }
}

/// `read_exact`, with an early end of file reported as `eof`.
fn read_or(input: &mut impl Read, buf: &mut [u8], eof: FrameError) -> Result<(), FrameError> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => eof,
        _ => FrameError::Io(e),
    })
}

/// A backup file checked whole: every frame present and within bounds, nothing after the
/// last. Checked before a restore sends anything, so a damaged file changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The file's SHA-256, from which its parts' tokens come.
    pub digest: [u8; 32],
    /// Its frames: the header and every part.
    pub frames: u32,
}

/// Reads the file at `path` once, checking its framing and taking its digest.
pub fn check_file(path: &Path) -> Result<Checked, FrameError> {
    let mut hashing = Hashing {
        inner: std::io::BufReader::new(std::fs::File::open(path)?),
        ctx: ring::digest::Context::new(&ring::digest::SHA256),
    };
    let mut reader = FrameReader::new(&mut hashing)?;
    let frames = reader.frames();
    while reader.next_frame()?.is_some() {}
    let mut digest = [0u8; 32];
    digest.copy_from_slice(hashing.ctx.finish().as_ref());
    Ok(Checked { digest, frames })
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    ctx: ring::digest::Context,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.ctx.update(&buf[..n]);
        Ok(n)
    }
}

/// The request token of part `part` (1 is the first part, after the header) of the backup
/// whose file has digest `digest`: the same file always gives the same tokens, another file
/// others.
pub fn part_token(digest: &[u8; 32], part: u32) -> RequestToken {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"xce restore part\0");
    ctx.update(digest);
    ctx.update(&part.to_le_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&ctx.finish().as_ref()[..16]);
    RequestToken(u128::from_le_bytes(first))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(frames: &[&[u8]]) -> Vec<u8> {
        let n = u32::try_from(frames.len()).unwrap();
        let mut w = FrameWriter::new(Vec::new(), n).unwrap();
        for f in frames {
            w.frame(f).unwrap();
        }
        w.into_inner()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
        let mut r = FrameReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame()? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn frames_read_back_as_written() {
        let bytes = file(&[b"header", b"", b"part two"]);
        let frames = read_all(&bytes).unwrap();
        assert_eq!(
            frames,
            vec![b"header".to_vec(), vec![], b"part two".to_vec()]
        );
    }

    #[test]
    fn a_damaged_file_is_refused_naming_why() {
        let bytes = file(&[b"header", b"part"]);
        // Cut anywhere, even exactly between frames: never read as a shorter backup.
        for cut in 0..bytes.len() {
            let err = read_all(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, FrameError::NotABackup | FrameError::Truncated { .. }),
                "cut at {cut}: {err}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(read_all(&longer), Err(FrameError::Trailing)));
        assert!(matches!(
            read_all(b"SQLite format 3\0...."),
            Err(FrameError::NotABackup)
        ));
        let mut huge = file(&[b"h"]);
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_all(&huge),
            Err(FrameError::TooLarge { frame: 0, .. })
        ));
        assert!(matches!(read_all(&file(&[])), Err(FrameError::Empty)));
    }

    #[test]
    fn a_file_is_checked_whole_and_its_digest_is_of_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let bytes = file(&[b"header", b"part"]);
        std::fs::write(&path, &bytes).unwrap();
        let checked = check_file(&path).unwrap();
        assert_eq!(checked.frames, 2);
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        assert_eq!(&checked.digest[..], digest.as_ref());
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(matches!(
            check_file(&path),
            Err(FrameError::Truncated {
                frame: 1,
                frames: 2
            })
        ));
    }

    #[test]
    fn part_tokens_are_the_same_for_a_file_and_differ_between_parts_and_files() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(part_token(&a, 1), part_token(&a, 1));
        assert_ne!(part_token(&a, 1), part_token(&a, 2));
        assert_ne!(part_token(&a, 1), part_token(&b, 1));
    }
}
