//! Extractors that refuse bad input in the API's own error shape (axum's answer plain text):
//! a JSON body, query parameters, a path segment, and who the caller is.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;
use xce_client::tokens::Token;

use crate::backend::Caller;
use crate::error::ApiError;
use crate::routes::AppState;

/// A JSON body, an object; a malformed one is 400 naming what is wrong, one over the limit
/// 413. (serde would read a struct from an array of its fields in order too, which no
/// document of ours says.)
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let mime = v.split(';').next().unwrap_or("").trim();
                mime == "application/json" || mime.ends_with("+json")
            });
        if !json {
            return Err(ApiError::invalid(
                "body: expected a request with `Content-Type: application/json`",
            ));
        }
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => bytes,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    code: "invalid",
                    message: format!("the request body is too large: {}", e.body_text()),
                    retry_after: None,
                })
            }
            Err(e) => return Err(ApiError::invalid(format!("body: {}", e.body_text()))),
        };
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ApiError::invalid("body: must be a JSON object"));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(e) => Err(ApiError::invalid(format!("body: {}", e.body_text()))),
        }
    }
}

/// Query parameters; malformed ones are 400 naming the parameter.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e: QueryRejection| ApiError::invalid(format!("query: {}", e.body_text())))
    }
}

/// Path parameters; a malformed one (a job id that is not a number) is 400.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Path(v))
            .map_err(|e: PathRejection| ApiError::invalid(format!("path: {}", e.body_text())))
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// `Authorization: Bearer TOKEN` (a user token, checked by the controller on the call);
    /// without one, anonymous while authentication is off, and 401 when it is on.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return if state.backend.health().authentication {
                Err(ApiError::auth(
                    "no token: send Authorization: Bearer TOKEN (xce token create makes one)",
                ))
            } else {
                Ok(Caller::Anonymous)
            };
        };
        let text = value
            .to_str()
            .map_err(|_| ApiError::auth("Authorization: not text"))?;
        let token = text
            .strip_prefix("Bearer ")
            .ok_or_else(|| ApiError::auth("Authorization: not a Bearer token"))?;
        Token::parse(token)
            .map(Caller::Token)
            .map_err(|e| ApiError::auth(format!("Authorization: {e}")))
    }
}
