//! The failover engine against a scripted in-memory transport, on tokio's paused clock: no
//! sockets and no real sleeps, so every rule of DESIGN §3 and §5 is checked exactly.

use std::any::Any;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::candidates::parse_candidates;
use crate::connection::LocalFuture;
use crate::ops::{OpKind, Reply, Submit};
use crate::types::{JobSpec, RequestToken};
use crate::wire::ReplyHeader;

/// What a scripted controller does with one call.
#[derive(Debug, Clone)]
enum Answer {
    Reply(Status, Option<u64>),
    Redirect(&'static str, u16),
    /// A redirect naming the primary, at the answering node's address for it.
    RedirectNamed(&'static str, &'static str, u16),
    /// The connection breaks before a reply arrives.
    Broken,
    /// The reply comes only after this long (a hung node).
    After(Duration, u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Connect(String, bool),
    Call(String, &'static str),
}

#[derive(Clone)]
struct FakeConn {
    id: u64,
    addr: String,
    closed: Arc<AtomicBool>,
}

/// A scripted set of controllers, keyed by address.
#[derive(Default)]
struct Fake {
    scripts: Mutex<HashMap<String, VecDeque<Answer>>>,
    defaults: Mutex<HashMap<String, Answer>>,
    down: Mutex<HashSet<String>>,
    events: Mutex<Vec<Event>>,
    next_id: AtomicU64,
}

impl Fake {
    fn script(&self, addr: &str, answers: &[Answer]) {
        lock(&self.scripts)
            .entry(addr.into())
            .or_default()
            .extend(answers.iter().cloned());
    }
    fn always(&self, addr: &str, answer: Answer) {
        lock(&self.defaults).insert(addr.into(), answer);
    }
    fn down(&self, addr: &str) {
        lock(&self.down).insert(addr.into());
    }
    fn events(&self) -> Vec<Event> {
        lock(&self.events).clone()
    }
    fn calls(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Call(a, _) => Some(a),
                Event::Connect(..) => None,
            })
            .collect()
    }
    fn connects(&self, addr: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Connect(a, _) if a == addr))
            .count()
    }
}

impl Transport for Arc<Fake> {
    type Conn = FakeConn;

    async fn connect(&self, addr: &str) -> Result<FakeConn, TransportError> {
        let up = !lock(&self.down).contains(addr);
        lock(&self.events).push(Event::Connect(addr.into(), up));
        if !up {
            // A powered-off host: the connect times out rather than being refused.
            tokio::time::sleep(Duration::from_secs(1)).await;
            return Err(TransportError::Connect {
                addr: addr.into(),
                reason: "refused".into(),
            });
        }
        Ok(FakeConn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            addr: addr.into(),
            closed: Arc::default(),
        })
    }

    fn id(conn: &FakeConn) -> u64 {
        conn.id
    }

    fn addr(conn: &FakeConn) -> &str {
        &conn.addr
    }

    fn is_closed(conn: &FakeConn) -> bool {
        conn.closed.load(Ordering::Relaxed)
    }

    async fn call<O: Op>(
        &self,
        conn: &FakeConn,
        _op: O,
        timeout: Duration,
    ) -> Result<Reply<O::Output>, TransportError> {
        lock(&self.events).push(Event::Call(conn.addr.clone(), O::NAME));
        let scripted = lock(&self.scripts)
            .get_mut(&conn.addr)
            .and_then(VecDeque::pop_front);
        let answer = scripted
            .or_else(|| lock(&self.defaults).get(&conn.addr).cloned())
            .unwrap_or(Answer::Reply(Status::Ok, Some(0)));
        let reply = |status, value: Option<u64>| Reply {
            header: ReplyHeader::status(status, "scripted"),
            value: value.map(|v| {
                let value: Box<dyn Any> = if O::NAME == "authenticate" {
                    Box::new(crate::types::Principal {
                        user: "alice".into(),
                        role: crate::types::Role::User,
                    })
                } else {
                    Box::new(v)
                };
                *value
                    .downcast::<O::Output>()
                    .expect("tests only script u64 outputs (and authenticate's)")
            }),
        };
        match answer {
            Answer::Reply(status, value) => Ok(reply(status, value)),
            Answer::Redirect(host, port) => Ok(Reply {
                header: ReplyHeader {
                    status: Status::Redirect,
                    message: "standby".into(),
                    redirect: Some((host.into(), port)),
                    redirect_name: None,
                },
                value: None,
            }),
            Answer::RedirectNamed(name, host, port) => Ok(Reply {
                header: ReplyHeader {
                    status: Status::Redirect,
                    message: "standby".into(),
                    redirect: Some((host.into(), port)),
                    redirect_name: Some(name.into()),
                },
                value: None,
            }),
            Answer::Broken => {
                conn.closed.store(true, Ordering::Relaxed);
                Err(TransportError::Disconnected {
                    addr: conn.addr.clone(),
                    reason: "scripted".into(),
                })
            }
            Answer::After(delay, v) => {
                match tokio::time::timeout(timeout, tokio::time::sleep(delay)).await {
                    Ok(()) => Ok(reply(Status::Ok, Some(v))),
                    Err(_) => Err(TransportError::Timeout {
                        addr: conn.addr.clone(),
                        after: timeout,
                    }),
                }
            }
        }
    }
}

/// A read op with a `u64` output, for the read rows of the table.
#[derive(Debug, Clone)]
struct Read;

impl Op for Read {
    type Output = u64;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "read";
    fn send(
        self,
        _client: xce_proto::xce_capnp::controller::Client,
    ) -> LocalFuture<Result<Reply<u64>, capnp::Error>> {
        async { Err(capnp::Error::failed("test-only op".into())) }.boxed_local()
    }
}

fn submit() -> Submit {
    Submit {
        token: RequestToken(7),
        spec: JobSpec::default(),
        script: None,
    }
}

const PEERS: &str = "a=a:1,b=b:2,c=c:3";

fn client_with(config: ClientConfig) -> (Client<Arc<Fake>>, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let client = Client::with_transport(parse_candidates(PEERS).unwrap(), config, fake.clone());
    (client, fake)
}

fn fresh() -> (Client<Arc<Fake>>, Arc<Fake>) {
    client_with(ClientConfig::default())
}

fn ok(v: u64) -> Answer {
    Answer::Reply(Status::Ok, Some(v))
}

fn no_master() -> Answer {
    Answer::Reply(Status::NoMaster, None)
}

#[tokio::test(start_paused = true)]
async fn the_redirect_hint_goes_first_and_the_primary_stays_sticky() {
    let (client, fake) = fresh();
    fake.always("a:1", Answer::Redirect("c", 3));
    fake.always("c:3", ok(7));
    assert_eq!(client.call(submit()).await, Ok(7));
    assert_eq!(client.call(Read).await, Ok(7));
    assert_eq!(fake.calls(), ["a:1", "c:3", "c:3"]);
    assert_eq!(client.stats().backoffs, 0, "a redirect never backs off");
}

/// The answering node knows the primary by an address this client cannot use (behind a proxy,
/// another interface): the client goes to its own address for the candidate of that name.
#[tokio::test(start_paused = true)]
async fn a_named_redirect_goes_to_this_client_s_address_for_that_candidate() {
    let (client, fake) = fresh();
    fake.always("a:1", Answer::RedirectNamed("c", "10.9.9.9", 9));
    fake.always("c:3", ok(5));
    assert_eq!(client.call(submit()).await, Ok(5));
    assert_eq!(fake.connects("10.9.9.9:9"), 0);
    assert_eq!(fake.calls(), ["a:1", "c:3"]);
}

#[tokio::test(start_paused = true)]
async fn a_dead_hint_falls_through_to_the_next_candidate() {
    let (client, fake) = fresh();
    fake.always("a:1", Answer::Redirect("d", 4));
    fake.down("d:4");
    fake.always("b:2", ok(1));
    assert_eq!(client.call(submit()).await, Ok(1));
    assert_eq!(fake.connects("d:4"), 1, "the hint is used once");
    assert_eq!(fake.calls(), ["a:1", "b:2"]);
}

#[tokio::test(start_paused = true)]
async fn no_primary_spends_the_budget_then_reports_cluster_not_ready() {
    let mut config = ClientConfig::default();
    config.retry.max_attempts = 5;
    let (client, fake) = client_with(config);
    for addr in ["a:1", "b:2", "c:3"] {
        fake.always(addr, no_master());
    }
    let started = Instant::now();
    let err = client.call(submit()).await.unwrap_err();
    assert!(
        matches!(err, ClientError::ClusterNotReady { attempts: 5, .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), "clusterNotReady");
    assert_eq!(fake.calls().len(), 6);
    assert_eq!(client.stats().backoffs, 5);
    // Full jitter under ceilings of 100, 200, 400, 800 and 1600 ms.
    assert!(started.elapsed() <= Duration::from_millis(3100));
}

#[tokio::test(start_paused = true)]
async fn a_full_rotation_of_dead_candidates_is_one_backoff_attempt() {
    let mut config = ClientConfig::default();
    config.retry.max_attempts = 2;
    let (client, fake) = client_with(config);
    for addr in ["a:1", "b:2", "c:3"] {
        fake.down(addr);
    }
    let err = client.call(Read).await.unwrap_err();
    assert!(
        matches!(err, ClientError::ClusterNotReady { attempts: 2, .. }),
        "{err:?}"
    );
    // Three rotations (two backoffs between them) of three connects each.
    for addr in ["a:1", "b:2", "c:3"] {
        assert_eq!(fake.connects(addr), 3, "{addr}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_appears_mid_loop_serves_and_stays_sticky() {
    let (client, fake) = fresh();
    fake.script("a:1", &[no_master()]);
    fake.script("b:2", &[no_master()]);
    fake.script("c:3", &[ok(1), ok(2)]);
    assert_eq!(client.call(submit()).await, Ok(1));
    assert_eq!(client.call(submit()).await, Ok(2));
    assert_eq!(fake.calls(), ["a:1", "b:2", "c:3", "c:3"]);
}

#[tokio::test(start_paused = true)]
async fn not_ready_backs_off_on_the_same_node() {
    let (client, fake) = fresh();
    let not_ready = Answer::Reply(Status::NotReady, None);
    fake.script("a:1", &[not_ready.clone(), not_ready, ok(3)]);
    assert_eq!(client.call(Read).await, Ok(3));
    assert_eq!(fake.calls(), ["a:1", "a:1", "a:1"]);
    assert_eq!(client.stats().backoffs, 2);
}

#[tokio::test(start_paused = true)]
async fn terminal_statuses_are_surfaced_at_once() {
    for status in [
        Status::Invalid,
        Status::NoEnt,
        Status::Conflict,
        Status::Perm,
    ] {
        let (client, fake) = fresh();
        fake.always("a:1", Answer::Reply(status, None));
        let err = client.call(submit()).await.unwrap_err();
        assert_eq!(err.code(), status.name());
        assert_eq!(fake.calls().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn dup_job_on_a_resent_write_is_success_with_the_original_result() {
    let (client, fake) = fresh();
    fake.script("a:1", &[Answer::Broken]);
    fake.script("b:2", &[Answer::Reply(Status::DupJob, Some(42))]);
    assert_eq!(client.call(submit()).await, Ok(42));

    // On a first send it is a genuine duplicate, and a read never treats it as success.
    let (client, fake) = fresh();
    fake.script("a:1", &[Answer::Reply(Status::DupJob, Some(42))]);
    assert_eq!(client.call(submit()).await.unwrap_err().code(), "dupJob");
    let (client, fake) = fresh();
    fake.script("a:1", &[Answer::Broken]);
    fake.script("b:2", &[Answer::Reply(Status::DupJob, Some(42))]);
    assert_eq!(client.call(Read).await.unwrap_err().code(), "dupJob");
}

#[tokio::test(start_paused = true)]
async fn a_late_reply_is_never_taken_for_a_new_attempt() {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(1),
        ..ClientConfig::default()
    };
    let (client, fake) = client_with(config);
    fake.script("a:1", &[Answer::After(Duration::from_secs(10), 1)]);
    fake.script("b:2", &[ok(2)]);
    assert_eq!(client.call(submit()).await, Ok(2));
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_share_one_reconnect() {
    let (client, fake) = fresh();
    fake.always("a:1", ok(5));
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call(Read).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), Ok(5));
    }
    assert_eq!(fake.connects("a:1"), 1);
}

#[tokio::test(start_paused = true)]
async fn calls_waiting_on_a_failed_reconnect_share_its_failure() {
    let mut config = ClientConfig::default();
    config.retry.max_attempts = 1;
    let (client, fake) = client_with(config);
    for addr in ["a:1", "b:2", "c:3"] {
        fake.down(addr);
    }
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call(Read).await })
        })
        .collect();
    for c in calls {
        assert!(matches!(
            c.await.unwrap(),
            Err(ClientError::ClusterNotReady { .. })
        ));
    }
    // Alone, each call would make 6 connects (two rotations of three); together they share.
    let connects = fake.events().len();
    assert!(connects < 20 * 6 / 2, "{connects} connects for 20 calls");
}

/// A rejoin that makes a client call of its own and records when it ran.
fn recording_rejoin(fake: &Arc<Fake>, failures: usize) -> (RejoinFn<Arc<Fake>>, Arc<AtomicU64>) {
    let runs = Arc::new(AtomicU64::new(0));
    let left = Arc::new(AtomicU64::new(failures as u64));
    let (runs2, _fake) = (runs.clone(), fake.clone());
    let rejoin: RejoinFn<Arc<Fake>> = Arc::new(move |c: Client<Arc<Fake>>| {
        let runs = runs2.clone();
        let left = left.clone();
        Box::pin(async move {
            runs.fetch_add(1, Ordering::Relaxed);
            c.call(submit()).await?;
            if left.load(Ordering::Relaxed) > 0 {
                left.fetch_sub(1, Ordering::Relaxed);
                return Err(ClientError::Status {
                    status: Status::Conflict,
                    message: "scripted rejoin failure".into(),
                });
            }
            Ok(())
        })
    });
    (rejoin, runs)
}

#[tokio::test(start_paused = true)]
async fn the_rejoin_runs_before_the_interrupted_call_resumes() {
    let (client, fake) = fresh();
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    client.set_rejoin(rejoin);
    fake.script("a:1", &[ok(1), ok(2), Answer::Broken]);
    fake.always("b:2", ok(9));
    // First connection: the rejoin (which itself calls submit) runs, then the read.
    assert_eq!(client.call(Read).await, Ok(2));
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    assert!(!client.needs_rejoin());
    // The primary dies mid-call: reconnect elsewhere, rejoin there, then resume the read.
    assert_eq!(client.call(Read).await, Ok(9));
    assert_eq!(runs.load(Ordering::Relaxed), 2);
    let calls: Vec<_> = fake
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Call(a, op) => Some(format!("{a} {op}")),
            Event::Connect(..) => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            "a:1 submit",
            "a:1 read",
            "a:1 read",
            "b:2 submit",
            "b:2 read"
        ]
    );
    assert_eq!(client.stats().rejoins, 2);
}

/// Regression: a rejoin whose join was redirected joined the primary, but the call that
/// triggered it then went out on the standby's connection it had begun with (where the
/// session held no role: `perm`), and the rejoin was counted for that old connection.
#[tokio::test(start_paused = true)]
async fn a_call_goes_where_a_redirected_rejoin_ended_and_needs_no_second_rejoin() {
    let (client, fake) = fresh();
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    client.set_rejoin(rejoin);
    fake.always("a:1", Answer::Redirect("c", 3));
    fake.always("c:3", ok(5));
    assert_eq!(client.call(Read).await, Ok(5));
    assert_eq!(fake.calls(), ["a:1", "c:3", "c:3"]);
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    assert!(!client.needs_rejoin());
    assert_eq!(client.call(Read).await, Ok(5));
    assert_eq!(runs.load(Ordering::Relaxed), 1);
}

/// A client with a token, over loopback candidates (a token goes out in plaintext only
/// there): `127.0.0.1:1` and `127.0.0.2:2`.
fn with_token() -> (Client<Arc<Fake>>, Arc<Fake>) {
    let config = ClientConfig {
        token: Some(crate::tokens::Token::generate()),
        ..ClientConfig::default()
    };
    let fake = Arc::new(Fake::default());
    let peers = parse_candidates("c1=127.0.0.1:1,c2=127.0.0.2:2").unwrap();
    (Client::with_transport(peers, config, fake.clone()), fake)
}

fn calls_with_ops(fake: &Fake) -> Vec<String> {
    fake.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Call(a, op) => Some(format!("{a} {op}")),
            Event::Connect(..) => None,
        })
        .collect()
}

/// A token is presented on every new connection before anything else goes out on it.
#[tokio::test(start_paused = true)]
async fn every_new_connection_authenticates_first() {
    let (client, fake) = with_token();
    let (a, b) = ("127.0.0.1:1", "127.0.0.2:2");
    fake.script(a, &[ok(0), ok(1), Answer::Broken]);
    fake.always(b, ok(9));
    assert_eq!(client.call(Read).await, Ok(1));
    assert_eq!(client.call(Read).await, Ok(9));
    assert_eq!(client.call(Read).await, Ok(9));
    assert_eq!(
        calls_with_ops(&fake),
        [
            format!("{a} authenticate"),
            format!("{a} read"),
            format!("{a} read"),
            format!("{b} authenticate"),
            format!("{b} read"),
            format!("{b} read"),
        ]
    );
}

/// With a rejoin action too, the token goes first on every connection the rejoin's own
/// calls use, so no call ever goes out on a connection that has not presented it.
#[tokio::test(start_paused = true)]
async fn a_rejoin_that_moved_presents_the_token_on_the_new_connection_first() {
    let (client, fake) = with_token();
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    client.set_rejoin(rejoin);
    let (a, b) = ("127.0.0.1:1", "127.0.0.2:2");
    fake.script(a, &[ok(0), Answer::Broken]);
    fake.always(b, ok(4));
    assert_eq!(client.call(Read).await, Ok(4));
    assert_eq!(
        calls_with_ops(&fake),
        [
            format!("{a} authenticate"),
            format!("{a} submit"),
            format!("{b} authenticate"),
            format!("{b} submit"),
            format!("{b} read"),
        ]
    );
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    assert!(!client.needs_rejoin());
}

/// A refused token is the caller's error, surfaced as `auth`; the next call presents it
/// again.
#[tokio::test(start_paused = true)]
async fn a_refused_token_surfaces_as_auth() {
    let (client, fake) = with_token();
    fake.script("127.0.0.1:1", &[Answer::Reply(Status::Auth, None)]);
    let err = client.call(Read).await.unwrap_err();
    assert_eq!(err.code(), "auth");
    assert_eq!(client.call(Read).await, Ok(0));
    assert_eq!(
        calls_with_ops(&fake),
        [
            "127.0.0.1:1 authenticate",
            "127.0.0.1:1 authenticate",
            "127.0.0.1:1 read"
        ]
    );
}

/// Without TLS a token is never sent beyond loopback: the call fails as `auth`, unsent.
#[tokio::test(start_paused = true)]
async fn a_token_is_not_sent_in_plaintext_beyond_this_host() {
    let (client, fake) = client_with(ClientConfig {
        token: Some(crate::tokens::Token::generate()),
        ..ClientConfig::default()
    });
    let err = client.call(Read).await.unwrap_err();
    assert_eq!(err.code(), "auth");
    assert!(err.to_string().contains("plaintext"), "{err}");
    assert_eq!(fake.calls(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn needs_rejoin_clears_only_when_the_rejoin_succeeds() {
    let (client, fake) = fresh();
    let (rejoin, runs) = recording_rejoin(&fake, 1);
    client.set_rejoin(rejoin);
    let err = client.call(Read).await.unwrap_err();
    assert_eq!(err.code(), "conflict");
    assert!(client.needs_rejoin());
    assert_eq!(client.call(Read).await, Ok(0));
    assert!(!client.needs_rejoin());
    assert_eq!(runs.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_wait_for_one_rejoin_that_calls_the_client_without_deadlock() {
    let (client, fake) = fresh();
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    client.set_rejoin(rejoin);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call(Read).await })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls))
        .await
        .expect("no deadlock");
    for r in all {
        assert_eq!(r.unwrap(), Ok(0));
    }
    assert_eq!(runs.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn the_degraded_breaker_fails_fast_until_its_ttl_or_a_rejoin() {
    let mut config = ClientConfig {
        fail_fast_when_degraded: true,
        degraded_ttl: Duration::from_secs(5),
        ..ClientConfig::default()
    };
    config.retry.max_attempts = 1;
    let (client, fake) = client_with(config.clone());
    for addr in ["a:1", "b:2", "c:3"] {
        fake.script(addr, &[no_master(), no_master()]);
    }
    assert!(matches!(
        client.call(Read).await,
        Err(ClientError::ClusterNotReady { .. })
    ));
    assert!(client.is_degraded());
    let sends = fake.calls().len();
    let err = client.call(Read).await.unwrap_err();
    assert!(matches!(err, ClientError::Degraded { .. }), "{err:?}");
    assert_eq!(err.code(), "clusterNotReady");
    assert_eq!(fake.calls().len(), sends, "fail fast sends nothing");
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(!client.is_degraded(), "half-open after the TTL");

    // A successful rejoin clears it at once.
    let (client, fake) = client_with(config);
    let (rejoin, _) = recording_rejoin(&fake, 0);
    fake.script("a:1", &[no_master()]);
    fake.script("b:2", &[no_master()]);
    assert!(client.call(Read).await.is_err());
    assert!(client.is_degraded());
    client.set_rejoin(rejoin);
    // The breaker is independent of needs-rejoin: fail fast until the TTL, then the probe
    // reconnects, rejoins and clears it.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(client.call(Read).await, Ok(0));
    assert!(!client.is_degraded());
}

/// A probe may spend a whole budget, longer than the breaker's TTL: while it is out, the
/// breaker holds, or each request in that window would spend a budget of its own (measured:
/// 0.9-1.5 s per request, one every few seconds, against an apiserver with no majority).
#[tokio::test(start_paused = true)]
async fn a_probe_in_flight_holds_the_breaker_past_its_ttl() {
    let mut config = ClientConfig {
        fail_fast_when_degraded: true,
        degraded_ttl: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    config.retry.max_attempts = 2;
    config.retry.initial = Duration::from_secs(3);
    config.retry.max_delay = Duration::from_secs(3);
    let (client, fake) = client_with(config);
    for addr in ["a:1", "b:2", "c:3"] {
        fake.always(addr, no_master());
    }
    assert!(matches!(
        client.call(Read).await,
        Err(ClientError::ClusterNotReady { .. })
    ));
    let probe = tokio::spawn({
        let client = client.clone();
        async move { client.probe(Read).await }
    });
    // Past the TTL, with the probe in its backoff.
    tokio::time::advance(Duration::from_millis(2500)).await;
    let sends = fake.calls().len();
    let err = client.call(Read).await.unwrap_err();
    assert!(matches!(err, ClientError::Degraded { .. }), "{err:?}");
    assert_eq!(fake.calls().len(), sends, "fail fast sends nothing");
    // The probe fails too: the breaker is set anew, with no gap.
    assert!(matches!(
        probe.await.unwrap(),
        Err(ClientError::ClusterNotReady { .. })
    ));
    assert!(client.is_degraded());
    // With no probe out, the TTL alone decides: half-open after it.
    tokio::time::advance(Duration::from_secs(3)).await;
    assert!(!client.is_degraded());
}

/// The probe is how a degraded client that no request reaches finds the cluster back: its
/// calls, and those of the rejoin it runs first, must not be refused by the breaker they
/// test (they were: each probe then failed at once, and the breaker only ever lapsed).
#[tokio::test(start_paused = true)]
async fn a_probe_and_the_rejoin_it_runs_pass_the_breaker_they_test() {
    let mut config = ClientConfig {
        fail_fast_when_degraded: true,
        degraded_ttl: Duration::from_secs(5),
        ..ClientConfig::default()
    };
    config.retry.max_attempts = 1;
    let (client, fake) = client_with(config);
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    fake.script("a:1", &[no_master()]);
    fake.script("b:2", &[no_master()]);
    assert!(client.call(Read).await.is_err());
    assert!(client.is_degraded());
    client.set_rejoin(rejoin);
    assert!(client.needs_rejoin());
    assert_eq!(client.probe(Read).await, Ok(0));
    assert_eq!(runs.load(Ordering::Relaxed), 1, "the probe ran the rejoin");
    assert!(!client.is_degraded());
}

#[tokio::test(start_paused = true)]
async fn fire_and_forget_makes_one_bounded_attempt_and_marks_the_rejoin() {
    let (client, fake) = fresh();
    for addr in ["a:1", "b:2", "c:3"] {
        fake.down(addr);
    }
    let err = client.notify(Read).await.unwrap_err();
    assert!(matches!(err, ClientError::Unreachable(_)), "{err:?}");
    assert_eq!(
        fake.events().len(),
        1,
        "one connect, no rotation, no backoff"
    );

    let (client, fake) = fresh();
    let (rejoin, runs) = recording_rejoin(&fake, 0);
    client.set_rejoin(rejoin);
    fake.script("a:1", &[Answer::Broken]);
    assert!(client.notify(Read).await.is_err());
    // The notify's reconnect needs a rejoin; the next call runs it first.
    assert!(client.needs_rejoin());
    assert_eq!(client.notify(Read).await, Ok(()));
    assert_eq!(
        runs.load(Ordering::Relaxed),
        0,
        "notify never runs the rejoin"
    );
    assert_eq!(client.call(Read).await, Ok(0));
    assert_eq!(runs.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn fire_and_forget_leaves_a_node_that_has_no_primary_to_offer() {
    let (client, fake) = fresh();
    fake.script("a:1", &[no_master()]);
    let err = client.notify(Read).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Status {
                status: Status::NoMaster,
                ..
            }
        ),
        "{err:?}"
    );
    // The next one goes to the next candidate instead of asking the same node again.
    assert_eq!(client.notify(Read).await, Ok(()));
    assert_eq!(fake.calls(), vec!["a:1", "b:2"]);
}

mod publish {
    use super::*;
    use crate::publish::publish_until_done;
    use tokio::sync::watch;

    #[tokio::test(start_paused = true)]
    async fn retries_fresh_budgets_until_success_and_keeps_order() {
        let mut config = ClientConfig::default();
        config.retry.max_attempts = 1;
        let (client, fake) = client_with(config);
        // Four no-primary answers: two whole rounds of one budget each fail.
        fake.script("a:1", &[no_master(), no_master()]);
        fake.script("b:2", &[no_master(), ok(1), ok(2)]);
        fake.script("c:3", &[no_master()]);
        let (_tx, mut rx) = watch::channel(false);
        let first = publish_until_done(&client, submit(), &mut rx).await;
        let second = publish_until_done(&client, submit(), &mut rx).await;
        assert_eq!((first, second), (Ok(1), Ok(2)));
        assert_eq!(client.stats().cluster_not_ready, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_decision_that_landed_in_a_lost_round_counts_as_published() {
        let mut config = ClientConfig::default();
        config.retry.max_attempts = 1;
        let (client, fake) = client_with(config);
        // Round one: the write lands but every reply is lost, then no primary is found.
        fake.script("a:1", &[Answer::Broken]);
        fake.script("b:2", &[no_master()]);
        fake.script("c:3", &[no_master()]);
        // Round two's first send finds it applied.
        fake.script("a:1", &[Answer::Reply(Status::DupJob, Some(11))]);
        let (_tx, mut rx) = watch::channel(false);
        assert_eq!(publish_until_done(&client, submit(), &mut rx).await, Ok(11));
    }

    #[tokio::test(start_paused = true)]
    async fn stops_within_one_attempt_of_shutdown() {
        let (client, fake) = fresh();
        for addr in ["a:1", "b:2", "c:3"] {
            fake.always(addr, no_master());
        }
        let (tx, mut rx) = watch::channel(false);
        let publisher = tokio::spawn(async move {
            let r = publish_until_done(&client, submit(), &mut rx).await;
            (r, fake.calls().len())
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        tx.send_replace(true);
        let (result, _) = tokio::time::timeout(Duration::from_millis(1), publisher)
            .await
            .expect("publish stops at once")
            .unwrap();
        assert_eq!(result, Err(ClientError::Shutdown));

        // Shutdown already requested: not a single attempt.
        let (client, fake) = fresh();
        let (_tx, mut rx) = watch::channel(true);
        assert_eq!(
            publish_until_done(&client, submit(), &mut rx).await,
            Err(ClientError::Shutdown)
        );
        assert!(fake.events().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn redirects_that_point_at_each_other_back_off_instead_of_spinning() {
    let mut config = ClientConfig::default();
    config.retry.max_attempts = 2;
    let (client, fake) = client_with(config);
    fake.always("a:1", Answer::Redirect("b", 2));
    fake.always("b:2", Answer::Redirect("a", 1));
    fake.always("c:3", Answer::Redirect("a", 1));
    let err = client.call(Read).await.unwrap_err();
    assert!(
        matches!(err, ClientError::ClusterNotReady { attempts: 2, .. }),
        "{err:?}"
    );
    assert!(fake.calls().len() < 30, "{} calls", fake.calls().len());
}

#[tokio::test(start_paused = true)]
async fn a_client_that_knows_only_a_standby_reaches_the_primary_in_one_hop() {
    let fake = Arc::new(Fake::default());
    let client = Client::with_transport(
        parse_candidates("b=b:2").unwrap(),
        ClientConfig::default(),
        fake.clone(),
    );
    fake.always("b:2", Answer::Redirect("a", 1));
    fake.always("a:1", ok(3));
    assert_eq!(client.call(submit()).await, Ok(3));
    assert_eq!(fake.calls(), ["b:2", "a:1"]);
    assert_eq!(client.stats().backoffs, 0);
}

#[tokio::test(start_paused = true)]
async fn a_primary_hint_skips_the_redirect_and_a_wrong_one_costs_one_attempt() {
    // A hint naming the primary: one connect, straight to it, and it is what answered.
    let (client, fake) = fresh();
    fake.always("a:1", Answer::Redirect("c", 3));
    fake.always("c:3", ok(5));
    assert_eq!(client.connected_to(), None);
    assert!(client.set_hint("c:3"));
    assert_eq!(client.call(submit()).await, Ok(5));
    assert_eq!(fake.calls(), ["c:3"]);
    assert_eq!(fake.connects("a:1"), 0);
    assert_eq!(client.connected_to().as_deref(), Some("c:3"));
    // Once connected, a hint is not taken: the open connection stays sticky.
    assert!(!client.set_hint("a:1"));
    assert_eq!(client.call(Read).await, Ok(5));
    assert_eq!(fake.calls(), ["c:3", "c:3"]);

    // A hint at a dead node: that attempt fails and the rotation goes on from there.
    let (client, fake) = fresh();
    fake.down("b:2");
    fake.always("c:3", ok(6));
    assert!(client.set_hint("b:2"));
    assert_eq!(client.call(submit()).await, Ok(6));
    assert_eq!(fake.connects("b:2"), 1);
    assert_eq!(fake.calls(), ["c:3"]);
    assert_eq!(client.stats().backoffs, 0);

    // A hint at a standby: the usual one redirect.
    let (client, fake) = fresh();
    fake.always("b:2", Answer::Redirect("a", 1));
    fake.always("a:1", ok(7));
    assert!(client.set_hint("b:2"));
    assert_eq!(client.call(submit()).await, Ok(7));
    assert_eq!(fake.calls(), ["b:2", "a:1"]);

    // An address that is not a candidate is refused and changes nothing.
    let (client, fake) = fresh();
    assert!(!client.set_hint("d:4"));
    assert_eq!(client.call(Read).await, Ok(0));
    assert_eq!(fake.calls(), ["a:1"]);
}

/// An answer that lists the controllers `a`, `b` and `d` (as the cluster info does).
#[derive(Debug, Clone)]
struct Members;

impl Op for Members {
    type Output = u64;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "members";
    fn candidates_of(_: &u64) -> Option<Vec<crate::Candidate>> {
        parse_candidates("a=a:1,b=b:2,d=d:4").ok()
    }
    fn send(
        self,
        _client: xce_proto::xce_capnp::controller::Client,
    ) -> LocalFuture<Result<Reply<u64>, capnp::Error>> {
        async { Err(capnp::Error::failed("test-only op".into())) }.boxed_local()
    }
}

/// A probe learns the members as a call does (the apiserver's backend only probes and acts
/// for others), and acting for someone keeps the answer's members.
#[tokio::test(start_paused = true)]
async fn a_probe_and_an_act_as_learn_the_members_too() {
    let (client, fake) = fresh();
    fake.always("a:1", ok(1));
    assert_eq!(client.probe(Members).await, Ok(1));
    let addrs: Vec<String> = client.candidates().iter().map(|c| c.addr()).collect();
    assert_eq!(addrs, ["a:1", "b:2", "d:4"]);
    let acting = <crate::ops::ActAs<Members> as Op>::candidates_of(&1);
    assert_eq!(acting.map(|l| l.len()), Some(3));
}

/// The cluster's members replace the candidates: a controller added since is tried, one
/// removed is not, and a known name keeps this client's own address for it.
#[tokio::test(start_paused = true)]
async fn the_cluster_s_members_become_the_candidates() {
    let (client, fake) = fresh();
    client.learn_candidates(parse_candidates("a=10.9.9.9:9,b=b:2,d=d:4").unwrap());
    let addrs: Vec<String> = client.candidates().iter().map(|c| c.addr()).collect();
    assert_eq!(addrs, ["a:1", "b:2", "d:4"]);
    fake.down("a:1");
    fake.down("b:2");
    fake.always("d:4", ok(9));
    assert_eq!(client.call(submit()).await, Ok(9));
    assert_eq!(fake.connects("c:3"), 0, "a removed controller is not tried");
    assert_eq!(fake.connects("10.9.9.9:9"), 0);
    // An empty list changes nothing.
    client.learn_candidates(Vec::new());
    assert_eq!(client.candidates().len(), 3);
}
