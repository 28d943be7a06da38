//! What the worker tells a shim about the attempt it runs (JSON on a forked shim's pipe or an
//! exec'd shim's stdin): the job, the lease, the cgroups, whom it runs as, the time limit.

use super::*;

/// What the worker tells a shim about the attempt it is to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    pub id: JobId,
    pub attempt: u32,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Where the job runs; empty when it runs as its user and named none (their home).
    pub cwd: PathBuf,
    /// The worker's spool dir, canonical: outbox, records, lease and output live there.
    pub spool: PathBuf,
    pub kill_grace_ms: u64,
    /// The lease deadline when the shim was started (boot-time ms); the lease file has the
    /// current one.
    pub fence_at_ms: Option<u64>,
    /// The worker's cgroups, if the host has them: the job gets one of its own.
    pub cgroups: Option<Cgroups>,
    /// Enforced where there are cgroups.
    pub limits: Limits,
    /// The user the job runs as, when the worker runs each job as its user (as root);
    /// `None`: as the worker's own account.
    pub run_as: Option<RunAs>,
    /// Why this worker may not run the job at all (its user's jobs do not run here): the
    /// worker's own check, behind the controller's.
    pub refused: Option<String>,
    /// An older copy of this job that this attempt fences: the job starts only once that
    /// copy's shim (which kills its copy when told it is stale) is gone, so two attempts of
    /// a job never run at once on this host.
    #[serde(default)]
    pub after: Option<FencedCopy>,
    /// The worker that sent it: an attempt that waits out an older copy does not start once
    /// that worker is gone (a restarted one could not know of it). `None` from older
    /// workers, whose shims were their children: the parent is checked instead.
    #[serde(default)]
    pub worker: Option<ProcRecord>,
    /// A retired report's file to write the attempt's record into, instead of creating one
    /// ([`crate::outbox::Spares`]). `None` from older workers, or when there is no spare.
    #[serde(default)]
    pub spare: Option<PathBuf>,
    /// How long the job may run, in seconds from its start, not counting time suspended:
    /// the shim stops it there and reports it timed out. Its clock is the shim's, so a
    /// controller failover or a worker restart neither resets nor doubles it.
    #[serde(default)]
    pub time_limit_s: Option<u32>,
    /// The copy of the job's script this attempt runs (its command names it): given to the
    /// job's user before the job starts, removed once it has ended.
    #[serde(default)]
    pub script: Option<PathBuf>,
    /// Where the job's output goes; `None` (older workers, tests): files of the attempt's
    /// own in the spool.
    #[serde(default)]
    pub output: Option<Output>,
    /// The signal the job gets some time before its time limit (`--signal`), once.
    #[serde(default)]
    pub warning: Option<xce_client::signals::Warning>,
    /// The worker's account's home, when the job runs as that account: its `HOME`. `None`
    /// (older workers, tests): the user database's.
    #[serde(default)]
    pub home: Option<PathBuf>,
}

/// The files a job's output goes to: relative ones in its working directory. Opened by the
/// shim as the job's user, so a job can only write where its user may.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    pub stdout: PathBuf,
    /// `None`: stderr goes into stdout's file.
    pub stderr: Option<PathBuf>,
    /// Appended to rather than truncated (`--open-mode`; a requeued job's later attempts
    /// by default, so no attempt's output is lost).
    pub append: bool,
}

/// The older copy a newer attempt waits out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencedCopy {
    pub attempt: u32,
    pub shim: ProcRecord,
}

/// Whom a job runs as: looked up in this host's user database when the job starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub user: String,
    /// Whether a job of root (uid 0) may run; refused otherwise.
    pub allow_root: bool,
}

/// An account a job runs as, resolved from the user database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Account {
    pub(super) name: String,
    pub(super) uid: nix::unistd::Uid,
    pub(super) gid: nix::unistd::Gid,
    pub(super) groups: Vec<nix::unistd::Gid>,
    pub(super) home: PathBuf,
    pub(super) shell: PathBuf,
}

impl RunAs {
    /// The account, with its supplementary groups; refuses a user this host does not know
    /// and uid 0 unless allowed, with the reason the job's end will carry.
    pub(super) fn resolve(&self) -> Result<Account, String> {
        if self.user.is_empty() {
            return Err("the job names no user to run as".into());
        }
        let user = nix::unistd::User::from_name(&self.user)
            .map_err(|e| format!("cannot look up user {}: {e}", self.user))?
            .ok_or_else(|| format!("user {} does not exist on this host", self.user))?;
        if user.uid.is_root() && !self.allow_root {
            return Err(format!(
                "user {} is root (uid 0), and this worker does not run root's jobs",
                self.user
            ));
        }
        let name = std::ffi::CString::new(user.name.as_str())
            .map_err(|_| format!("user {}: the name holds a NUL", self.user))?;
        let groups = nix::unistd::getgrouplist(&name, user.gid)
            .map_err(|e| format!("cannot list the groups of user {}: {e}", self.user))?;
        Ok(Account {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            groups,
            home: user.dir,
            shell: user.shell,
        })
    }
}

/// Where an attempt's output goes when its spec names no [`Output`].
pub fn output_paths(spool: &Path, id: u64, attempt: u32) -> (PathBuf, PathBuf) {
    (
        spool.join(format!("{id}.{attempt}.out")),
        spool.join(format!("{id}.{attempt}.err")),
    )
}

/// Where the worker leaves a running attempt's new time limit for its shim (`xce update
/// --time`): the seconds, or `none`. The shim reads it when told (SIGHUP) and when it
/// starts the job (a limit set while the start waited).
pub fn limit_file(spool: &Path, id: u64, attempt: u32) -> PathBuf {
    spool.join("limits").join(format!("{id}.{attempt}"))
}

/// The limit a limit file holds: `Some(None)` for none, `None` when there is no file (or it
/// cannot be read: the limit stays).
pub(super) fn read_limit(path: &Path) -> Option<Option<u32>> {
    let text = std::fs::read_to_string(path).ok()?;
    match text.trim() {
        "none" => Some(None),
        seconds => seconds.parse().ok().map(Some),
    }
}

/// Writes a limit file whole (renamed into place, so a shim never reads half of one).
pub fn write_limit(
    spool: &Path,
    id: u64,
    attempt: u32,
    limit_s: Option<u32>,
) -> std::io::Result<()> {
    let path = limit_file(spool, id, attempt);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = limit_s.map_or_else(|| "none".to_string(), |s| s.to_string());
    let tmp = path.with_file_name(format!("{id}.{attempt}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}
