//! A small HTTP/1.1 client for the apiserver tests (hyper, one connection per request) and a
//! reader of server-sent events.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{HeaderMap, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Where an apiserver is, and the token requests carry.
#[derive(Debug, Clone)]
pub struct Http {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub token: Option<String>,
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    /// The JSON body (`Null` when not JSON).
    pub body: Value,
    /// From sending the request to the whole answer.
    pub took: Duration,
}

impl Http {
    /// A client of the apiserver at `url` (`http://127.0.0.1:PORT`).
    pub fn new(url: &str) -> Http {
        Http {
            addr: url.trim_start_matches("http://").to_string(),
            token: None,
        }
    }

    /// The same, sending `token` as a bearer token.
    pub fn with_token(&self, token: &str) -> Http {
        Http {
            addr: self.addr.clone(),
            token: Some(token.to_string()),
        }
    }

    async fn send(
        &self,
        req: hyper::http::request::Builder,
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>, String> {
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = req.header("host", &self.addr);
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        sender.send_request(req).await.map_err(|e| e.to_string())
    }

    /// A request with `headers` and an optional JSON body, within 30 s.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, String> {
        let started = Instant::now();
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let bytes = match body {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let exchange = async {
            let response = self.send(req, bytes).await?;
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| format!("{method} {path}: no answer in 30 s"))??;
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            took: started.elapsed(),
        })
    }

    /// `GET path`; panics when there is no answer at all.
    pub async fn get(&self, path: &str) -> Answer {
        self.request("GET", path, None, &[]).await.unwrap()
    }

    /// `POST path` with a JSON body; panics when there is no answer at all.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.request("POST", path, Some(body), &[]).await.unwrap()
    }

    /// Opens `GET path` as an event stream, resuming after `last_id` when given.
    pub async fn events(&self, path: &str, last_id: Option<&str>) -> Result<Events, String> {
        let mut req = Request::builder().method("GET").uri(path);
        if let Some(id) = last_id {
            req = req.header("last-event-id", id);
        }
        let response = self.send(req, Bytes::new()).await?;
        if response.status() != 200 {
            return Err(format!("{path}: {}", response.status()));
        }
        Ok(Events {
            body: response.into_body(),
            buffer: String::new(),
        })
    }
}

/// An open event stream.
pub struct Events {
    body: Incoming,
    buffer: String,
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub data: Value,
}

impl Events {
    /// The next event, or `None` when the stream ended or none came within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let id = block
                    .lines()
                    .find_map(|l| l.strip_prefix("id: "))
                    .map(str::to_string);
                // Comments (keep-alives) carry no data.
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return Some(Event {
                        id,
                        data: serde_json::from_str(data).ok()?,
                    });
                }
                continue;
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Some(data) = frame.data_ref() {
                self.buffer.push_str(&String::from_utf8_lossy(data));
            }
        }
    }

    /// Waits for an event satisfying `wanted`, for at most `timeout`; the events before it
    /// are returned too.
    pub async fn until(
        &mut self,
        timeout: Duration,
        mut wanted: impl FnMut(&Event) -> bool,
    ) -> Option<Vec<Event>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next(left).await?;
            let done = wanted(&event);
            seen.push(event);
            if done {
                return Some(seen);
            }
        }
    }
}
