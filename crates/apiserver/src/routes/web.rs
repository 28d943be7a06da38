//! The web view at `/`: one page, served from the binary (no build step), that reads the
//! API like any client and follows `/v1/events`.

use axum::http::header;
use axum::response::IntoResponse;

/// The page.
const INDEX: &str = include_str!("../../assets/index.html");

/// `/`.
pub async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX,
    )
}
