//! How a retired job is stored: the store format it was written in (four bytes, little
//! endian), then its [`JobRecord`] of that format (postcard). A build whose format changes
//! the job record reads older records through the step from the frozen format's record, as a
//! snapshot's jobs take it (`state::stored::migrate`); format 13 is the first and only one.

use xce_client::types::Job;

use crate::state::JobRecord;
use crate::store::STORE_FORMAT;

/// The oldest format a history record is written in: jobs retire from version 13 on.
const FIRST_FORMAT: u32 = 13;

/// A job's record, in this build's format.
pub fn encode(job: &Job) -> Result<Vec<u8>, String> {
    let format = STORE_FORMAT.to_le_bytes().to_vec();
    postcard::to_extend(&JobRecord::from(job.clone()), format).map_err(|e| e.to_string())
}

/// A job from its record, of any format this build reads.
pub fn decode(bytes: &[u8]) -> Result<Job, String> {
    let (format, body) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| format!("{} bytes: too short for a record", bytes.len()))?;
    let format = u32::from_le_bytes(*format);
    if !(FIRST_FORMAT..=STORE_FORMAT).contains(&format) {
        return Err(format!(
            "record of format {format}; this build reads history records of formats \
             {FIRST_FORMAT} to {STORE_FORMAT}"
        ));
    }
    let record: JobRecord = postcard::from_bytes(body).map_err(|e| e.to_string())?;
    Ok(Job::from(record))
}
