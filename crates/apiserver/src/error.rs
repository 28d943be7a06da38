//! Every error the HTTP API answers: a status code and `{"error":{"code","message"}}` (the
//! same shape as `xce -o json`), with `Retry-After` when the cluster is not ready. A client
//! error (`ClientError`) maps by its status: `invalid` 400, `auth` 401, `perm` 403, `noEnt`
//! 404, `conflict` 409, cluster not ready or degraded 503; 500 is only for bugs.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use xce_client::json::ErrorJson;
use xce_client::{ClientError, Status};

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, for 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request is malformed; the message names the field.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    /// 401: no valid credential.
    pub fn auth(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "auth", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "noEnt", message)
    }

    /// 405.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid",
            "this method is not allowed on this path",
        )
    }

    /// 413: a body over the limit, refused before it is read.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid",
            format!("the request body is over {limit} bytes"),
        )
    }

    /// 503: the cluster cannot answer now; try again after `retry_after`.
    pub fn unavailable(message: impl Into<String>, retry_after: Duration) -> ApiError {
        ApiError {
            retry_after: Some(retry_after.as_secs_f64().ceil().max(1.0) as u64),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "clusterNotReady", message)
        }
    }

    /// 500: a bug (the backend answered what the request cannot get).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> ApiError {
        match e {
            ClientError::Status { status, message } => {
                let (code, name) = match status {
                    Status::Invalid => (StatusCode::BAD_REQUEST, "invalid"),
                    Status::Auth => (StatusCode::UNAUTHORIZED, "auth"),
                    Status::Perm => (StatusCode::FORBIDDEN, "perm"),
                    Status::NoEnt => (StatusCode::NOT_FOUND, "noEnt"),
                    Status::Conflict => (StatusCode::CONFLICT, "conflict"),
                    Status::DupJob => (StatusCode::CONFLICT, "dupJob"),
                    Status::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
                    // What the failover loop handles never ends a call; if one did, the
                    // cluster was not ready to answer.
                    Status::Ok
                    | Status::Redirect
                    | Status::Standby
                    | Status::NoMaster
                    | Status::NotReady => {
                        return ApiError::unavailable(message, Duration::from_secs(1))
                    }
                };
                ApiError::new(code, name, message)
            }
            ClientError::Degraded { remaining } => ApiError::unavailable(
                format!("the cluster is not ready (no primary served the last request); retry in {remaining:?}"),
                remaining,
            ),
            e @ (ClientError::ClusterNotReady { .. }
            | ClientError::Unreachable(_)
            | ClientError::Shutdown) => ApiError::unavailable(e.to_string(), Duration::from_secs(1)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorJson::new(self.code, &self.message));
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_their_http_codes() {
        let cases = [
            (Status::Invalid, 400),
            (Status::Auth, 401),
            (Status::Perm, 403),
            (Status::NoEnt, 404),
            (Status::Conflict, 409),
            (Status::Internal, 500),
            (Status::NoMaster, 503),
        ];
        for (status, code) in cases {
            let e = ApiError::from(ClientError::Status {
                status,
                message: "m".into(),
            });
            assert_eq!(e.status.as_u16(), code, "{status}");
        }
        let e = ApiError::from(ClientError::Degraded {
            remaining: Duration::from_millis(1500),
        });
        assert_eq!((e.status.as_u16(), e.retry_after), (503, Some(2)));
    }
}
