//! Encoding of openraft's messages inside the `Raft` capnp interface. Append-entries requests
//! (the hot path, carrying batches) use compact postcard (the same encoding as the log); the small, rarer messages and every
//! reply use JSON, whose serde support for openraft's error types is complete.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Encodes a hot-path message.
pub fn to_bin<T: Serialize>(value: &T) -> Result<Vec<u8>, capnp::Error> {
    postcard::to_stdvec(value).map_err(|e| capnp::Error::failed(format!("encode: {e}")))
}

/// Decodes a hot-path message.
pub fn from_bin<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, capnp::Error> {
    postcard::from_bytes(bytes).map_err(|e| capnp::Error::failed(format!("decode: {e}")))
}

/// Encodes a control message or reply.
pub fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, capnp::Error> {
    serde_json::to_vec(value).map_err(|e| capnp::Error::failed(format!("encode: {e}")))
}

/// Decodes a control message or reply.
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, capnp::Error> {
    serde_json::from_slice(bytes).map_err(|e| capnp::Error::failed(format!("decode: {e}")))
}
