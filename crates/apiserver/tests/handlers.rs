//! The HTTP layer against a scripted backend: status codes, shapes, idempotency, auth, the
//! degraded fast path, the event stream and the generated OpenAPI document, with no cluster.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use xce_apiserver::backend::{Answer, Backend, BoxFuture, Call, Caller, Health};
use xce_apiserver::hub::Hub;
use xce_apiserver::metrics::Metrics;
use xce_apiserver::routes::{self, AppState};
use xce_client::json::EventJson;
use xce_client::ops::Submitted;
use xce_client::tokens::Token;
use xce_client::types::{Job, JobPage, JobResult, JobSpec, JobState, RequestToken};
use xce_client::{ClientError, Status};

type Script = Box<dyn Fn(&Caller, &Call) -> Result<Answer, ClientError> + Send + Sync>;

/// Answers each call by its script and records it.
struct Scripted {
    script: Script,
    calls: Mutex<Vec<(String, Call)>>,
    health: Mutex<Health>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Backend for Scripted {
    fn call(&self, caller: &Caller, call: Call) -> BoxFuture<Result<Answer, ClientError>> {
        let answer = (self.script)(caller, &call);
        self.calls
            .lock()
            .unwrap()
            .push((caller.key().to_string(), call));
        Box::pin(async move { answer })
    }

    fn health(&self) -> Health {
        self.health.lock().unwrap().clone()
    }
}

struct App {
    router: Router,
    backend: Arc<Scripted>,
    hub: Hub,
}

fn app(authentication: bool, script: Script) -> App {
    let backend = Arc::new(Scripted {
        script,
        calls: Mutex::default(),
        health: Mutex::new(Health {
            serving: true,
            authentication,
            ..Health::default()
        }),
    });
    let hub = Hub::new();
    let dyn_backend: Arc<dyn Backend> = backend.clone();
    let state = AppState {
        backend: dyn_backend.clone(),
        hub: hub.clone(),
        metrics: Arc::new(Metrics::new(dyn_backend, None, hub.clone())),
        request_timeout: Duration::from_secs(5),
        openapi: Arc::new(routes::openapi()),
    };
    App {
        router: routes::router(state, 4096),
        backend,
        hub,
    }
}

fn job(id: u64) -> Job {
    Job {
        id,
        spec: JobSpec {
            command: vec!["true".into()],
            queue: "normal".into(),
            user: "alice".into(),
            resources: xce_client::types::Resources::new(1, 0),
            ..JobSpec::default()
        },
        state: JobState::Pending,
        pend_reason: None,
        pend_code: None,
        reason: None,
        result: None,
        host: None,
        attempt: 0,
        runs: 0,
        exit_code: None,
        signal: None,
        submit_time_ms: 1_796_032_800_000,
        start_time_ms: None,
        end_time_ms: None,
        output_dir: None,
        cancelled_by: None,
        dependency_state: None,
        array: None,
        array_task: None,
        expected_start_ms: None,
        usage: None,
        attempts: Vec::new(),
    }
}

/// A backend that holds jobs 1..=3 and makes job 7 on submit (replayed when the token was
/// seen before).
fn cluster() -> Script {
    let seen = Mutex::new(Vec::<RequestToken>::new());
    Box::new(move |_, call| match call {
        Call::Submit { token, .. } => {
            let mut seen = seen.lock().unwrap();
            let replayed = seen.contains(token);
            seen.push(*token);
            Ok(Answer::Submitted(Submitted {
                id: 7,
                job: Some(job(7)),
                replayed,
            }))
        }
        Call::GetJob(id) if (1..=3).contains(id) => Ok(Answer::Job(job(*id))),
        Call::GetJob(id) => Err(ClientError::Status {
            status: Status::NoEnt,
            message: format!("job {id}: no such job"),
        }),
        Call::ListJobs { .. } => Ok(Answer::Jobs(JobPage {
            jobs: vec![job(1), job(2)],
            next: Some(2),
        })),
        Call::ControlJob { .. } => Ok(Answer::Done),
        Call::ListHistory { .. } => Ok(Answer::History(xce_client::history::HistoryPage {
            jobs: vec![job(3)],
            next: 3,
            behind: 2,
            scanned: 40,
        })),
        _ => Ok(Answer::Done),
    })
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
    let response = router.clone().oneshot(req).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

fn post(uri: &str, body: Value) -> Request<Body> {
    Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn submit_returns_the_job_and_an_idempotency_key_submits_once() {
    let app = app(false, cluster());
    let (status, _, body) = send(&app.router, post("/v1/jobs", json!({"command": ["true"]}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["id"], 7);
    assert_eq!(body["job"]["state"], "pending");
    assert_eq!(body["job"]["submit_time"], "2026-11-30T10:00:00Z");
    let keyed = || {
        Request::post("/v1/jobs")
            .header(header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", "order-42")
            .body(Body::from(
                r#"{"command":["sleep","1"],"env":{"A":"b"},"cpus":2}"#,
            ))
            .unwrap()
    };
    let (first, _, _) = send(&app.router, keyed()).await;
    let (again, _, body) = send(&app.router, keyed()).await;
    assert_eq!((first, again), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(body["id"], 7);
    let calls = app.backend.calls.lock().unwrap();
    let tokens: Vec<RequestToken> = calls
        .iter()
        .filter_map(|(_, c)| match c {
            Call::Submit { token, spec, .. } => {
                assert!(spec.command[0] == "true" || spec.env == vec![("A".into(), "b".into())]);
                Some(*token)
            }
            _ => None,
        })
        .collect();
    assert_eq!(tokens.len(), 3);
    assert_ne!(tokens[0], tokens[1], "no key: a fresh token");
    assert_eq!(tokens[1], tokens[2], "the same key: the same token");
}

#[tokio::test]
async fn an_idempotency_key_is_the_caller_s_own() {
    let a = Caller::Token(Token::generate());
    let b = Caller::Token(Token::generate());
    let key = b"k-1";
    let ta = xce_apiserver::routes::idempotent_token(&a, key).unwrap();
    let tb = xce_apiserver::routes::idempotent_token(&b, key).unwrap();
    assert_ne!(ta, tb);
    assert_eq!(
        ta,
        xce_apiserver::routes::idempotent_token(&a, key).unwrap()
    );
    for bad in [&b""[..], b"has space", &[b'x'; 256][..]] {
        assert!(xce_apiserver::routes::idempotent_token(&a, bad).is_err());
    }
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_field_and_big_bodies_413() {
    let app = app(false, cluster());
    for (body, fragment) in [
        (json!({"cmd": ["true"]}), "cmd"),
        (json!({"command": "true"}), "command"),
        (json!({"command": ["true"], "cpus": "two"}), "cpus"),
    ] {
        let (status, _, err) = send(&app.router, post("/v1/jobs", body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
        assert_eq!(err["error"]["code"], "invalid");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(fragment), "{message}");
    }
    let big = json!({"command": ["x".repeat(8000)]});
    let (status, _, err) = send(&app.router, post("/v1/jobs", big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    let (status, _, err) = send(&app.router, get("/v1/jobs/abc")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, _, err) = send(&app.router, get("/v1/jobs?state=runing")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        err["error"]["message"].as_str().unwrap().contains("state"),
        "{err}"
    );
    let (status, _, err) = send(&app.router, get("/v1/nothing")).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("noEnt"))
    );
    let (status, _, _) = send(&app.router, post("/v1/jobs/1", json!({}))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _, err) = send(&app.router, post("/v1/jobs/1/explode", json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert!(
        app.backend.calls.lock().unwrap().is_empty(),
        "nothing bad reached the backend"
    );
}

#[tokio::test]
async fn jobs_are_read_listed_and_controlled() {
    let app = app(false, cluster());
    let (status, _, body) = send(&app.router, get("/v1/jobs/2")).await;
    assert_eq!((status, body["id"].as_u64()), (StatusCode::OK, Some(2)));
    let (status, _, body) = send(&app.router, get("/v1/jobs/9")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "noEnt");
    let (status, _, body) = send(
        &app.router,
        get("/v1/jobs?state=pending,running&user=alice&cursor=5&limit=2"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(body["next_cursor"], "2");
    let (status, _, body) = send(&app.router, post("/v1/jobs/2/kill", json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let calls = app.backend.calls.lock().unwrap();
    assert!(calls.iter().any(|(_, c)| matches!(
        c,
        Call::ListJobs { filter, after: 5, limit: 2 }
            if filter.states == vec![JobState::Pending, JobState::Running]
                && filter.user.as_deref() == Some("alice")
    )));
    assert!(calls
        .iter()
        .any(|(_, c)| matches!(c, Call::ControlJob { id: 2, .. })));
}

#[tokio::test]
async fn history_is_listed_with_the_filters_of_xce_history() {
    use xce_client::history::TimeField;
    let app = app(false, cluster());
    let (status, _, body) = send(
        &app.router,
        get("/v1/history?user=alice&account=physics&state=exited&result=failed,timeout&array=4&id=2-9&time_of=start&since=2026-12-01T00:00:00Z&cursor=1&limit=50"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (
            body["jobs"][0]["id"].as_u64(),
            body["next_cursor"].as_str(),
            body["behind"].as_u64(),
            body["scanned"].as_u64()
        ),
        (Some(3), Some("3"), Some(2), Some(40))
    );
    {
        let calls = app.backend.calls.lock().unwrap();
        let filter = calls
            .iter()
            .find_map(|(_, c)| match c {
                Call::ListHistory {
                    filter,
                    after: 1,
                    limit: 50,
                } => Some(filter.clone()),
                _ => None,
            })
            .expect("a history call");
        assert_eq!(
            (
                filter.user.as_deref(),
                filter.account.as_deref(),
                filter.array,
                filter.first_id,
                filter.last_id
            ),
            (Some("alice"), Some("physics"), Some(4), Some(2), Some(9))
        );
        assert_eq!(filter.states, vec![JobState::Exited]);
        assert_eq!(filter.results, vec![JobResult::Failed, JobResult::Timeout]);
        assert_eq!(
            (filter.time, filter.since_ms),
            (TimeField::Start, Some(1_796_083_200_000))
        );
        assert_eq!(filter.until_ms, None);
    }
    for (query, names) in [
        ("id=1-x", "is not ID or FIRST-LAST"),
        ("time_of=lunch", "time_of"),
        ("limit=5000", "limit: at most 1000"),
        ("until=someday", "until"),
    ] {
        let (status, _, err) = send(&app.router, get(&format!("/v1/history?{query}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(names),
            "{query}: {err}"
        );
    }
}

#[tokio::test]
async fn with_authentication_a_token_is_needed_and_the_cluster_s_verdict_is_401_or_403() {
    let script: Script = Box::new(|_, call| match call {
        Call::ControlJob { .. } => Err(ClientError::Status {
            status: Status::Perm,
            message: "job 1 is bob's".into(),
        }),
        _ => Err(ClientError::Status {
            status: Status::Auth,
            message: "actAs: token was revoked".into(),
        }),
    });
    let app = app(true, script);
    let (status, headers, body) = send(&app.router, get("/v1/jobs/1")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
    let with = |req: Request<Body>, token: &str| {
        let (mut parts, body) = req.into_parts();
        parts.headers.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        Request::from_parts(parts, body)
    };
    let (status, _, body) = send(&app.router, with(get("/v1/jobs/1"), "xce_nope")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let token = Token::generate().reveal();
    let (status, _, _) = send(&app.router, with(get("/v1/jobs/1"), &token)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the controller's auth is 401"
    );
    let (status, _, body) = send(
        &app.router,
        with(post("/v1/jobs/1/kill", json!({})), &token),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Health needs no token.
    let (status, _, body) = send(&app.router, get("/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["authentication"], true);
    assert!(body["warning"].is_null());
    assert_eq!(send(&app.router, get("/healthz")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn while_degraded_requests_are_503_with_retry_after_and_readyz_says_why() {
    let script: Script = Box::new(|_, _| {
        Err(ClientError::Degraded {
            remaining: Duration::from_millis(1500),
        })
    });
    let app = app(false, script);
    *app.backend.health.lock().unwrap() = Health {
        degraded_for: Some(Duration::from_millis(1500)),
        serving: false,
        ..Health::default()
    };
    let (status, headers, body) = send(&app.router, get("/v1/jobs/1")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::RETRY_AFTER], "2");
    assert_eq!(body["error"]["code"], "clusterNotReady");
    let (status, headers, body) = send(&app.router, get("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert!(
        body["reason"].as_str().unwrap().contains("degraded"),
        "{body}"
    );
    assert!(body["warning"]
        .as_str()
        .unwrap()
        .contains("authentication is off"));
    assert_eq!(send(&app.router, get("/healthz")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let app = app(false, cluster());
    let (status, _, doc) = send(&app.router, get("/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/{action}",
        "/v1/queues",
        "/v1/queues/{name}/{action}",
        "/v1/hosts",
        "/v1/hosts/{name}/{action}",
        "/v1/cluster",
        "/v1/events",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from {:?}",
            paths.keys()
        );
    }
    assert!(doc["components"]["schemas"]["JobJson"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

/// Every list of a job's states, results and pending codes in the document is the cluster's
/// own enum's, so neither the document nor the web view (which reads it) can drift from it.
#[tokio::test]
async fn the_document_s_state_result_and_pending_lists_are_the_enums() {
    use xce_client::types::{JobResult, JobState, PendCode};
    let app = app(false, cluster());
    let (_, _, doc) = send(&app.router, get("/openapi.json")).await;
    let props = &doc["components"]["schemas"]["JobJson"]["properties"];
    let names =
        |v: &serde_json::Value| -> Vec<serde_json::Value> { v["enum"].as_array().unwrap().clone() };
    let with_null = |list: &[&str]| -> Vec<serde_json::Value> {
        let mut v: Vec<serde_json::Value> = list.iter().map(|n| serde_json::json!(n)).collect();
        v.push(serde_json::Value::Null);
        v
    };
    assert_eq!(
        names(&props["state"]),
        JobState::NAMES
            .iter()
            .map(|n| serde_json::json!(n))
            .collect::<Vec<_>>()
    );
    assert_eq!(names(&props["result"]), with_null(JobResult::NAMES));
    assert_eq!(names(&props["pend_code"]), with_null(PendCode::NAMES));
    // The listing's state filter takes exactly those names, comma-separated.
    let param = doc["paths"]["/v1/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "state")
        .unwrap()
        .clone();
    let pattern = param["schema"]["pattern"].as_str().unwrap();
    for state in JobState::NAMES {
        assert!(pattern.contains(state), "{pattern} lacks {state}");
    }
    let (status, _, _) = send(&app.router, get("/v1/jobs?state=pending,exited")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = send(&app.router, get("/v1/jobs?state=lost")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The time limit's stated maximum is the clusters' default one.
    // (The request's own schema, beside what it must hold: a script or a command.)
    let submit = &doc["components"]["schemas"]["SubmitRequest"]["allOf"];
    assert_eq!(
        submit[1]["anyOf"][0]["required"],
        json!(["script"]),
        "{submit}"
    );
    assert_eq!(
        submit[1]["anyOf"][1]["required"],
        json!(["command"]),
        "{submit}"
    );
    let limit = &submit[0]["properties"]["time_limit_s"];
    assert_eq!(
        limit["maximum"],
        xce_client::time_limit::DEFAULT_MAX_S,
        "{limit}"
    );
}

#[tokio::test]
async fn metrics_count_requests_by_route() {
    let app = app(false, cluster());
    send(&app.router, get("/v1/jobs/1")).await;
    send(&app.router, get("/v1/jobs/9")).await;
    let response = app.router.clone().oneshot(get("/metrics")).await.unwrap();
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(r#"xce_apiserver_http_requests_total{route="/v1/jobs/{id}",method="GET",status="404"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("xce_apiserver_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains(r#"xce_apiserver_backend_calls_total{call="jobInfo",outcome="noEnt"} 1"#),
        "{text}"
    );
    assert!(text.contains("xce_apiserver_backend_degraded 0"), "{text}");
    assert!(text.contains("xce_apiserver_sse_clients"), "{text}");
}

/// Reads SSE frames until `n` events arrived.
async fn sse_events(body: &mut Body, n: usize) -> Vec<(Option<String>, Value)> {
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < n {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Some(data) = frame.data_ref() {
            text.push_str(std::str::from_utf8(data).unwrap());
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(str::to_string);
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                out.push((id, serde_json::from_str(data).unwrap()));
            }
        }
    }
    out
}

fn host_event(n: u64) -> EventJson {
    EventJson::Host {
        index: n,
        name: format!("w{n}"),
        state: "ok".into(),
    }
}

#[tokio::test]
async fn events_stream_with_ids_and_resume_after_last_event_id() {
    let app = app(false, cluster());
    let response = app
        .router
        .clone()
        .oneshot(get("/v1/events?kind=host"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    app.hub.publish(EventJson::Queue {
        index: 1,
        name: "q".into(),
        priority: 1,
        open: true,
        active: true,
    });
    for n in 1..=2 {
        app.hub.publish(host_event(n));
    }
    let seen = sse_events(&mut body, 2).await;
    assert_eq!(
        seen[0].1["kind"], "host",
        "the queue event was filtered out"
    );
    assert_eq!(seen[1].1["name"], "w2");
    let first_id = seen[0].0.clone().unwrap();
    drop(body);
    // Reconnect after the first: the second is replayed, then live ones follow.
    let req = Request::get("/v1/events")
        .header("Last-Event-ID", &first_id)
        .body(Body::empty())
        .unwrap();
    let mut body = app.router.clone().oneshot(req).await.unwrap().into_body();
    app.hub.publish(host_event(3));
    let seen = sse_events(&mut body, 2).await;
    let names: Vec<&str> = seen
        .iter()
        .map(|(_, e)| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w2", "w3"]);
    // An id this apiserver never gave: a resync first.
    let req = Request::get("/v1/events")
        .header("Last-Event-ID", "deadbeef-9")
        .body(Body::empty())
        .unwrap();
    let mut body = app.router.clone().oneshot(req).await.unwrap().into_body();
    let seen = sse_events(&mut body, 1).await;
    assert_eq!(seen[0].1["kind"], "resync");
}

/// A backend that never answers: the cluster hangs rather than refusing.
#[derive(Debug)]
struct Silent;

impl Backend for Silent {
    fn call(&self, _: &Caller, _: Call) -> BoxFuture<Result<Answer, ClientError>> {
        Box::pin(std::future::pending())
    }

    fn health(&self) -> Health {
        serving_with_authentication()
    }
}

fn serving_with_authentication() -> Health {
    Health {
        serving: true,
        authentication: true,
        ..Health::default()
    }
}

/// The application over `backend`, with a request deadline of 300 ms.
fn short_deadline_app(backend: Arc<dyn Backend>) -> (Router, Hub) {
    let hub = Hub::new();
    let state = AppState {
        backend: backend.clone(),
        hub: hub.clone(),
        metrics: Arc::new(Metrics::new(backend, None, hub.clone())),
        request_timeout: Duration::from_millis(300),
        openapi: Arc::new(routes::openapi()),
    };
    (routes::router(state, 4096), hub)
}

/// Never a hang: every request, and the event stream's token check, ends by the request
/// deadline with a 503 the client may retry.
#[tokio::test(start_paused = true)]
async fn a_cluster_that_never_answers_is_a_503_by_the_deadline() {
    let (router, _) = short_deadline_app(Arc::new(Silent));
    let token = Token::generate().reveal();
    for (uri, what) in [("/v1/jobs/1", "a read"), ("/v1/events", "the event stream")] {
        let mut req = get(uri);
        req.headers_mut().insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        let started = tokio::time::Instant::now();
        let (status, headers, body) =
            tokio::time::timeout(Duration::from_secs(60), send(&router, req))
                .await
                .unwrap_or_else(|_| panic!("{what}: no answer within a minute"));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
        assert_eq!(body["error"]["code"], "clusterNotReady", "{what}");
        assert!(headers.contains_key(header::RETRY_AFTER), "{what}");
        assert_eq!(started.elapsed(), Duration::from_millis(300), "{what}");
    }
    let mut post_req = post("/v1/jobs", json!({"command": ["true"]}));
    post_req.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    assert_eq!(
        send(&router, post_req).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

/// Reads the stream until it ends; `None` if it is still open after `wait`.
async fn until_the_end(body: &mut Body, wait: Duration) -> Option<()> {
    let end = async {
        while let Some(frame) = body.frame().await {
            frame.unwrap();
        }
    };
    tokio::time::timeout(wait, end).await.ok()
}

/// With authentication the event stream needs a token the cluster accepts, its re-checks
/// keep it open while the token holds, and it ends at the first re-check after a revoke.
#[tokio::test(start_paused = true)]
async fn with_authentication_the_event_stream_needs_a_token_and_ends_once_it_is_revoked() {
    let revoked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = revoked.clone();
    let script: Script = Box::new(move |_, call| match call {
        Call::Cluster if flag.load(std::sync::atomic::Ordering::SeqCst) => {
            Err(ClientError::Status {
                status: Status::Auth,
                message: "token was revoked".into(),
            })
        }
        _ => Ok(Answer::Done),
    });
    let app = app(true, script);
    let (status, _, body) = send(&app.router, get("/v1/events")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let token = Token::generate().reveal();
    let req = Request::get("/v1/events")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let response = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    app.hub.publish(host_event(1));
    assert_eq!(sse_events(&mut body, 1).await[0].1["name"], "w1");
    assert!(
        until_the_end(&mut body, Duration::from_secs(25))
            .await
            .is_none(),
        "open across two re-checks while the token holds"
    );
    revoked.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        until_the_end(&mut body, Duration::from_secs(15))
            .await
            .is_some(),
        "ended at the first re-check after the revoke"
    );
}

/// Answers the first call, then never again: a cluster that hangs after a stream opened.
#[derive(Debug, Default)]
struct HangsAfterFirst {
    calls: std::sync::atomic::AtomicUsize,
}

impl Backend for HangsAfterFirst {
    fn call(&self, _: &Caller, _: Call) -> BoxFuture<Result<Answer, ClientError>> {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Box::pin(async { Ok(Answer::Done) })
        } else {
            Box::pin(std::future::pending())
        }
    }

    fn health(&self) -> Health {
        serving_with_authentication()
    }
}

/// A re-check the cluster never answers ends by the request deadline, and the stream goes on
/// delivering.
#[tokio::test(start_paused = true)]
async fn an_unanswered_re_check_leaves_the_stream_open_and_flowing() {
    let backend = Arc::new(HangsAfterFirst::default());
    let (router, hub) = short_deadline_app(backend.clone());
    let req = Request::get("/v1/events")
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", Token::generate().reveal()),
        )
        .body(Body::empty())
        .unwrap();
    let response = router.oneshot(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // The stream is polled past its first re-check (at 10 s), which hangs.
    let quiet = tokio::time::timeout(Duration::from_secs(11), body.frame()).await;
    assert!(quiet.is_err(), "nothing to stream yet");
    let calls = backend.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(calls, 2, "the token check and one re-check");
    hub.publish(host_event(1));
    assert_eq!(sse_events(&mut body, 1).await[0].1["name"], "w1");
}
