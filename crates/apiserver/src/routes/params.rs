//! Query parameters several routes read alike: a comma-separated list of names, a time in
//! the forms of `xce jobs --since`, and a page cursor.

use xce_client::when::{self, now_ms};

use crate::error::ApiError;

/// A comma-separated list of names, each read by `parse`; `key` names the parameter.
pub(super) fn names<T>(
    key: &str,
    text: Option<&str>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ApiError> {
    match text.filter(|s| !s.is_empty()) {
        None => Ok(Vec::new()),
        Some(list) => list
            .split(',')
            .map(|s| parse(s.trim()))
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::invalid(format!("{key}: {e}"))),
    }
}

/// A time parameter in the forms of `xce history --since`.
pub(super) fn time(
    key: &str,
    text: Option<&str>,
    day: when::TimeOfDay,
) -> Result<Option<u64>, ApiError> {
    match text.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(t) => when::parse(t, now_ms(), day)
            .map(Some)
            .map_err(|e| ApiError::invalid(format!("{key}: {e}"))),
    }
}

/// Where a page starts: 0, or the `next_cursor` an earlier page gave.
pub(super) fn cursor(text: Option<&str>) -> Result<u64, ApiError> {
    match text.filter(|c| !c.is_empty()) {
        None => Ok(0),
        Some(c) => c
            .parse::<u64>()
            .ok()
            .filter(|_| c.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ApiError::invalid("cursor: not one this API gave")),
    }
}
