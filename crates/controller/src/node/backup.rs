//! Backups: a consistent copy of the state from the primary.

use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::Node;
use crate::store::backup;

impl Node {
    /// A backup file of the state, taken after a linearizability check, so it holds every
    /// write acknowledged before the call; and the log index it was taken at. The state is
    /// copied under the lock (its jobs are shared, not copied) and encoded off this thread.
    pub async fn backup(&self) -> Result<(Vec<u8>, u64), ReplyHeader> {
        self.read(|_| ()).await?;
        let (state, index) = {
            let applied = self.state.read();
            let index = applied.last_applied.map_or(0, |l| l.index);
            (applied.state.clone(), index)
        };
        let internal = |e: String| ReplyHeader::status(Status::Internal, format!("backup: {e}"));
        let encoded = tokio::task::spawn_blocking(move || {
            let bytes = state.snapshot_bytes().map_err(|e| e.to_string())?;
            Ok::<_, String>(backup::encode(index, super::now_ms(), bytes))
        })
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(internal)?;
        encoded
            .map(|bytes| (bytes, index))
            .map_err(|e| ReplyHeader::status(Status::Invalid, e.to_string()))
    }
}
