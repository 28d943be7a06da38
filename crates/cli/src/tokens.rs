//! `xce token create|list|revoke`: an admin's management of users' tokens. The secret is made
//! here and printed once; the cluster only ever receives its SHA-256.

use std::time::Duration;

use xce_client::ops::{CreateToken, ListTokens, RevokeToken};
use xce_client::tokens::{is_id, Token};
use xce_client::types::{RequestToken, Role};

use crate::commands::{check, client, remember};
use crate::output::{self, fail};
use crate::{Cli, Format};

/// `xce token ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a token for a user and print it (alone on stdout; -o json: {"token": ...}). It is
    /// shown only this once: the cluster keeps only its hash.
    Create(CreateArgs),
    /// List every token (never their secrets).
    List,
    /// Revoke a token by its id (or the token itself): every connection it authenticated is
    /// refused from its next call.
    Revoke {
        /// The token's id, as `xce token list` shows it, or the whole token.
        id: String,
    },
}

/// `xce token create` options.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Whose token it is: jobs submitted with it are this user's.
    #[arg(long)]
    user: String,
    /// What it may do: user (their own jobs), operator (all jobs, queues and hosts) or admin
    /// (also tokens).
    #[arg(long, default_value = "user", value_parser = parse_role)]
    role: Role,
    /// How long it is valid: a number with a unit, s, m, h or d (90d, 12h); it never
    /// expires by default.
    #[arg(long, value_parser = parse_lifetime)]
    expires: Option<Duration>,
}

/// Runs one `xce token` command; returns the exit code.
pub async fn run(cli: &Cli, cmd: &TokenCommand) -> i32 {
    let f = cli.output;
    let (c, hint) = client(cli);
    match cmd {
        TokenCommand::Create(args) => {
            let token = Token::generate();
            let op = CreateToken {
                token: RequestToken::random(),
                id: token.id().to_string(),
                user: args.user.clone(),
                role: args.role,
                secret_hash: token.hash(),
                expires_in: args.expires,
            };
            check(f, c.call(op).await);
            match f {
                Format::Json => println!("{}", serde_json::json!({ "token": token.reveal() })),
                Format::Text => println!("{}", token.reveal()),
            }
        }
        TokenCommand::List => output::tokens(f, &check(f, c.call(ListTokens).await)),
        TokenCommand::Revoke { id } => {
            let id = id_of(id).unwrap_or_else(|e| fail(f, "invalid", &e));
            let op = RevokeToken {
                token: RequestToken::random(),
                id: id.clone(),
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Token <{id}> is revoked."));
        }
    }
    remember(&c, &hint);
    0
}

/// The id a revocation names: an id as listed, or the id inside a whole token.
fn id_of(given: &str) -> Result<String, String> {
    if is_id(given) {
        return Ok(given.to_string());
    }
    Token::parse(given)
        .map(|t| t.id().to_string())
        .map_err(|e| format!("{given:?} is neither a token id (16 hex digits) nor a token: {e}"))
}

/// A person's role: what a token may carry.
fn parse_role(s: &str) -> Result<Role, String> {
    match s.parse::<Role>() {
        Ok(role @ (Role::User | Role::Operator | Role::Admin)) => Ok(role),
        Ok(other) => Err(format!(
            "{other} is not a person's role (daemons and login hosts prove themselves with certificates); a token is for user, operator or admin"
        )),
        Err(_) => Err(format!("{s:?}: expected user, operator or admin")),
    }
}

/// `90d`, `12h`, `30m`, `45s`: a positive whole number and a unit.
fn parse_lifetime(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: expected a number and a unit, s, m, h or d (90d, 12h)");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => return Err(bad()),
    }
    .ok_or_else(|| format!("{s:?}: too long"))?;
    if seconds == 0 {
        return Err(format!("{s:?}: a token must be valid for some time"));
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_a_number_and_a_unit() {
        assert_eq!(parse_lifetime("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_lifetime("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_lifetime("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_lifetime("45s"), Ok(Duration::from_secs(45)));
        for bad in [
            "",
            "d",
            "12",
            "1w",
            "-1d",
            "1.5h",
            "0s",
            "99999999999999999999d",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_persons_role_goes_in_a_token() {
        assert_eq!(parse_role("operator"), Ok(Role::Operator));
        let daemon = parse_role("worker").unwrap_err();
        assert!(daemon.contains("certificate"), "{daemon}");
        assert!(parse_role("root").unwrap_err().contains("\"root\""));
    }

    #[test]
    fn a_revocation_names_an_id_or_a_whole_token() {
        let token = Token::generate();
        assert_eq!(id_of(token.id()), Ok(token.id().to_string()));
        assert_eq!(id_of(&token.reveal()), Ok(token.id().to_string()));
        assert!(id_of("nope").unwrap_err().contains("\"nope\""));
    }
}
