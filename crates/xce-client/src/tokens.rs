//! User tokens: how a person (through the CLI or the apiserver) proves who they are.
//!
//! A token reads `xce_<id>_<secret>`: the id (16 hex digits) names it in listings and
//! revocations, the secret (64 hex digits, 256 random bits) proves it. The controller keeps
//! only the secret's SHA-256, so neither its state, its snapshots nor its logs can give a
//! token away; `xce token create` makes the secret on the admin's machine and sends only the
//! hash, so the token itself crosses the network only when it is used.

use std::path::{Path, PathBuf};

/// What every token starts with, so that one pasted into the wrong place is recognisable.
pub const PREFIX: &str = "xce_";

/// Hex digits of a token's id.
pub const ID_LEN: usize = 16;

/// Hex digits of a token's secret.
pub const SECRET_LEN: usize = 64;

/// The environment variable the CLI reads its token from.
pub const TOKEN_ENV: &str = "XCE_TOKEN";

/// The SHA-256 of a token's secret: what the controller stores and compares.
pub type SecretHash = [u8; 32];

/// Why a token was not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not an xce token: {0} (a token reads xce_<16 hex digits>_<64 hex digits>)")]
    Malformed(&'static str),
    #[error("token file {path}: {reason}")]
    File { path: PathBuf, reason: String },
}

/// A whole token. Its `Debug` never shows the secret, so a token can sit in a struct that is
/// logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    id: String,
    secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({PREFIX}{}_…)", self.id)
    }
}

impl Token {
    /// A fresh token: a random id and a random 256-bit secret.
    pub fn generate() -> Token {
        let (mut id, mut secret) = ([0u8; ID_LEN / 2], [0u8; SECRET_LEN / 2]);
        crate::random::fill(&mut id);
        crate::random::fill(&mut secret);
        Token {
            id: hex(&id),
            secret: hex(&secret),
        }
    }

    /// Reads a token as a user pasted it (surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let rest = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(TokenError::Malformed("it does not start with xce_"))?;
        let (id, secret) = rest
            .split_once('_')
            .ok_or(TokenError::Malformed("no _ between its id and its secret"))?;
        if !is_id(id) {
            return Err(TokenError::Malformed(
                "its id is not 16 lowercase hex digits",
            ));
        }
        if secret.len() != SECRET_LEN || !is_lower_hex(secret) {
            return Err(TokenError::Malformed(
                "its secret is not 64 lowercase hex digits",
            ));
        }
        Ok(Token {
            id: id.to_string(),
            secret: secret.to_string(),
        })
    }

    /// The id: public, what listings show and revocations name.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret's hash, as the controller stores it.
    pub fn hash(&self) -> SecretHash {
        hash_secret(&self.secret)
    }

    /// The whole token, to hand to its user once.
    pub fn reveal(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }
}

/// Whether `id` is a token id (16 lowercase hex digits).
pub fn is_id(id: &str) -> bool {
    id.len() == ID_LEN && is_lower_hex(id)
}

/// SHA-256 of a secret's text.
pub fn hash_secret(secret: &str) -> SecretHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Whether two hashes are equal, in time that does not depend on where they differ.
pub fn same_hash(a: &SecretHash, b: &SecretHash) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the CLI looks for a token when `XCE_TOKEN` is not set: `xce/token` in the user's
/// config dir (`$XDG_CONFIG_HOME`, else `~/.config`).
pub fn default_token_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("xce").join("token"))
}

/// The caller's token: `XCE_TOKEN` if set, else the token file if it exists, else none.
/// `XCE_TOKEN` empty or `none` means no token at all, not even the file's (to act by a
/// certificate alone). A token file others may read is refused, as ssh refuses such a key:
/// a token is a password.
pub fn load_token() -> Result<Option<Token>, TokenError> {
    if let Some(text) = std::env::var_os(TOKEN_ENV) {
        if text.is_empty() || text == "none" {
            return Ok(None);
        }
        let text = text
            .into_string()
            .map_err(|_| TokenError::Malformed("XCE_TOKEN is not UTF-8"))?;
        return Token::parse(&text).map(Some);
    }
    match default_token_file() {
        Some(path) => read_token_file(&path),
        None => Ok(None),
    }
}

/// Reads a token file; `None` when it does not exist.
pub fn read_token_file(path: &Path) -> Result<Option<Token>, TokenError> {
    let file_error = |reason: String| TokenError::File {
        path: path.to_path_buf(),
        reason,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(file_error(e.to_string())),
    };
    check_private(path).map_err(file_error)?;
    Token::parse(&text)
        .map(Some)
        .map_err(|e| file_error(e.to_string()))
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "readable by others (mode {:o}); chmod 600 it",
            mode & 0o777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_generated_token_reads_back_and_hides_its_secret() {
        let token = Token::generate();
        let text = token.reveal();
        assert_eq!(text.len(), PREFIX.len() + ID_LEN + 1 + SECRET_LEN);
        let back = Token::parse(&format!("  {text}\n")).unwrap();
        assert_eq!(back, token);
        assert_eq!(back.hash(), token.hash());
        let shown = format!("{token:?}");
        assert!(shown.contains(token.id()), "{shown}");
        assert!(!shown.contains(&token.secret), "{shown}");
        assert_ne!(Token::generate(), token);
    }

    #[test]
    fn the_hash_is_sha256_of_the_secret() {
        // SHA-256("abc"), the FIPS 180-2 example.
        let expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(hex(&hash_secret("abc")), expected);
        let (a, b) = (hash_secret("a"), hash_secret("b"));
        assert!(same_hash(&a, &a));
        assert!(!same_hash(&a, &b));
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong() {
        let good = Token::generate().reveal();
        let bad_digit = format!("{}g", &good[..good.len() - 1]);
        for (text, says) in [
            ("", "xce_"),
            ("abc_0123456789abcdef_00", "xce_"),
            ("xce_0123456789abcdef", "no _"),
            ("xce_0123_00", "id"),
            ("xce_0123456789ABCDEF_00", "id"),
            ("xce_0123456789abcdef_00", "secret"),
            (&bad_digit, "secret"),
        ] {
            let err = Token::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_token_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert_eq!(read_token_file(&path).unwrap(), None);
        let token = Token::generate();
        std::fs::write(&path, token.reveal()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_token_file(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token_file(&path).unwrap(), Some(token));
    }

    proptest! {
        /// Parsing never panics, and whatever parses prints back as itself.
        #[test]
        fn parse_is_total_and_round_trips(text in "\\PC{0,100}") {
            if let Ok(token) = Token::parse(&text) {
                prop_assert_eq!(token.reveal(), text.trim());
            }
        }

        #[test]
        fn well_formed_tokens_parse(id in "[0-9a-f]{16}", secret in "[0-9a-f]{64}") {
            let text = format!("xce_{id}_{secret}");
            let token = Token::parse(&text).unwrap();
            prop_assert_eq!(token.id(), id.as_str());
            prop_assert_eq!(token.reveal(), text);
        }
    }
}
