//! The controller's network surfaces: the capnp service (client interface and inbound Raft) and
//! the outbound Raft client to the other controllers.

pub mod codec;
pub mod push;
pub mod raft_client;
pub mod service;
