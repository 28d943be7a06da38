//! The `--peers` parser: any text is a list or an error, and a list it accepts reads back
//! the same once formatted.

use xce_client::candidates::format_candidates;
use xce_client::{parse_candidates, MAX_CANDIDATES};

/// Fuzzes `parse_candidates`.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(list) = parse_candidates(text) else {
        return;
    };
    assert!(!list.is_empty() && list.len() <= MAX_CANDIDATES, "{list:?}");
    let again = parse_candidates(&format_candidates(&list));
    assert_eq!(again.as_ref(), Ok(&list), "a formatted list reads back");
}
