//! Users' tokens: created and revoked by admins, checked on every call of a connection they
//! authenticated. Only each secret's SHA-256 is kept (see `xce_client::tokens`).

use xce_client::tokens::{same_hash, SecretHash};
use xce_client::types::{Principal, Role, TokenInfo};
use xce_proto::Status;

use super::{Outcome, State};

/// Most tokens a cluster holds: far above any site's users, and a bound on the state an admin
/// (or a leaked admin token) can grow.
pub const MAX_TOKENS: usize = 10_000;

/// Longest a token may be valid for: ten years.
pub const MAX_TOKEN_TTL_MS: u64 = 10 * 366 * 24 * 3600 * 1000;

/// The roles a token may carry: a person's. A daemon proves itself with a certificate.
pub const TOKEN_ROLES: [Role; 3] = [Role::User, Role::Operator, Role::Admin];

/// One token as the state keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserToken {
    pub user: String,
    pub role: Role,
    pub hash: SecretHash,
    pub created_ms: u64,
    /// `None`: it never expires.
    pub expires_ms: Option<u64>,
}

impl UserToken {
    /// `Err` with why, when the token no longer proves anything at `now_ms`.
    fn usable(&self, id: &str, now_ms: u64) -> Result<Principal, String> {
        match self.expires_ms {
            Some(at) if now_ms >= at => Err(format!("token {id} expired")),
            _ => Ok(Principal {
                user: self.user.clone(),
                role: self.role,
            }),
        }
    }
}

impl State {
    pub(super) fn create_token(&mut self, at_ms: u64, id: String, token: UserToken) -> Outcome {
        // Admission checked these; a log entry that was never admitted is refused here too.
        if let Err(why) = check_token(&id, &token) {
            return Outcome::rejected(Status::Invalid, why);
        }
        if self.user_tokens.contains_key(&id) {
            return Outcome::rejected(Status::Conflict, format!("token {id} exists"));
        }
        // Expired tokens prove nothing: they go before they could crowd out new ones.
        self.user_tokens
            .retain(|_, t| t.expires_ms.is_none_or(|at| at > at_ms));
        if self.user_tokens.len() >= MAX_TOKENS {
            return Outcome::rejected(
                Status::Invalid,
                format!("the cluster holds {MAX_TOKENS} tokens, its most: revoke some first"),
            );
        }
        self.user_tokens.insert(id, token);
        Outcome::Done
    }

    pub(super) fn revoke_token(&mut self, id: &str) -> Outcome {
        match self.user_tokens.remove(id) {
            Some(_) => Outcome::Done,
            None => Outcome::rejected(Status::NoEnt, format!("token {id}: no such token")),
        }
    }

    /// Who a presented token (its id and its secret's hash) proves the caller to be.
    pub fn authenticate(
        &self,
        id: &str,
        hash: &SecretHash,
        now_ms: u64,
    ) -> Result<Principal, String> {
        match self.user_tokens.get(id) {
            Some(t) if same_hash(&t.hash, hash) => t.usable(id, now_ms),
            // One answer for an unknown id and a wrong secret: neither tells a guesser more.
            _ => Err("no such token (or a wrong secret)".to_string()),
        }
    }

    /// Whether the token a connection authenticated with still proves its caller.
    pub fn token_still_valid(
        &self,
        id: &str,
        hash: &SecretHash,
        now_ms: u64,
    ) -> Result<(), String> {
        match self.user_tokens.get(id) {
            Some(t) if same_hash(&t.hash, hash) => t.usable(id, now_ms).map(|_| ()),
            _ => Err(format!("token {id} was revoked")),
        }
    }

    /// Every token, by id, without secrets.
    pub fn tokens(&self) -> Vec<TokenInfo> {
        self.user_tokens
            .iter()
            .map(|(id, t)| TokenInfo {
                id: id.clone(),
                user: t.user.clone(),
                role: t.role,
                created_ms: t.created_ms,
                expires_ms: t.expires_ms,
            })
            .collect()
    }
}

/// What a stored token must be: a well-formed id, a valid user name and a person's role.
pub(super) fn check_token(id: &str, token: &UserToken) -> Result<(), String> {
    if !xce_client::tokens::is_id(id) {
        return Err("token id: not 16 hex digits".to_string());
    }
    validate_user_name(&token.user)?;
    if !TOKEN_ROLES.contains(&token.role) {
        return Err(format!("role: a token cannot carry role {}", token.role));
    }
    Ok(())
}

/// A user name as tokens and jobs carry it: what a Unix account name may be.
pub fn validate_user_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && super::validate::name_chars_ok(name);
    if valid {
        Ok(())
    } else {
        Err(format!(
            "user: {name:?} must be 1 to 64 letters, digits, '-', '_' or '.', not starting with '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use xce_client::tokens::Token;
    use xce_client::types::RequestToken;

    use super::*;
    use crate::state::Command;

    fn create(token: &Token, user: &str, role: Role, ttl: Option<u64>, n: u128) -> Command {
        Command::CreateToken {
            token: RequestToken(n),
            id: token.id().to_string(),
            user: user.into(),
            role,
            hash: token.hash(),
            expires_in_ms: ttl,
        }
    }

    #[test]
    fn a_token_proves_its_user_until_revoked() {
        let mut s = State::default();
        let alice = Token::generate();
        assert_eq!(
            s.apply(1_000, create(&alice, "alice", Role::User, None, 1)),
            Outcome::Done
        );
        let who = s.authenticate(alice.id(), &alice.hash(), 2_000).unwrap();
        assert_eq!(
            who,
            Principal {
                user: "alice".into(),
                role: Role::User
            }
        );
        assert_eq!(
            s.token_still_valid(alice.id(), &alice.hash(), 2_000),
            Ok(())
        );
        // A wrong secret and an unknown id answer alike.
        let other = Token::generate();
        let wrong = s
            .authenticate(alice.id(), &other.hash(), 2_000)
            .unwrap_err();
        assert_eq!(
            s.authenticate(other.id(), &other.hash(), 2_000)
                .unwrap_err(),
            wrong
        );
        // Listed without its secret.
        let listed = s.tokens();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].id.as_str(), listed[0].created_ms),
            (alice.id(), 1_000)
        );
        let revoke = Command::RevokeToken {
            token: RequestToken(2),
            id: alice.id().into(),
        };
        assert_eq!(s.apply(3_000, revoke), Outcome::Done);
        assert!(s.authenticate(alice.id(), &alice.hash(), 3_000).is_err());
        let gone = s
            .token_still_valid(alice.id(), &alice.hash(), 3_000)
            .unwrap_err();
        assert!(gone.contains("revoked"), "{gone}");
        let again = Command::RevokeToken {
            token: RequestToken(3),
            id: alice.id().into(),
        };
        assert!(matches!(
            s.apply(3_000, again),
            Outcome::Rejected {
                status: Status::NoEnt,
                ..
            }
        ));
        // A new token under the revoked id does not bring the old one back.
        let mut revived = create(&other, "mallory", Role::Admin, None, 4);
        if let Command::CreateToken { id, .. } = &mut revived {
            *id = alice.id().to_string();
        }
        assert_eq!(s.apply(3_500, revived), Outcome::Done);
        assert!(s
            .token_still_valid(alice.id(), &alice.hash(), 3_500)
            .is_err());
    }

    #[test]
    fn a_token_expires_at_its_time_on_every_replica() {
        let mut s = State::default();
        let t = Token::generate();
        s.apply(10_000, create(&t, "bob", Role::Operator, Some(500), 1));
        assert_eq!(s.tokens()[0].expires_ms, Some(10_500));
        assert!(s.authenticate(t.id(), &t.hash(), 10_499).is_ok());
        let expired = s.authenticate(t.id(), &t.hash(), 10_500).unwrap_err();
        assert!(expired.contains("expired"), "{expired}");
        assert!(s.token_still_valid(t.id(), &t.hash(), 10_500).is_err());
        // Once expired, it goes at the next creation.
        s.apply(
            10_600,
            create(&Token::generate(), "carol", Role::User, None, 2),
        );
        assert_eq!(s.tokens().len(), 1);
        assert_eq!(s.tokens()[0].user, "carol");
    }

    #[test]
    fn ids_are_unique_and_the_count_is_bounded() {
        let mut s = State::default();
        let t = Token::generate();
        s.apply(1, create(&t, "a", Role::User, None, 1));
        let taken = s.apply(1, create(&t, "b", Role::Admin, None, 2));
        assert!(
            matches!(
                taken,
                Outcome::Rejected {
                    status: Status::Conflict,
                    ..
                }
            ),
            "{taken:?}"
        );
        assert_eq!(s.tokens()[0].user, "a");
        for n in 1..MAX_TOKENS {
            s.apply(
                1,
                create(&Token::generate(), "u", Role::User, None, 10 + n as u128),
            );
        }
        assert_eq!(s.tokens().len(), MAX_TOKENS);
        let full = s.apply(
            1,
            create(&Token::generate(), "u", Role::User, None, 1 << 64),
        );
        assert!(
            matches!(
                full,
                Outcome::Rejected {
                    status: Status::Invalid,
                    ..
                }
            ),
            "{full:?}"
        );
    }

    #[test]
    fn user_names_are_account_names() {
        for good in ["alice", "a.b-c_d", "u1"] {
            assert_eq!(validate_user_name(good), Ok(()));
        }
        for bad in ["", "-x", "a b", "root;", &"x".repeat(65), "ü"] {
            assert!(validate_user_name(bad).is_err(), "{bad:?}");
        }
    }
}
