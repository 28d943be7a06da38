//! The cluster version, primary side: the ready primary asks every member which version its
//! build runs (`buildInfo`; a build from before the question answers `unimplemented`, so it
//! runs 6) and, once every member runs a newer one than the cluster's active version,
//! proposes raising it (`Command::RaiseVersion`) by itself: an upgrade needs no operator step
//! beyond restarting each controller on the new build. Until then, what needs the newer
//! version is refused, naming the members still on older builds ([`Node::needs_version`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use openraft::RaftNetworkFactory;
use tracing::{info, warn};
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::Node;
use crate::network::raft_client::{Network, PeerClient};
use crate::state::stored::NotInFormat;
use crate::state::{Command, Outcome};
use crate::store::{NodeId, STORE_FORMAT};

/// How often the primary asks while the cluster's version is older than its own build's.
const ASK_WHILE_OLDER: Duration = Duration::from_millis(250);
/// How often it asks once the version is its own (for the cluster report).
const ASK_SETTLED: Duration = Duration::from_secs(5);
/// How long one member's answer is waited for.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

impl Node {
    /// The cluster version in force, as applied here.
    pub fn active_version(&self) -> u32 {
        self.state.read().state.active_version()
    }

    /// The version each member's build runs, as this primary last heard it (itself always).
    pub fn member_version(&self, id: NodeId) -> Option<u32> {
        if id == self.id {
            return Some(STORE_FORMAT);
        }
        self.versions().get(&id).copied()
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, u32>> {
        self.member_versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The refusal of a request the cluster's active version cannot hold yet: `invalid`,
    /// naming what needs the newer version and the members still on older builds.
    pub fn needs_version(&self, e: &NotInFormat) -> ReplyHeader {
        let active = self.active_version();
        let behind: Vec<String> = self
            .members()
            .into_iter()
            .filter_map(|(id, member)| match self.member_version(id) {
                Some(v) if v >= e.needs => None,
                Some(v) => Some(format!("{} (version {v})", member.name)),
                None => Some(format!("{} (not heard from)", member.name)),
            })
            .collect();
        let behind = if let Some(hold) = self.hold_version.filter(|h| *h < e.needs) {
            format!(
                "the primary's configuration holds the cluster at version {hold} (hold_version)"
            )
        } else if behind.is_empty() {
            "every controller runs it now, and the primary is raising the version: try again"
                .to_string()
        } else {
            format!("still on older builds: {}", behind.join(", "))
        };
        ReplyHeader::status(
            Status::Invalid,
            format!(
                "{e}, and this cluster runs version {active} until every controller runs a build of version {} or newer; {behind}",
                e.needs
            ),
        )
    }
}

impl Node {
    /// Refuses to add a controller whose build cannot apply the cluster's version: it would
    /// stop at the first record it cannot read, a voter lost to the majority.
    pub(super) async fn check_build_of(
        &self,
        id: NodeId,
        name: &str,
        node: &openraft::BasicNode,
    ) -> Result<(), ReplyHeader> {
        let active = self.active_version();
        let mut peer = self.network.clone().new_client(id, node).await;
        match peer.build_info(ANSWER_WITHIN).await {
            Ok(info) if info.version >= active => Ok(()),
            Ok(info) => Err(ReplyHeader::status(
                Status::Invalid,
                format!(
                    "{name} runs a build of cluster version {} ({}), and this cluster runs \
                     version {active}: start it on a build of version {active} or newer",
                    info.version, info.build
                ),
            )),
            Err(e) => Err(ReplyHeader::status(
                Status::NotReady,
                format!(
                    "{name} did not say which cluster version its build runs ({e}): is it an \
                     xce controller started with --join?"
                ),
            )),
        }
    }
}

/// The primary's loop: ask, remember, raise when every member runs a newer version.
pub(super) async fn run_versions(node: Arc<Node>, mut network: Network) {
    let mut peers: BTreeMap<NodeId, PeerClient> = BTreeMap::new();
    loop {
        let active = node.active_version();
        let pause = if active < STORE_FORMAT {
            ASK_WHILE_OLDER
        } else {
            ASK_SETTLED
        };
        tokio::time::sleep(pause).await;
        if node.gate().is_err() {
            continue;
        }
        let members = node.members();
        peers.retain(|id, _| members.iter().any(|(m, _)| m == id));
        for (id, _) in &members {
            if *id == node.id || peers.contains_key(id) {
                continue;
            }
            let Some(basic) = node.basic_node(*id) else {
                continue;
            };
            peers.insert(*id, network.new_client(*id, &basic).await);
        }
        let answers = futures::future::join_all(
            peers
                .iter_mut()
                .map(|(id, peer)| async move { (*id, peer.build_info(ANSWER_WITHIN).await) }),
        )
        .await;
        let mut heard = HashMap::new();
        for (id, answer) in answers {
            match answer {
                Ok(info) => {
                    heard.insert(id, info.version);
                }
                Err(e) => {
                    tracing::debug!(member = id, error = %e, "no build version from a member")
                }
            }
        }
        *node.versions() = heard;
        let versions: Vec<Option<u32>> = members
            .iter()
            .map(|(id, _)| node.member_version(*id))
            .collect();
        if let Some(to) = raise_to(active, &versions, node.hold_version) {
            raise(&node, active, to).await;
        }
    }
}

/// The version to raise the cluster to, if any: the oldest any member runs, when every member
/// has answered and that is newer than `active` (never past this build's own, nor past the
/// version the cluster is held at).
fn raise_to(active: u32, versions: &[Option<u32>], hold: Option<u32>) -> Option<u32> {
    let oldest = versions.iter().copied().collect::<Option<Vec<u32>>>()?;
    let common = oldest
        .into_iter()
        .min()?
        .min(STORE_FORMAT)
        .min(hold.unwrap_or(u32::MAX));
    (common > active).then_some(common)
}

async fn raise(node: &Node, from: u32, to: u32) {
    info!(
        from,
        to, "every controller runs a build of cluster version {to}: raising the cluster's version"
    );
    match node.write(Command::RaiseVersion { to }).await {
        Ok(Outcome::Done) => info!(version = to, "the cluster's version is raised"),
        Ok(other) => warn!(?other, "raising the cluster's version was refused"),
        Err(h) => {
            warn!(status = ?h.status, message = %h.message, "raising the cluster's version failed; trying again")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_raised_only_when_every_member_runs_a_newer_one() {
        let v = STORE_FORMAT;
        assert_eq!(
            raise_to(6, &[Some(v), Some(v), Some(v)], None),
            Some(v).filter(|v| *v > 6)
        );
        // One older member, or one not heard from, holds it back.
        assert_eq!(raise_to(6, &[Some(v), Some(6), Some(v)], None), None);
        assert_eq!(raise_to(6, &[Some(v), None, Some(v)], None), None);
        // Never down, never sideways, never past this build.
        assert_eq!(raise_to(v, &[Some(v), Some(v)], None), None);
        assert_eq!(raise_to(6, &[Some(v + 5), Some(v + 1)], None), Some(v));
        assert_eq!(raise_to(6, &[], None), None);
        // Nor past the version the configuration holds it at.
        assert_eq!(raise_to(6, &[Some(v), Some(v)], Some(6)), None);
    }
}
