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
    /// A worker that admits by its own resources, holding starts that do not fit until room
    /// frees: jobs may be dispatched to it ahead of its free slots. False for other roles.
    pub queues_starts: bool,
}

/// The primary's answer to a join.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Joined {
    /// What a worker must do with the attempts it holds.
    pub orders: Vec<JobOrder>,
    /// How long after its last heartbeat the primary declares a worker's jobs lost; `None`
    /// when the primary did not say.
    pub lost_after: Option<std::time::Duration>,
    /// The number of the agent capability this join passed (0 without one): the primary's
    /// pushes come through it now ([`AgentHandle::capability`]).
    pub agent_generation: u64,
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
            let mut agent_generation = 0;
            if let Some(agent) = &self.agent {
                let (capability, generation) = agent.capability();
                req.get().set_agent(capability);
                agent_generation = generation;
            }
            req.get().set_queues_starts(self.queues_starts);
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
                    agent_generation,
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
                queues_starts: false,
            };
            c.call(join).await.map(|_| ())
        })
    }));
}

/// An op made for the person a user token names: the apiserver's way to act for its callers.
/// `actAs` and the op go out together, the op pipelined on the capability `actAs` returns,
/// so acting for someone costs no round trip. The capability is then kept for the
/// connection ([`acting`]), so later ops for the same token are one call, not two calls and
/// a release. An empty token (authentication off) acts as an operator with no user.
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
            if let Some(capability) = acting::get(&client, &self.token) {
                let done = self.op.send(capability).await;
                if !acting::still_good(&done) {
                    acting::forget(&self.token);
                }
                return done;
            }
            let mut req = client.act_as_request();
            req.get().set_token(&*self.token);
            let acting = req.send();
            let op = self.op.send(acting.pipeline.get_controller());
            let (acted, done) = futures::future::join(acting.promise, op).await;
            let acted = acted?;
            let acted = acted.get()?;
            // Refused (no such token, not the primary, ...): that answer is the op's; the
            // op itself failed on a capability that never came.
            let header = wire::read_header(acted.get_header()?)?;
            if header.status != xce_proto::Status::Ok {
                return Ok(Reply {
                    header,
                    value: None,
                });
            }
            if acting::still_good(&done) {
                acting::keep(&client, self.token, acted.get_controller()?);
            }
            done
        }
        .boxed_local()
    }
}

/// The capabilities `actAs` returned on this thread's connection, by token. capnp
/// capabilities are `!Send` and live on their connection's thread, so they are kept there.
/// An entry holds the connection's bootstrap capability too: it is found only through the
/// connection it was made on, and holding it keeps that identity from being reused.
///
/// Every call on a kept capability is still checked by the controller as it would be
/// through `actAs`: the primary gate first, then the token (a session `actAs` made
/// re-checks it on every call), so keeping it changes the cost of a call, not its answer.
/// An answer that says the token or the primary no longer holds drops the entry. This
/// needs controllers that re-check such sessions: upgrade them before the apiserver.
mod acting {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::Arc;

    use xce_proto::xce_capnp::controller;
    use xce_proto::Status;

    use crate::ops::Reply;

    /// Tokens kept per connection thread; past it the oldest half is dropped (released).
    pub const MAX_KEPT: usize = 1024;

    struct Kept {
        bootstrap: controller::Client,
        capability: controller::Client,
        used: u64,
    }

    #[derive(Default)]
    struct Cache {
        kept: HashMap<Arc<str>, Kept>,
        clock: u64,
    }

    impl Cache {
        /// Takes out the least recently used half, for the caller to drop.
        fn evict_older_half(&mut self) -> Vec<(Arc<str>, Kept)> {
            let mut ages: Vec<u64> = self.kept.values().map(|k| k.used).collect();
            ages.sort_unstable();
            let Some(&cut) = ages.get(ages.len() / 2) else {
                return Vec::new();
            };
            let old: Vec<Arc<str>> = (self.kept.iter())
                .filter(|(_, k)| k.used <= cut)
                .map(|(token, _)| token.clone())
                .collect();
            old.iter()
                .filter_map(|token| self.kept.remove_entry(token))
                .collect()
        }
    }

    thread_local! {
        static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
    }

    fn same(a: &controller::Client, b: &controller::Client) -> bool {
        a.client.hook.get_ptr() == b.client.hook.get_ptr()
    }

    /// The capability kept for `token` on the connection `bootstrap` belongs to.
    pub fn get(bootstrap: &controller::Client, token: &Arc<str>) -> Option<controller::Client> {
        CACHE.with_borrow_mut(|cache| {
            cache.clock += 1;
            let now = cache.clock;
            let kept = cache.kept.get_mut(token)?;
            if !same(&kept.bootstrap, bootstrap) {
                return None;
            }
            kept.used = now;
            Some(kept.capability.clone())
        })
    }

    /// Keeps `capability` for `token` on `bootstrap`'s connection.
    pub fn keep(bootstrap: &controller::Client, token: Arc<str>, capability: controller::Client) {
        // What is dropped is dropped outside the borrow: a release runs RPC system code.
        let _dropped = CACHE.with_borrow_mut(|cache| {
            let mut dropped = Vec::new();
            if cache.kept.len() >= MAX_KEPT && !cache.kept.contains_key(&token) {
                dropped = cache.evict_older_half();
            }
            cache.clock += 1;
            let kept = Kept {
                bootstrap: bootstrap.clone(),
                capability,
                used: cache.clock,
            };
            dropped.extend(cache.kept.insert(token.clone(), kept).map(|k| (token, k)));
            dropped
        });
    }

    /// Drops what is kept for `token`.
    pub fn forget(token: &Arc<str>) {
        // Dropped outside the borrow: a release may run code of the RPC system.
        let _gone = CACHE.with_borrow_mut(|cache| cache.kept.remove(token));
    }

    /// Whether a capability that gave this answer is still worth keeping: not when the call
    /// failed, the token no longer holds or the node is no longer the ready primary.
    pub fn still_good<T>(done: &Result<Reply<T>, capnp::Error>) -> bool {
        match done {
            Err(_) => false,
            Ok(reply) => !matches!(
                reply.header.status,
                Status::Auth
                    | Status::Redirect
                    | Status::Standby
                    | Status::NoMaster
                    | Status::NotReady
            ),
        }
    }

    /// How many capabilities this thread keeps (for tests).
    #[cfg(test)]
    pub fn kept() -> usize {
        CACHE.with_borrow(|cache| cache.kept.len())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;

    use capnp::capability::Rc as CapRc;
    use xce_proto::xce_capnp::controller;
    use xce_proto::Status;

    use super::{acting, ActAs};
    use crate::ops::{ListQueues, Op};
    use crate::wire::{self, ReplyHeader};

    /// Counts `actAs` and the calls made on what it returned, and answers those with
    /// `answer` (set by the test).
    #[derive(Default)]
    struct Counts {
        act_as: Cell<u32>,
        acted: Cell<u32>,
        answer: Cell<Option<Status>>,
    }

    struct Primary(Rc<Counts>);
    struct Acting(Rc<Counts>);

    impl controller::Server for Primary {
        async fn act_as(
            self: CapRc<Self>,
            _: controller::ActAsParams,
            mut results: controller::ActAsResults,
        ) -> Result<(), capnp::Error> {
            self.0.act_as.set(self.0.act_as.get() + 1);
            let mut r = results.get();
            wire::write_header(r.reborrow().init_header(), &ReplyHeader::ok());
            r.set_controller(capnp_rpc::new_client(Acting(self.0.clone())));
            Ok(())
        }
    }

    impl controller::Server for Acting {
        async fn list_queues(
            self: CapRc<Self>,
            _: controller::ListQueuesParams,
            mut results: controller::ListQueuesResults,
        ) -> Result<(), capnp::Error> {
            self.0.acted.set(self.0.acted.get() + 1);
            let header = match self.0.answer.get() {
                None => ReplyHeader::ok(),
                Some(status) => ReplyHeader::status(status, "as the test says"),
            };
            let mut r = results.get();
            wire::write_header(r.reborrow().init_header(), &header);
            r.init_queues(0);
            Ok(())
        }
    }

    async fn list(bootstrap: &controller::Client, token: &Arc<str>) -> Status {
        let op = ActAs {
            token: token.clone(),
            op: ListQueues,
        };
        op.send(bootstrap.clone()).await.unwrap().header.status
    }

    /// The second call for a token goes straight to the capability the first one's `actAs`
    /// returned; an answer that the token no longer holds drops it, so the next call asks
    /// `actAs` again; and another connection never reuses it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_token_s_capability_is_kept_per_connection_until_it_is_refused() {
        let counts = Rc::new(Counts::default());
        let bootstrap: controller::Client = capnp_rpc::new_client(Primary(counts.clone()));
        let alice: Arc<str> = "alice-token".into();
        for _ in 0..3 {
            assert_eq!(list(&bootstrap, &alice).await, Status::Ok);
        }
        assert_eq!((counts.act_as.get(), counts.acted.get()), (1, 3));
        assert_eq!(acting::kept(), 1);

        counts.answer.set(Some(Status::Auth));
        assert_eq!(list(&bootstrap, &alice).await, Status::Auth);
        assert_eq!(acting::kept(), 0, "a refused token's capability is dropped");
        counts.answer.set(Some(Status::NoEnt));
        assert_eq!(list(&bootstrap, &alice).await, Status::NoEnt);
        assert_eq!(counts.act_as.get(), 2, "asked again after the refusal");
        assert_eq!(acting::kept(), 1, "a domain error keeps it");

        let other: controller::Client = capnp_rpc::new_client(Primary(counts.clone()));
        counts.answer.set(None);
        assert_eq!(list(&other, &alice).await, Status::Ok);
        assert_eq!(
            counts.act_as.get(),
            3,
            "another connection asks for its own"
        );
        assert_eq!(list(&other, &alice).await, Status::Ok);
        assert_eq!(counts.act_as.get(), 3);
    }

    /// Past [`acting::MAX_KEPT`] tokens the least recently used half goes, and the one in
    /// use stays.
    #[tokio::test(flavor = "current_thread")]
    async fn past_the_limit_the_least_recently_used_tokens_go() {
        let counts = Rc::new(Counts::default());
        let bootstrap: controller::Client = capnp_rpc::new_client(Primary(counts.clone()));
        let busy: Arc<str> = "busy".into();
        for i in 0..acting::MAX_KEPT {
            list(&bootstrap, &busy).await;
            list(&bootstrap, &Arc::from(format!("token-{i}"))).await;
        }
        assert!(acting::kept() <= acting::MAX_KEPT);
        assert!(acting::kept() > acting::MAX_KEPT / 4, "{}", acting::kept());
        let before = counts.act_as.get();
        list(&bootstrap, &busy).await;
        assert_eq!(
            counts.act_as.get(),
            before,
            "the busiest token is still kept"
        );
    }
}
