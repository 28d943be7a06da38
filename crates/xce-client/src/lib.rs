//! The client library every xce daemon and the CLI use: the candidate-list parser, the domain
//! types and their wire and JSON forms, typed operations over capnp-rpc usable from `Send`
//! code, and the failover loop that hides controller failover from callers.

pub mod agent;
pub mod array;
pub mod backlog;
pub mod backoff;
pub mod backup_file;
pub mod candidates;
pub mod classify;
pub mod client;
pub mod connection;
pub mod dependency;
pub mod events;
pub mod export;
pub mod fit;
pub mod history;
pub mod holds;
pub mod inbound;
pub mod json;
pub mod ops;
pub mod output_path;
pub mod publish;
pub mod random;
pub mod resources;
pub mod script;
pub mod shutdown;
pub mod signals;
pub mod socket;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time_limit;
pub mod tls;
pub mod tokens;
pub mod transport;
pub mod types;
pub mod version;
pub mod when;
pub mod wire;

pub use candidates::{parse_candidates, Candidate, CandidateError, MAX_CANDIDATES};
pub use client::{Client, ClientConfig, ClientError, ClientStats, RejoinFn};
pub use connection::{ConnectOptions, Connection, TransportError};
pub use xce_proto::Status;
