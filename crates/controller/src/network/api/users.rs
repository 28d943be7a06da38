//! Users' tokens: a person's connection proving who it is, and an admin managing tokens.

use tracing::{debug, info};
use xce_client::tokens::{SecretHash, Token};
use xce_client::types::{Principal, Role};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::{header_of, ControllerService};
use crate::network::session::Session;
use crate::state::Command;

pub(super) async fn authenticate(
    this: &ControllerService,
    params: controller::AuthenticateParams,
    mut results: controller::AuthenticateResults,
) -> Result<(), capnp::Error> {
    let text = params.get()?.get_token()?.to_str()?.to_string();
    // Bound first: no borrow of the session may live across the await below.
    let allowed = this.session.borrow().may_authenticate();
    let proved = match allowed {
        Err(refused) => Err(refused),
        Ok(()) => match this.node.admit().await {
            Err(not_primary) => Err(not_primary),
            Ok(()) => prove(this, &text),
        },
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&proved));
    if let Ok((user, role)) = proved {
        r.set_user(user.as_str());
        r.set_role(role.into());
    }
    Ok(())
}

/// Checks a presented token and, when it holds, gives the session its user and role.
fn prove(this: &ControllerService, text: &str) -> Result<(String, Role), ReplyHeader> {
    let (token, who) = principal_of(this, text, "authenticate")?;
    let answer = (who.user.clone(), who.role);
    this.session
        .borrow_mut()
        .authenticated(token.id(), token.hash(), who);
    Ok(answer)
}

/// The person a presented token proves, answering `auth` (for `method`) when it proves no one.
fn principal_of(
    this: &ControllerService,
    text: &str,
    method: &str,
) -> Result<(Token, Principal), ReplyHeader> {
    let auth = |why: String| ReplyHeader::status(Status::Auth, format!("{method}: {why}"));
    let token = Token::parse(text).map_err(|e| auth(e.to_string()))?;
    let who = this
        .node
        .authenticate(token.id(), &token.hash())
        .map_err(auth)?;
    // A token is a person's; one that names a daemon's role (never created so, but state
    // may come from a snapshot) proves nothing.
    if !crate::network::session::is_person(who.role) {
        return Err(auth(format!(
            "token {} names a {} role",
            token.id(),
            who.role
        )));
    }
    debug!(user = %who.user, role = %who.role, token = token.id(), "{method}");
    Ok((token, who))
}

/// The apiserver acts for the person a token names: a capability of its own, on this
/// connection, whose session is that person's.
pub(super) async fn act_as(
    this: &ControllerService,
    params: controller::ActAsParams,
    mut results: controller::ActAsResults,
) -> Result<(), capnp::Error> {
    let text = params.get()?.get_token()?.to_str()?.to_string();
    let acting = match this.node.admit().await {
        Err(not_primary) => Err(not_primary),
        Ok(()) => session_for(this, &text),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&acting));
    if let Ok(session) = acting {
        r.set_user(session.user.as_deref().unwrap_or(""));
        r.set_role(session.role.into());
        r.set_controller(capnp_rpc::new_client(this.acting_as(session)));
    }
    Ok(())
}

/// The session of the person `text` names, for [`act_as`]. It keeps the apiserver's
/// certificate, so it can neither join as anything else nor take another token.
fn session_for(this: &ControllerService, text: &str) -> Result<Session, ReplyHeader> {
    let certified = this.session.borrow().certified.clone();
    if text.is_empty() {
        // Authentication is off: anyone could join as an operator; say so rather than
        // pretend a user was proven.
        return match certified {
            None => Ok(Session {
                role: Role::Operator,
                ..Session::default()
            }),
            Some(_) => Err(ReplyHeader::status(
                Status::Auth,
                "actAs: no token: with authentication on every request names its person",
            )),
        };
    }
    let (token, who) = principal_of(this, text, "actAs")?;
    let mut session = Session::new(certified);
    session.authenticated(token.id(), token.hash(), who);
    Ok(session)
}

pub(super) async fn create_token(
    this: &ControllerService,
    params: controller::CreateTokenParams,
    mut results: controller::CreateTokenResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let hash: Result<SecretHash, _> = p.get_secret_hash()?.try_into();
    let header = match hash {
        Err(_) => ReplyHeader::status(
            Status::Invalid,
            format!(
                "secretHash: {} bytes, a SHA-256 is 32",
                p.get_secret_hash()?.len()
            ),
        ),
        Ok(hash) => {
            let (id, user) = (p.get_id()?.to_str()?, p.get_user()?.to_str()?);
            let role: Role = p.get_role()?.into();
            let cmd = Command::CreateToken {
                token: wire::read_token(p.get_token()?),
                id: id.to_string(),
                user: user.to_string(),
                role,
                hash,
                expires_in_ms: Some(p.get_expires_in_ms()).filter(|ms| *ms > 0),
            };
            let header = this.write_for_header(cmd).await;
            if header.status == Status::Ok {
                info!(token = id, user, %role, by = ?this.caller(), "token created");
            }
            header
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn list_tokens(
    this: &ControllerService,
    _params: controller::ListTokensParams,
    mut results: controller::ListTokensResults,
) -> Result<(), capnp::Error> {
    let tokens = this.node.read(|s| s.tokens()).await;
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&tokens));
    if let Ok(tokens) = tokens {
        let mut list = r.init_tokens(tokens.len() as u32);
        for (i, t) in tokens.iter().enumerate() {
            wire::write_token_info(list.reborrow().get(i as u32), t);
        }
    }
    Ok(())
}

pub(super) async fn revoke_token(
    this: &ControllerService,
    params: controller::RevokeTokenParams,
    mut results: controller::RevokeTokenResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let id = p.get_id()?.to_str()?;
    let cmd = Command::RevokeToken {
        token: wire::read_token(p.get_token()?),
        id: id.to_string(),
    };
    let header = this.write_for_header(cmd).await;
    if header.status == Status::Ok {
        info!(token = id, by = ?this.caller(), "token revoked");
    }
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
