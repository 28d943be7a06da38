//! The columns `xce jobs --format` can show, as `sacct --format` takes them: names separated by
//! commas, in any case (`id,name,state,elapsed`). One table of names, headers and widths, so
//! the help, the parser and the printer cannot disagree.

use xce_client::types::Job;

use crate::output::state_shown;

/// One column of the job listing.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// What `--format` calls it.
    pub name: &'static str,
    header: &'static str,
    /// The width it is padded to (the last column is not padded).
    width: usize,
    value: fn(&Job) -> String,
}

fn ms_shown(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_string(), xce_client::json::rfc3339)
}

/// A job's id as people name it: an array task as `ARRAY_INDEX`, an array's tasks still
/// waiting in it as `ARRAY_[INDICES]` (one line however many), as Slurm's squeue does.
fn id_shown(j: &Job) -> String {
    match (&j.array_task, &j.array) {
        (Some(t), _) => format!("{}_{}", t.array_id, t.index),
        (None, Some(p)) if !p.pending.is_empty() => format!("{}_[{}]", j.id, p.pending),
        _ => j.id.to_string(),
    }
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Every column, in the order `--help` lists them.
pub const COLUMNS: &[Column] = &[
    Column {
        name: "id",
        header: "ID",
        width: 8,
        value: id_shown,
    },
    Column {
        name: "name",
        header: "NAME",
        width: 16,
        value: |j| j.spec.name.clone(),
    },
    Column {
        name: "state",
        header: "STATE",
        width: 22,
        value: state_shown,
    },
    Column {
        name: "result",
        header: "RESULT",
        width: 14,
        value: |j| or_dash(j.result.map(|r| r.name())),
    },
    Column {
        name: "queue",
        header: "QUEUE",
        width: 10,
        value: |j| j.spec.queue.clone(),
    },
    Column {
        name: "user",
        header: "USER",
        width: 10,
        value: |j| j.spec.user.clone(),
    },
    Column {
        name: "host",
        header: "HOST",
        width: 10,
        value: |j| or_dash(j.host.as_deref()),
    },
    Column {
        name: "cpus",
        header: "CPUS",
        width: 5,
        value: |j| j.spec.resources.cpus.to_string(),
    },
    Column {
        name: "mem_mb",
        header: "MEM_MB",
        width: 8,
        value: |j| j.spec.resources.mem_mb.to_string(),
    },
    Column {
        name: "time_limit",
        header: "TIME_LIMIT",
        width: 12,
        value: |j| {
            j.spec
                .limits
                .time_limit_s
                .map_or_else(|| "UNLIMITED".to_string(), xce_client::time_limit::format)
        },
    },
    Column {
        name: "priority",
        header: "PRIO",
        width: 6,
        value: |j| j.spec.priority.to_string(),
    },
    Column {
        name: "submit",
        header: "SUBMIT",
        width: 21,
        value: |j| ms_shown(Some(j.submit_time_ms)),
    },
    Column {
        name: "start",
        header: "START",
        width: 21,
        value: |j| ms_shown(j.start_time_ms),
    },
    Column {
        name: "end",
        header: "END",
        width: 21,
        value: |j| ms_shown(j.end_time_ms),
    },
    Column {
        name: "expected_start",
        header: "EXPECTED_START",
        width: 21,
        value: |j| ms_shown(j.expected_start_ms),
    },
    Column {
        name: "account",
        header: "ACCOUNT",
        width: 12,
        value: |j| {
            if j.spec.account.is_empty() {
                "-".to_string()
            } else {
                j.spec.account.clone()
            }
        },
    },
    Column {
        name: "attempt",
        header: "ATTEMPT",
        width: 8,
        value: |j| j.attempt.to_string(),
    },
    Column {
        name: "runs",
        header: "RUNS",
        width: 5,
        value: |j| j.runs.to_string(),
    },
    Column {
        name: "exit_code",
        header: "EXIT",
        width: 5,
        value: |j| or_dash(j.exit_code),
    },
    Column {
        name: "elapsed",
        header: "ELAPSED",
        width: 12,
        // Whole seconds between the times shown, as JSON's `elapsed_s` (Slurm's Elapsed).
        value: |j| match (j.start_time_ms, j.end_time_ms) {
            (Some(start), Some(end)) => {
                let secs = (end / 1000).saturating_sub(start / 1000);
                xce_client::time_limit::format(u32::try_from(secs).unwrap_or(u32::MAX))
            }
            _ => "-".to_string(),
        },
    },
    Column {
        name: "cpu_time",
        header: "CPU_TIME",
        width: 12,
        // User and system CPU, as Slurm's TotalCPU.
        value: |j| {
            j.usage.map_or_else(
                || "-".to_string(),
                |u| {
                    format!(
                        "{:.1}s",
                        u.cpu_user_ms.saturating_add(u.cpu_sys_ms) as f64 / 1000.0
                    )
                },
            )
        },
    },
    Column {
        name: "max_rss_mb",
        header: "MAX_RSS_MB",
        width: 11,
        value: |j| {
            j.usage.map_or_else(
                || "-".to_string(),
                |u| format!("{:.1}", u.max_rss_kb as f64 / 1024.0),
            )
        },
    },
    Column {
        name: "pend_code",
        header: "PEND_CODE",
        width: 15,
        value: |j| or_dash(j.pend_code.map(|c| c.name())),
    },
    Column {
        name: "reason",
        header: "REASON",
        width: 30,
        value: |j| or_dash(j.reason.as_deref().or(j.pend_reason.as_deref())),
    },
    Column {
        name: "command",
        header: "COMMAND",
        width: 30,
        // A script job by its name and arguments (its script is `xce job ID --script`).
        value: |j| match j.spec.script {
            Some(_) => std::iter::once(format!("[script {}]", j.spec.name))
                .chain(j.spec.command.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
            None => j.spec.command.join(" "),
        },
    },
];

/// What `xce jobs` shows without `--format`.
pub const DEFAULT: &str = "id,state,queue,user,host,command";

/// What `xce jobs --start` shows: pending jobs and their reserved starts.
pub const START: &str = "id,user,queue,expected_start,pend_code,reason";

/// What `xce history` shows without `--format`.
pub const HISTORY: &str = "id,name,user,account,queue,state,result,exit_code,start,end,elapsed";

/// Every column's name, for `--help` and errors.
pub fn names() -> String {
    COLUMNS
        .iter()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns `spec` names; an unknown one is named with the ones there are.
pub fn parse(spec: &str) -> Result<Vec<Column>, String> {
    let mut out = Vec::new();
    for name in spec.split(',').map(str::trim) {
        let found = COLUMNS
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("format: no column {name:?}; there are {}", names()))?;
        out.push(*found);
    }
    Ok(out)
}

/// The header line.
pub fn header(columns: &[Column]) -> String {
    line(columns, |c| c.header.to_string())
}

/// One job's line.
pub fn row(columns: &[Column], job: &Job) -> String {
    line(columns, |c| (c.value)(job))
}

fn line(columns: &[Column], cell: impl Fn(&Column) -> String) -> String {
    let mut out = String::new();
    for (i, c) in columns.iter().enumerate() {
        let text = cell(c);
        if i + 1 == columns.len() {
            out.push_str(&text);
        } else {
            out.push_str(&format!("{text:<width$} ", width = c.width));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_columns_are_the_listing_as_it_always_was() {
        let columns = parse(DEFAULT).unwrap();
        assert_eq!(
            header(&columns),
            format!(
                "{:<8} {:<22} {:<10} {:<10} {:<10} COMMAND",
                "ID", "STATE", "QUEUE", "USER", "HOST"
            )
        );
    }

    #[test]
    fn columns_are_named_in_any_case_and_an_unknown_one_is_refused_by_name() {
        let columns = parse("ID, Name,elapsed_typo").unwrap_err();
        assert!(
            columns.contains("\"elapsed_typo\"") && columns.contains("time_limit"),
            "{columns}"
        );
        let ok = parse("ID,Name,result").unwrap();
        assert_eq!(
            ok.iter().map(|c| c.name).collect::<Vec<_>>(),
            ["id", "name", "result"]
        );
        let job = Job {
            id: 7,
            spec: xce_client::types::JobSpec::default(),
            state: xce_client::types::JobState::Pending,
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            host: None,
            attempt: 0,
            runs: 0,
            exit_code: None,
            signal: None,
            submit_time_ms: 0,
            start_time_ms: None,
            end_time_ms: None,
            output_dir: None,
            cancelled_by: None,
            dependency_state: None,
            array: None,
            array_task: None,
            expected_start_ms: None,
            usage: None,
            attempts: Vec::new(),
        };
        assert_eq!(row(&ok, &job), format!("{:<8} {:<16} -", 7, ""));
    }

    #[test]
    fn every_column_has_its_own_name() {
        let mut names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COLUMNS.len());
    }
}
