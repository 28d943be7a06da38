//! Users' tokens: proving who calls (`authenticate`, which the client sends on every new
//! connection when its config has a token, see `ClientConfig::token`), and an admin's
//! management of them.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::tokens::Token;
use crate::types::{Principal, RequestToken, Role, TokenInfo};
use crate::wire;

/// Proves the connection's caller with a token; answers who it names.
#[derive(Debug, Clone)]
pub struct Authenticate {
    pub token: Token,
}

impl Op for Authenticate {
    type Output = Principal;
    // It changes only the connection's session: sending it twice is harmless.
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "authenticate";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Principal>, capnp::Error>> {
        async move {
            let mut req = client.authenticate_request();
            req.get().set_token(self.token.reveal().as_str());
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(Principal {
                    user: wire::text(r.get_user()?)?,
                    role: r.get_role()?.into(),
                })
            })
        }
        .boxed_local()
    }
}

/// An admin registers a new token: only its id and its secret's hash leave the caller.
#[derive(Debug, Clone)]
pub struct CreateToken {
    pub token: RequestToken,
    pub id: String,
    pub user: String,
    pub role: Role,
    pub secret_hash: crate::tokens::SecretHash,
    /// `None`: it never expires.
    pub expires_in: Option<std::time::Duration>,
}

impl Op for CreateToken {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "createToken";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.create_token_request();
            let mut p = req.get();
            wire::write_token(p.reborrow().init_token(), self.token);
            p.set_id(self.id.as_str());
            p.set_user(self.user.as_str());
            p.set_role(self.role.into());
            p.set_secret_hash(&self.secret_hash);
            let ms = self.expires_in.map_or(0, |d| d.as_millis().max(1));
            p.set_expires_in_ms(u64::try_from(ms).unwrap_or(u64::MAX));
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// Every token, without secrets (admins only).
#[derive(Debug, Clone, Default)]
pub struct ListTokens;

impl Op for ListTokens {
    type Output = Vec<TokenInfo>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listTokens";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<TokenInfo>>, capnp::Error>> {
        async move {
            let resp = client.list_tokens_request().send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                read_list(r.get_tokens()?, wire::read_token_info)
            })
        }
        .boxed_local()
    }
}

/// Revokes a token by its id: every connection it authenticated is refused from its next call.
#[derive(Debug, Clone)]
pub struct RevokeToken {
    pub token: RequestToken,
    pub id: String,
}

impl Op for RevokeToken {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "revokeToken";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.revoke_token_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_id(self.id.as_str());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
