//! `/v1/events`: server-sent events from the one subscription the apiserver holds (see
//! [`crate::hub`]), filtered per client by job, user and kind, with ids and `Last-Event-ID`.
//! A client that missed events it cannot be given gets a `resync` item instead.

use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;
use xce_client::json::{ErrorJson, EventJson};

use super::AppState;
use crate::backend::{Call, Caller};
use crate::error::ApiError;
use crate::extract::Query;
use crate::hub::{Hub, Item};
use crate::shapes::EventsQuery;

/// How often an open stream re-checks its caller's token: a revoked token's stream ends.
const RECHECK: Duration = Duration::from_secs(10);

/// What a client asked to see.
#[derive(Debug, Clone, Default)]
struct Filter {
    job: Option<u64>,
    user: Option<String>,
    /// Empty: every kind.
    kinds: BTreeSet<&'static str>,
}

impl Filter {
    fn parse(q: EventsQuery) -> Result<Filter, ApiError> {
        let mut kinds = BTreeSet::new();
        for kind in q.kind.iter().flat_map(|k| k.split(',')).map(str::trim) {
            let known = match kind {
                "job" => "job",
                "host" => "host",
                "queue" => "queue",
                "resync" => "resync",
                other => {
                    return Err(ApiError::invalid(format!(
                        "kind: {other:?} is not job, host, queue or resync"
                    )))
                }
            };
            kinds.insert(known);
        }
        Ok(Filter {
            job: q.job,
            user: q.user.filter(|u| !u.is_empty()),
            kinds,
        })
    }

    fn passes(&self, event: &EventJson) -> bool {
        let kind = match event {
            // Whatever else a client filtered, it must hear that it may have missed events.
            EventJson::Resync { .. } => return true,
            EventJson::Job { .. } => "job",
            EventJson::Host { .. } => "host",
            EventJson::Queue { .. } => "queue",
        };
        if !self.kinds.is_empty() && !self.kinds.contains(kind) {
            return false;
        }
        if self.job.is_none() && self.user.is_none() {
            return true;
        }
        match event {
            EventJson::Job { id, user, .. } => {
                self.job.is_none_or(|j| j == *id) && self.user.as_ref().is_none_or(|u| u == user)
            }
            // Filtered by job or user: only job events are about one.
            _ => false,
        }
    }
}

/// The cluster's events as server-sent events. Each `data` is one event object (`kind`
/// `job`, `host`, `queue` or `resync`), each `id` can be sent back as `Last-Event-ID`.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "events",
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event seen: the stream resumes after it, or starts with a resync item when it cannot")
    ),
    responses(
        (status = 200, description = "A text/event-stream; each data is an EventJson", content_type = "text/event-stream", body = EventJson),
        (status = 400, body = ErrorJson), (status = 401, body = ErrorJson),
        (status = 503, body = ErrorJson)
    ),
    security(("bearer" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let filter = Filter::parse(q)?;
    // The caller's token holds (the controller checks it), before anything is streamed. The
    // stream has no deadline of its own, so this check has the requests' one.
    if matches!(caller, Caller::Token(_)) {
        let check = state.call("clusterInfo", &caller, Call::Cluster);
        tokio::time::timeout(state.request_timeout, check)
            .await
            .map_err(|_| super::past_deadline(state.request_timeout))??;
    }
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let start = state.hub.subscribe(last_id.as_deref());
    let mut pending: VecDeque<Out> = VecDeque::new();
    if let Some(reason) = start.resync {
        pending.push_back(Out::Resync(reason));
    }
    pending.extend(start.replay.into_iter().map(Out::Item));
    let client = Client {
        hub: state.hub.clone(),
        state: state.clone(),
        caller,
        filter,
        pending,
        live: start.live,
        recheck: tokio::time::Instant::now() + RECHECK,
    };
    let events = futures::stream::unfold(client, |mut client| async move {
        let event = client.next().await?;
        Some((Ok(event), client))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// One item due to a client.
enum Out {
    Item(Arc<Item>),
    Resync(String),
}

/// One client's stream.
struct Client {
    hub: Hub,
    state: AppState,
    caller: Caller,
    filter: Filter,
    pending: VecDeque<Out>,
    live: tokio::sync::broadcast::Receiver<Arc<Item>>,
    recheck: tokio::time::Instant,
}

impl Client {
    /// The next event this client should see; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(out) = self.pending.pop_front() {
                match out {
                    Out::Resync(reason) => return Some(resync(&reason)),
                    Out::Item(item) if self.filter.passes(&item.event) => {
                        return Some(self.event(&item))
                    }
                    Out::Item(_) => continue,
                }
            }
            tokio::select! {
                received = self.live.recv() => match received {
                    Ok(item) => self.pending.push_back(Out::Item(item)),
                    Err(RecvError::Lagged(missed)) => self.pending.push_back(Out::Resync(format!(
                        "this client fell {missed} events behind: re-read state"
                    ))),
                    Err(RecvError::Closed) => return None,
                },
                () = tokio::time::sleep_until(self.recheck), if matches!(self.caller, Caller::Token(_)) => {
                    let check = self.state.call("clusterInfo", &self.caller, Call::Cluster);
                    // Unanswered by the deadline (no cluster to ask): the stream goes on, and
                    // the next re-check, a whole period after this one ended, decides.
                    let checked = tokio::time::timeout(self.state.request_timeout, check).await;
                    self.recheck = tokio::time::Instant::now() + RECHECK;
                    if let Ok(Err(e)) = checked {
                        if matches!(e.status.as_u16(), 401 | 403) {
                            return None;
                        }
                    }
                }
            }
        }
    }

    fn event(&self, item: &Item) -> Event {
        let data = serde_json::to_string(&item.event).unwrap_or_default();
        Event::default().id(self.hub.id(item)).data(data)
    }
}

fn resync(reason: &str) -> Event {
    let item = EventJson::Resync {
        reason: reason.to_string(),
    };
    Event::default().data(serde_json::to_string(&item).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn job(id: u64, user: &str) -> EventJson {
        EventJson::Job {
            index: 1,
            id,
            state: "running".into(),
            host: None,
            attempt: 1,
            queue: "normal".into(),
            user: user.into(),
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            array_job_id: None,
            array_task_id: None,
        }
    }

    #[test]
    fn filters_pass_what_was_asked_and_always_resyncs() {
        let host = EventJson::Host {
            index: 1,
            name: "w1".into(),
            state: "ok".into(),
        };
        let resync = EventJson::Resync { reason: "r".into() };
        let all = Filter::default();
        assert!(all.passes(&job(1, "a")) && all.passes(&host));
        let by_job = Filter::parse(EventsQuery {
            job: Some(2),
            ..EventsQuery::default()
        })
        .unwrap();
        assert!(!by_job.passes(&job(1, "a")) && by_job.passes(&job(2, "a")));
        assert!(!by_job.passes(&host) && by_job.passes(&resync));
        let by_user = Filter::parse(EventsQuery {
            user: Some("bob".into()),
            ..EventsQuery::default()
        })
        .unwrap();
        assert!(by_user.passes(&job(1, "bob")) && !by_user.passes(&job(1, "alice")));
        let hosts = Filter::parse(EventsQuery {
            kind: Some("host".into()),
            ..EventsQuery::default()
        })
        .unwrap();
        assert!(hosts.passes(&host) && !hosts.passes(&job(1, "a")) && hosts.passes(&resync));
        let e = Filter::parse(EventsQuery {
            kind: Some("job,jobs".into()),
            ..EventsQuery::default()
        })
        .unwrap_err();
        assert!(e.message.contains("\"jobs\""), "{e:?}");
    }
}
