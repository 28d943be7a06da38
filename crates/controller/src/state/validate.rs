//! Checks on what clients send that need no state: bounded sizes and well-formed names. The
//! service runs them before a request costs a log entry; `apply` runs them again, so that the
//! state machine stands alone.

use xce_client::types::JobSpec;

/// Largest name-like field (job name, user, queue), in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest working directory, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest command line or environment, in bytes. Bounded specs keep every Raft batch and
/// every message far below capnp's message limit.
pub const MAX_LIST_BYTES: usize = 64 * 1024;

/// Refuses a field longer than `max` bytes, naming it.
pub fn check_size(field: &str, len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{field}: {len} bytes, at most {max} allowed"));
    }
    Ok(())
}

/// Checks a job spec; the error names the field.
pub fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    check_size("name", spec.name.len(), MAX_NAME_BYTES)?;
    check_size("user", spec.user.len(), MAX_NAME_BYTES)?;
    check_size("queue", spec.queue.len(), MAX_NAME_BYTES)?;
    check_size("cwd", spec.cwd.len(), MAX_PATH_BYTES)?;
    check_size(
        "command",
        spec.command.iter().map(String::len).sum(),
        MAX_LIST_BYTES,
    )?;
    check_size(
        "env",
        spec.env.iter().map(|(k, v)| k.len() + v.len()).sum(),
        MAX_LIST_BYTES,
    )?;
    match spec.command.first() {
        None => return Err("command: must not be empty".into()),
        Some(arg0) if arg0.trim().is_empty() => {
            return Err("command: the program name must not be empty".into())
        }
        Some(_) => {}
    }
    if spec.cpus < 0 {
        return Err(format!("cpus: must not be negative (got {})", spec.cpus));
    }
    if spec.mem_mb < 0 {
        return Err(format!(
            "mem_mb: must not be negative (got {})",
            spec.mem_mb
        ));
    }
    if let Some((k, _)) = spec
        .env
        .iter()
        .find(|(k, _)| k.is_empty() || k.contains('='))
    {
        return Err(format!("env: invalid variable name {k:?}"));
    }
    Ok(())
}

/// Checks a host name as given by a worker (`--name`).
pub fn validate_host_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "host.name: {name:?} must be letters, digits, '-', '_' or '.'"
        ))
    }
}
