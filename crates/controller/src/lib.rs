//! xce-controller: the Raft-replicated cluster state and the client RPC service.
pub mod state;
pub mod store;
