//! The environment a job gets: what the submitter's shell exports (`--export`, as Slurm's
//! `sbatch --export` and LSF's default), and the job's own `XCE_*` variables, which its host
//! sets last so nothing a submitter exports can fake them.
//!
//! Some of the submitter's variables would mislead or break the job on another host, and are
//! never taken from it by `ALL` (naming one in the list, or `-e NAME=VALUE`, still sets it):
//! see [`HOST_BOUND`].

use std::collections::BTreeMap;

/// Variables that describe the submitting session or host rather than the job: the host's
/// name, the shell's own bookkeeping, a login session's agents and sockets (meaningless on
/// another host), the CLI's token (a credential, which would otherwise sit in every
/// controller's log and every backup), and the `XCE_*` variables of a job the submitter itself
/// runs in (its host sets the job's own).
pub const HOST_BOUND: &[&str] = &[
    "XCE_TOKEN",
    "HOSTNAME",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "DISPLAY",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_ID",
    "DBUS_SESSION_BUS_ADDRESS",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "WINDOWID",
];

/// Whether the submitter's variable `name` stays on the submitting host under `ALL`: a
/// [`HOST_BOUND`] one, or a variable of the job the submitter runs in (its host sets the new
/// job's own). `XCE_PEERS` and the like travel: a job that submits jobs needs them.
pub fn is_host_bound(name: &str) -> bool {
    HOST_BOUND.contains(&name) || job_vars::ALL.contains(&name) || name == job_vars::JOB_SPOOL
}

/// What `--export` takes from the submitter's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Every variable but the [`HOST_BOUND`] ones (`ALL`, the default).
    pub all: bool,
    /// Variables named alone: the submitter's value, if it has one.
    pub names: Vec<String>,
    /// `NAME=VALUE` items: this value, whatever the submitter's.
    pub values: Vec<(String, String)>,
}

impl Default for Export {
    fn default() -> Self {
        Export {
            all: true,
            names: Vec::new(),
            values: Vec::new(),
        }
    }
}

/// A `--export` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("export: {0}")]
pub struct ExportError(String);

/// Parses `NONE`, `ALL`, or a comma-separated list of `NAME` and `NAME=VALUE` items, which
/// may begin with `ALL` (all of it, plus these) or `NONE` (these alone, as a list without
/// either does).
pub fn parse(text: &str) -> Result<Export, ExportError> {
    let mut export = Export {
        all: false,
        names: Vec::new(),
        values: Vec::new(),
    };
    for (i, item) in text.split(',').enumerate() {
        match item {
            "ALL" if i == 0 => export.all = true,
            "NONE" if i == 0 => {}
            "ALL" | "NONE" => {
                return Err(ExportError(format!("{item} must come first in {text:?}")))
            }
            _ => match item.split_once('=') {
                Some((name, value)) => {
                    check_name(name, text)?;
                    export.values.push((name.to_string(), value.to_string()));
                }
                None => {
                    check_name(item, text)?;
                    export.names.push(item.to_string());
                }
            },
        }
    }
    Ok(export)
}

/// A variable name as a shell can set it: letters, digits and `_`, not first a digit.
fn check_name(name: &str, text: &str) -> Result<(), ExportError> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ExportError(format!(
            "{name:?} in {text:?} is not a variable name"
        )))
    }
}

/// The most bytes a job's environment may hold, as [`size`] counts them, below cluster
/// version 8; from 8 on it shares the script limit (`jobs.max_script_bytes`, 4 MiB by
/// default) with the job's script. It is stored and replicated with the job.
pub const MAX_ENV_BYTES: usize = 64 * 1024;

/// What each text of a stored list counts beyond its bytes: the wire's pointer to it, so
/// millions of empty ones are not free. The controller bounds a command line the same way.
pub const ELEMENT_BYTES: usize = 8;

/// An environment's size as the cluster bounds it: each name and value, each with its
/// [`ELEMENT_BYTES`].
pub fn size(env: &[(String, String)]) -> usize {
    env.iter()
        .map(|(k, v)| k.len() + v.len() + 2 * ELEMENT_BYTES)
        .sum()
}

/// The job's environment from the submitter's variables (`submitter`), the export rules,
/// and `extra` (`-e NAME=VALUE`), later ones winning; in name order, so the same inputs
/// always give the same spec.
pub fn environment(
    export: &Export,
    submitter: impl IntoIterator<Item = (String, String)>,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let submitter: BTreeMap<String, String> = submitter.into_iter().collect();
    let mut env = BTreeMap::new();
    if export.all {
        for (name, value) in &submitter {
            if !is_host_bound(name) {
                env.insert(name.clone(), value.clone());
            }
        }
    }
    for name in &export.names {
        if let Some(value) = submitter.get(name) {
            env.insert(name.clone(), value.clone());
        }
    }
    for (name, value) in export.values.iter().chain(extra) {
        env.insert(name.clone(), value.clone());
    }
    env.into_iter().collect()
}

/// The variables every job gets from its host, set after its own environment.
pub mod job_vars {
    /// The job's id.
    pub const JOB_ID: &str = "XCE_JOB_ID";
    /// Its name (empty when it has none).
    pub const JOB_NAME: &str = "XCE_JOB_NAME";
    /// Its user.
    pub const JOB_USER: &str = "XCE_JOB_USER";
    /// The queue it runs in.
    pub const QUEUE: &str = "XCE_QUEUE";
    /// The directory it was submitted from.
    pub const SUBMIT_DIR: &str = "XCE_SUBMIT_DIR";
    /// The host it was submitted from.
    pub const SUBMIT_HOST: &str = "XCE_SUBMIT_HOST";
    /// The cpus it was given.
    pub const JOB_CPUS: &str = "XCE_JOB_CPUS";
    /// The memory it was given, in MiB (0: no limit).
    pub const JOB_MEM_MB: &str = "XCE_JOB_MEM_MB";
    /// The hosts it runs on (one, until jobs span hosts).
    pub const NODELIST: &str = "XCE_NODELIST";
    /// Which attempt this is (1 first; a requeue adds one).
    pub const JOB_ATTEMPT: &str = "XCE_JOB_ATTEMPT";
    /// Its time limit in seconds, or `unlimited`.
    pub const TIME_LIMIT_S: &str = "XCE_TIME_LIMIT_S";
    /// The spool dir of the worker that runs it: the mark by which a restarted worker finds
    /// its jobs' processes.
    pub const JOB_SPOOL: &str = "XCE_JOB_SPOOL";
    /// A task's array's id (set for array tasks only).
    pub const ARRAY_JOB_ID: &str = "XCE_ARRAY_JOB_ID";
    /// A task's index in its array.
    pub const ARRAY_TASK_ID: &str = "XCE_ARRAY_TASK_ID";
    /// How many tasks its array has.
    pub const ARRAY_TASK_COUNT: &str = "XCE_ARRAY_TASK_COUNT";
    /// Its array's lowest index.
    pub const ARRAY_TASK_MIN: &str = "XCE_ARRAY_TASK_MIN";
    /// Its array's highest index.
    pub const ARRAY_TASK_MAX: &str = "XCE_ARRAY_TASK_MAX";
    /// The step between its array's indices (1 for a list of several runs).
    pub const ARRAY_TASK_STEP: &str = "XCE_ARRAY_TASK_STEP";

    /// Every variable [`super::job_variables`] sets.
    pub const ALL: &[&str] = &[
        JOB_ID,
        JOB_NAME,
        JOB_USER,
        QUEUE,
        SUBMIT_DIR,
        SUBMIT_HOST,
        JOB_CPUS,
        JOB_MEM_MB,
        NODELIST,
        JOB_ATTEMPT,
        TIME_LIMIT_S,
        ARRAY_JOB_ID,
        ARRAY_TASK_ID,
        ARRAY_TASK_COUNT,
        ARRAY_TASK_MIN,
        ARRAY_TASK_MAX,
        ARRAY_TASK_STEP,
    ];
}

/// What the host knows of a job that the job's variables say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts<'a> {
    pub spec: &'a crate::types::JobSpec,
    pub id: crate::types::JobId,
    /// Its array, when it is a task (`XCE_ARRAY_*`).
    pub array_task: Option<&'a crate::types::ArrayTask>,
    pub attempt: u32,
    pub host: &'a str,
}

/// The job's own variables. The submit directory and host come from the submitter (who put
/// them in its environment); a job submitted without them (over HTTP, or by an older client)
/// gets its working directory and an empty host.
pub fn job_variables(facts: &JobFacts<'_>) -> Vec<(&'static str, String)> {
    use job_vars::*;
    let spec = facts.spec;
    let from_submitter = |name: &str| {
        spec.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut vars = vec![
        (JOB_ID, facts.id.to_string()),
        (JOB_NAME, spec.name.clone()),
        (JOB_USER, spec.user.clone()),
        // The controller names the default queue in the spec at submit.
        (QUEUE, spec.queue.clone()),
        (
            SUBMIT_DIR,
            from_submitter(SUBMIT_DIR).unwrap_or_else(|| spec.cwd.clone()),
        ),
        (SUBMIT_HOST, from_submitter(SUBMIT_HOST).unwrap_or_default()),
        (JOB_CPUS, spec.resources.cpus.max(1).to_string()),
        (JOB_MEM_MB, spec.resources.mem_mb.to_string()),
        (NODELIST, facts.host.to_string()),
        (JOB_ATTEMPT, facts.attempt.to_string()),
        (
            TIME_LIMIT_S,
            spec.limits
                .time_limit_s
                .map_or_else(|| "unlimited".to_string(), |s| s.to_string()),
        ),
    ];
    if let Some(t) = facts.array_task {
        vars.extend([
            (ARRAY_JOB_ID, t.array_id.to_string()),
            (ARRAY_TASK_ID, t.index.to_string()),
            (ARRAY_TASK_COUNT, t.count.to_string()),
            (ARRAY_TASK_MIN, t.min.to_string()),
            (ARRAY_TASK_MAX, t.max.to_string()),
            (ARRAY_TASK_STEP, t.step.to_string()),
        ]);
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn all_takes_the_submitter_s_variables_but_the_host_bound_ones() {
        let submitter = vars(&[
            ("PATH", "/opt/bin:/usr/bin"),
            ("HOSTNAME", "login1"),
            ("XCE_JOB_ID", "7"),
            ("XCE_JOB_SPOOL", "/var/spool/xce"),
            ("XCE_TOKEN", "xce_secret"),
            ("XCE_PEERS", "c1=127.0.0.1:7101"),
            ("OMP_NUM_THREADS", "4"),
        ]);
        let env = environment(&Export::default(), submitter, &vars(&[("A", "1")]));
        assert_eq!(
            env,
            vars(&[
                ("A", "1"),
                ("OMP_NUM_THREADS", "4"),
                ("PATH", "/opt/bin:/usr/bin"),
                ("XCE_PEERS", "c1=127.0.0.1:7101")
            ])
        );
    }

    #[test]
    fn none_and_lists_take_only_what_they_name() {
        let submitter = vars(&[("PATH", "/usr/bin"), ("HOME", "/home/a"), ("X", "x")]);
        let none = parse("NONE").unwrap();
        assert_eq!(environment(&none, submitter.clone(), &[]), vec![]);
        let list = parse("PATH,Y=2,UNSET_HERE").unwrap();
        assert_eq!(
            environment(&list, submitter.clone(), &[]),
            vars(&[("PATH", "/usr/bin"), ("Y", "2")])
        );
        let all_plus = parse("ALL,X=over").unwrap();
        assert_eq!(
            environment(&all_plus, submitter, &[]),
            vars(&[("HOME", "/home/a"), ("PATH", "/usr/bin"), ("X", "over")])
        );
        // Named explicitly, a host-bound variable is the submitter's choice.
        let named = parse("HOSTNAME").unwrap();
        assert_eq!(
            environment(&named, vars(&[("HOSTNAME", "login1")]), &[]),
            vars(&[("HOSTNAME", "login1")])
        );
    }

    #[test]
    fn a_bad_export_names_the_item() {
        for (bad, names) in [
            ("PATH,ALL", "ALL must come first"),
            ("1X", "\"1X\""),
            ("A-B=1", "\"A-B\""),
            ("", "\"\""),
            ("PATH,,HOME", "\"\""),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("export: ") && e.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn the_job_s_variables_are_always_all_there() {
        let spec = crate::types::JobSpec {
            env: vars(&[("XCE_SUBMIT_HOST", "login1")]),
            cwd: "/work".into(),
            queue: "normal".into(),
            ..Default::default()
        };
        let task = crate::types::ArrayTask {
            array_id: 40,
            index: 7,
            count: 50,
            min: 1,
            max: 99,
            step: 2,
        };
        let facts = JobFacts {
            spec: &spec,
            id: 42,
            array_task: Some(&task),
            attempt: 2,
            host: "w1",
        };
        let got: BTreeMap<_, _> = job_variables(&facts).into_iter().collect();
        assert_eq!(
            (
                got[job_vars::ARRAY_JOB_ID].as_str(),
                got[job_vars::ARRAY_TASK_ID].as_str(),
                got[job_vars::ARRAY_TASK_COUNT].as_str(),
                got[job_vars::ARRAY_TASK_STEP].as_str()
            ),
            ("40", "7", "50", "2")
        );
        let plain = job_variables(&JobFacts {
            array_task: None,
            ..facts
        });
        assert!(plain.iter().all(|(k, _)| !k.starts_with("XCE_ARRAY")));
        assert_eq!(got[job_vars::JOB_ID], "42");
        assert_eq!(got[job_vars::JOB_ATTEMPT], "2");
        assert_eq!(got[job_vars::SUBMIT_HOST], "login1");
        assert_eq!(got[job_vars::SUBMIT_DIR], "/work");
        assert_eq!(got[job_vars::NODELIST], "w1");
        assert_eq!(got[job_vars::TIME_LIMIT_S], "unlimited");
        let names: Vec<&str> = got.keys().copied().collect();
        let mut all = job_vars::ALL.to_vec();
        all.sort();
        assert_eq!(names, all);
    }

    proptest! {
        /// Whatever the submitter exports, `ALL` never carries a host-bound variable, and
        /// `-e` always wins.
        #[test]
        fn all_never_carries_a_host_bound_variable(
            submitter in proptest::collection::vec(("[A-Z_]{1,6}|HOSTNAME|XCE_JOB_ID|PWD", ".{0,8}"), 0..16),
            extra in proptest::collection::vec(("[A-Z]{1,4}", ".{0,8}"), 0..4),
        ) {
            let env = environment(&Export::default(), submitter, &extra);
            for (name, value) in &env {
                let from_extra = extra.iter().rev().find(|(k, _)| k == name);
                match from_extra {
                    Some((_, v)) => prop_assert_eq!(v, value),
                    None => prop_assert!(!is_host_bound(name), "{name}"),
                }
            }
        }
    }
}
