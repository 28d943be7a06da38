//! Joining: the call that sets a connection's session (its role, and a worker's host).

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{read_list, reply, Op, OpKind, Reply};
use crate::agent::AgentHandle;
use crate::connection::LocalFuture;
use crate::types::{HeldJob, HostAttributes, JobOrder, RequestToken, Role};
use crate::wire;

/// A daemon announces itself; a worker registers its host and agent.
#[derive(Debug, Clone)]
pub struct Join {
    pub token: RequestToken,
    pub role: Role,
    pub host: HostAttributes,
    pub agent: Option<AgentHandle>,
    /// The attempts a worker holds (resync); empty for other roles.
    pub held: Vec<HeldJob>,
}

/// The primary's answer to a join.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Joined {
    /// What a worker must do with the attempts it holds.
    pub orders: Vec<JobOrder>,
    /// How long after its last heartbeat the primary declares a worker's jobs lost; `None`
    /// when the primary did not say.
    pub lost_after: Option<std::time::Duration>,
}

impl Op for Join {
    type Output = Joined;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "join";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Joined>, capnp::Error>> {
        async move {
            let mut req = client.join_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_role(self.role.into());
            wire::write_attributes(req.get().init_host(), &self.host);
            if let Some(agent) = &self.agent {
                req.get().set_agent(agent.capability());
            }
            let mut held = req.get().init_held(self.held.len() as u32);
            for (i, h) in self.held.iter().enumerate() {
                wire::write_held(held.reborrow().get(i as u32), h);
            }
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(Joined {
                    orders: read_list(r.get_orders()?, wire::read_order)?,
                    lost_after: Some(r.get_lost_after_ms())
                        .filter(|ms| *ms > 0)
                        .map(std::time::Duration::from_millis),
                })
            })
        }
        .boxed_local()
    }
}

/// Claims `role` on every connection `client` opens: registers a rejoin that joins with that
/// role before any call goes out on a new connection, so the session of each connection the
/// client uses holds it. Until certificates make roles provable (security issue) this is how
/// the CLI's operator commands, a scheduler or a test say who they are.
pub fn claim_role<T: crate::transport::Transport>(client: &crate::Client<T>, role: Role) {
    client.set_rejoin(std::sync::Arc::new(move |c: crate::Client<T>| {
        Box::pin(async move {
            let join = Join {
                token: RequestToken::random(),
                role,
                host: HostAttributes::default(),
                agent: None,
                held: Vec::new(),
            };
            c.call(join).await.map(|_| ())
        })
    }));
}

/// An op made for the person a user token names: the apiserver's way to act for its callers.
/// `actAs` and the op go out together, the op pipelined on the capability `actAs` returns,
/// so acting for someone costs no round trip. An empty token (authentication off) acts as an
/// operator with no user.
#[derive(Debug, Clone)]
pub struct ActAs<O> {
    pub token: std::sync::Arc<str>,
    pub op: O,
}

impl<O: Op> Op for ActAs<O> {
    type Output = O::Output;
    const KIND: OpKind = O::KIND;
    const NAME: &'static str = O::NAME;
    /// Acting for someone, the answer is still the cluster's: an apiserver learns new
    /// controllers from the cluster info it reads for its callers.
    fn candidates_of(output: &O::Output) -> Option<Vec<crate::Candidate>> {
        O::candidates_of(output)
    }
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<O::Output>, capnp::Error>> {
        async move {
            let mut req = client.act_as_request();
            req.get().set_token(&*self.token);
            let acting = req.send();
            let op = self.op.send(acting.pipeline.get_controller());
            let (acted, done) = futures::future::join(acting.promise, op).await;
            // Refused (no such token, not the primary, ...): that answer is the op's; the
            // op itself failed on a capability that never came.
            let header = wire::read_header(acted?.get()?.get_header()?)?;
            if header.status != xce_proto::Status::Ok {
                return Ok(Reply {
                    header,
                    value: None,
                });
            }
            done
        }
        .boxed_local()
    }
}
