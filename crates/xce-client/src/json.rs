//! The JSON shapes of DESIGN §3, shared by `xce -o json` and the HTTP API.

use serde_json::{json, Value};

use crate::types::{ClusterInfo, Host, Job, Queue};

/// A job in the contract shape.
pub fn job(job: &Job) -> Value {
    json!({
        "id": job.id,
        "name": job.spec.name,
        "user": job.spec.user,
        "queue": job.spec.queue,
        "command": job.spec.command,
        "cwd": job.spec.cwd,
        "cpus": job.spec.cpus,
        "mem_mb": job.spec.mem_mb,
        "priority": job.spec.priority,
        "state": job.state.name(),
        "pend_reason": job.pend_reason,
        "reason": job.reason,
        "host": job.host,
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "submit_time": rfc3339(job.submit_time_ms),
        "start_time": job.start_time_ms.map(rfc3339),
        "end_time": job.end_time_ms.map(rfc3339),
    })
}

/// A queue in the contract shape.
pub fn queue(queue: &Queue) -> Value {
    json!({
        "name": queue.name,
        "priority": queue.priority,
        "open": queue.open,
        "active": queue.active,
        "pending": queue.pending,
        "running": queue.running,
    })
}

/// A host in the contract shape.
pub fn host(host: &Host) -> Value {
    json!({
        "name": host.name,
        "cpus": host.cpus,
        "mem_mb": host.mem_mb,
        "state": host.state.name(),
        "running": host.running,
        "cpus_used": host.cpus_used,
    })
}

/// The cluster in the contract shape.
pub fn cluster(info: &ClusterInfo) -> Value {
    json!({
        "primary": info.primary,
        "term": info.term,
        "members": info.members.iter().map(|m| json!({
            "name": m.name,
            "addr": m.addr,
            "role": m.role,
        })).collect::<Vec<_>>(),
        "schedulers": info.schedulers.iter().map(|s| json!({
            "name": s.name,
            "active": s.active,
        })).collect::<Vec<_>>(),
    })
}

/// An error in the contract shape: `code` is a status name or `clusterNotReady`.
/// A user token as listed (DESIGN §3 style: times as RFC 3339, `null` for never).
pub fn token_info(t: &crate::types::TokenInfo) -> Value {
    json!({
        "id": t.id,
        "user": t.user,
        "role": t.role.name(),
        "created": rfc3339(t.created_ms),
        "expires": t.expires_ms.map(rfc3339),
    })
}

pub fn error(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with second precision
/// (`2026-11-30T10:00:00Z`), without a calendar dependency.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// One item of an event stream in the `xce -o json events` shape: every line has `kind`
/// (`job`, `host`, `queue` or `resync`); a job event also `id`, `state`, `host`, `attempt`;
/// a host event `name` and `state`.
pub fn stream_item(item: &crate::events::StreamItem) -> Value {
    use crate::events::StreamItem;
    use crate::types::ClusterEvent;
    match item {
        StreamItem::Resync { reason } => json!({"kind": "resync", "reason": reason}),
        StreamItem::Event(ClusterEvent::Job {
            index,
            id,
            state,
            host,
            attempt,
            queue,
            pend_reason,
            reason,
        }) => json!({
            "kind": "job",
            "index": index,
            "id": id,
            "state": state.name(),
            "host": host,
            "attempt": attempt,
            "queue": queue,
            "pend_reason": pend_reason,
            "reason": reason,
        }),
        StreamItem::Event(ClusterEvent::Host { index, name, state }) => json!({
            "kind": "host",
            "index": index,
            "name": name,
            "state": state.name(),
        }),
        StreamItem::Event(ClusterEvent::Queue {
            index,
            name,
            priority,
            open,
            active,
        }) => json!({
            "kind": "queue",
            "index": index,
            "name": name,
            "priority": priority,
            "open": open,
            "active": active,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_032_800_000), "2026-11-30T10:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_704_067_199_999), "2023-12-31T23:59:59Z");
    }
}
