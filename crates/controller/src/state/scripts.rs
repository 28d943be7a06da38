//! The script table: job scripts by content (their SHA-256), each stored once however many
//! jobs run it, outside the job records (a job holds the id). A submit carries a script's
//! bytes only when the primary's applied state did not hold them; one that names a script the
//! state lacks is refused with `noEnt`, naming it. Scripts are kept as long as jobs are (jobs
//! are never removed today).

use std::sync::Arc;

use xce_client::types::ScriptId;
use xce_proto::Status;

use super::{Outcome, State};

/// Refuses bytes that are not those the script id names (its SHA-256): the one check of a
/// script's bytes, at submit, at apply, in a restored backup and in a snapshot.
pub fn check_bytes(id: ScriptId, body: &[u8]) -> Result<(), String> {
    if ScriptId::of(body) == id {
        Ok(())
    } else {
        Err(format!("script {id}: the bytes are not those its id names"))
    }
}

/// Why a submit's script cannot be taken, as the caller is told.
pub(super) fn take_script(
    state: &mut State,
    id: Option<ScriptId>,
    body: Option<Arc<[u8]>>,
) -> Result<(), Outcome> {
    match (id, body) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(Outcome::rejected(
            Status::Invalid,
            "script: bytes sent for a job that names no script".to_string(),
        )),
        (Some(id), Some(body)) => {
            check_bytes(id, &body).map_err(|e| Outcome::rejected(Status::Invalid, e))?;
            state.scripts.entry(id).or_insert(body);
            Ok(())
        }
        (Some(id), None) if state.scripts.contains_key(&id) => Ok(()),
        (Some(id), None) => Err(Outcome::rejected(
            Status::NoEnt,
            format!("script {id}: not held here; send its bytes"),
        )),
    }
}

impl State {
    /// A script's bytes, by id.
    pub fn script(&self, id: &ScriptId) -> Option<Arc<[u8]>> {
        self.scripts.get(id).cloned()
    }

    /// How many distinct scripts are stored, and their bytes in all.
    pub fn script_totals(&self) -> (usize, usize) {
        (
            self.scripts.len(),
            self.scripts.values().map(|b| b.len()).sum(),
        )
    }
}
