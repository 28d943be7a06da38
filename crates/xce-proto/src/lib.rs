//! The xce wire protocol: Cap'n Proto schemas (in `schema/`), their generated Rust (committed,
//! so that plain `cargo` builds it) and the status taxonomy every component shares.

#[rustfmt::skip]
#[allow(clippy::all, clippy::unwrap_used, unused, missing_docs)]
#[path = "generated/xce_capnp.rs"]
pub mod xce_capnp;

mod status;

pub use status::{Status, UnknownStatus, ALL_STATUSES};
