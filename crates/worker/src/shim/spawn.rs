//! Starting the job: inside its cgroup where there is one, as its user where the worker runs
//! each job as its user, in its own process group, output to the spool, tied to this shim's
//! life.

use super::*;

/// Starts the job, inside its cgroup where there is one: the shim enters the job's cgroup,
/// spawns the job (which inherits it) and goes back to the shims' cgroup.
pub(super) fn spawn_confined(spec: &ShimSpec) -> Result<Child, String> {
    let Some(cgroups) = &spec.cgroups else {
        return spawn_job(spec);
    };
    let cg = cgroups.job(spec.id, spec.attempt);
    cg.create(spec.limits)
        .map_err(|e| format!("cannot create the job's cgroup: {e}"))?;
    let me = std::process::id() as i32;
    cg.enter(me)
        .map_err(|e| format!("cannot enter the job's cgroup: {e}"))?;
    let spawned = spawn_job(spec);
    let homes = cgroups.shims();
    if let Err(e) = cgroup::enter_all(homes.iter().map(PathBuf::as_path), me) {
        // A shim inside its job's cgroup would die with the job, or freeze with it.
        if let Ok(mut child) = spawned {
            procs::signal_group(child.id() as i32, Signal::SIGKILL);
            let _ = child.wait();
        }
        return Err(format!("cannot leave the job's cgroup: {e}"));
    }
    spawned
}

/// A job's `PATH` unless it was submitted with one.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Starts the job in its own process group, with its command, environment and working
/// directory, output to the spool.
pub(super) fn spawn_job(spec: &ShimSpec) -> Result<Child, String> {
    let Some((program, args)) = spec.command.split_first() else {
        return Err("empty command".into());
    };
    if let Some(why) = &spec.refused {
        return Err(format!("this worker does not run the job: {why}"));
    }
    let account = spec.run_as.as_ref().map(RunAs::resolve).transpose()?;
    if let (Some(script), Some(a)) = (&spec.script, &account) {
        // The job's own copy, readable by its user alone.
        nix::unistd::chown(script, Some(a.uid), Some(a.gid))
            .map_err(|e| format!("cannot give the job's script to {}: {e}", a.name))?;
    }
    // Where the job runs: its own directory, or, as a user, its user's home when it names
    // none (the worker gives its own home to a job of its account that names none).
    let cwd = match &account {
        Some(a) if spec.cwd.as_os_str().is_empty() => a.home.clone(),
        _ => spec.cwd.clone(),
    };
    let mut command = Command::new(program);
    // The job's environment is what it was submitted with (`--export`), never the worker's
    // own (a worker's settings and credentials are not the job's), over a default `PATH`;
    // the account it runs as (`USER`, `LOGNAME`, `HOME`, `SHELL`) is said after it, since
    // a submitter's would be wrong here whenever the job runs as another account.
    command.env_clear().env("PATH", DEFAULT_PATH);
    let mut account_vars: Vec<(&str, std::ffi::OsString)> = Vec::new();
    match &account {
        // As root the directory is checked here; as a user it is entered after the switch
        // (in `become_account`), so a job can never run where its user may not go.
        None => {
            // The worker's own account, from the user database (a worker started without a
            // login's variables has none to pass on); its home as the worker said.
            let me = nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten();
            if let Some(me) = &me {
                account_vars.extend([
                    ("USER", me.name.clone().into()),
                    ("LOGNAME", me.name.clone().into()),
                    ("SHELL", me.shell.clone().into_os_string()),
                ]);
            }
            if let Some(home) = spec.home.clone().or(me.map(|m| m.dir)) {
                account_vars.push(("HOME", home.into_os_string()));
            }
            if !spec.cwd.is_dir() {
                return Err(format!(
                    "working directory {} does not exist",
                    spec.cwd.display()
                ));
            }
            command
                .current_dir(&spec.cwd)
                // Its own process group: kill and suspend reach the whole job.
                .process_group(0);
        }
        Some(a) => {
            account_vars.extend([
                ("USER", a.name.clone().into()),
                ("LOGNAME", a.name.clone().into()),
                ("HOME", a.home.clone().into_os_string()),
                ("SHELL", a.shell.clone().into_os_string()),
            ]);
            become_account(&mut command, a, &cwd)?;
        }
    }
    let (stdout, stderr) = match &spec.output {
        Some(output) => open_output(output, account.as_ref(), &cwd)?,
        None => spool_output(spec, account.as_ref())?,
    };
    die_with_this_shim(&mut command);
    let who = account
        .as_ref()
        .map(|a| format!(" as {}", a.name))
        .unwrap_or_default();
    command
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .envs(account_vars)
        // Who the job is, for the job itself, and a mark that lets a restarted worker find
        // every process its previous run started, even one that left the process group.
        .env(procs::ENV_JOB_ID, spec.id.to_string())
        .env(procs::ENV_ATTEMPT, spec.attempt.to_string())
        .env(procs::ENV_SPOOL_MARK, &spec.spool)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| match e.kind() {
            // As a user, the switch and the directory can fail too: say all of it.
            _ if !who.is_empty() => format!("cannot start {program}{who}: {e}"),
            std::io::ErrorKind::NotFound => format!("command not found: {program}"),
            std::io::ErrorKind::PermissionDenied => format!("permission denied: {program}"),
            _ => format!("cannot start {program}: {e}"),
        })
}

/// Opens the job's output files, as its user where it runs as one (so that a job writes only
/// where its user may, and its files are its user's), relative to `cwd`.
fn open_output(
    output: &Output,
    account: Option<&Account>,
    cwd: &Path,
) -> Result<(std::fs::File, std::fs::File), String> {
    let _as_user = account.map(AsUser::enter).transpose()?;
    if !cwd.is_dir() {
        let whom = account
            .map(|a| format!(" to {}", a.name))
            .unwrap_or_default();
        return Err(format!(
            "working directory {} does not exist{whom}",
            cwd.display()
        ));
    }
    let open = |p: &Path| {
        use std::os::unix::fs::OpenOptionsExt;
        let path = cwd.join(p);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .append(output.append)
            .truncate(!output.append)
            .mode(0o644)
            .open(&path)
            .map_err(|e| format!("cannot open output file {}: {e}", path.display()))
    };
    let stdout = open(&output.stdout)?;
    let stderr = match &output.stderr {
        Some(p) => open(p)?,
        None => stdout
            .try_clone()
            .map_err(|e| format!("cannot share the output file for stderr: {e}"))?,
    };
    Ok((stdout, stderr))
}

/// The attempt's own output files in the spool, for a spec that names no [`Output`]:
/// created by the shim, never through a link planted there, then given to the job's user.
fn spool_output(
    spec: &ShimSpec,
    account: Option<&Account>,
) -> Result<(std::fs::File, std::fs::File), String> {
    let (out, err) = output_paths(&spec.spool, spec.id, spec.attempt);
    let open = |p: &Path| {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(if account.is_some() { 0o600 } else { 0o644 })
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(p)
            .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        if let Some(a) = account {
            nix::unistd::fchown(&file, Some(a.uid), Some(a.gid))
                .map_err(|e| format!("cannot give {} to {}: {e}", p.display(), a.name))?;
        }
        Ok::<_, String>(file)
    };
    Ok((open(&out)?, open(&err)?))
}

/// The shim's file-system identity switched to an account's (its uid, gid and groups) while
/// it lives: what the shim opens meanwhile it opens with that account's rights alone, and
/// what it creates is that account's. `setfsuid` touches file access only (no signals can be
/// sent or received as the account), and the shim is single-threaded.
struct AsUser {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    groups: Vec<nix::unistd::Gid>,
}

impl AsUser {
    fn enter(account: &Account) -> Result<AsUser, String> {
        let groups =
            nix::unistd::getgroups().map_err(|e| format!("cannot read the shim's groups: {e}"))?;
        nix::unistd::setgroups(&account.groups)
            .map_err(|e| format!("cannot take on the groups of {}: {e}", account.name))?;
        let gid = nix::unistd::setfsgid(account.gid);
        let uid = nix::unistd::setfsuid(account.uid);
        Ok(AsUser { uid, gid, groups })
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        nix::unistd::setfsuid(self.uid);
        nix::unistd::setfsgid(self.gid);
        let _ = nix::unistd::setgroups(&self.groups);
    }
}

/// Ties the job's life to this shim's: a shim killed (with its worker, say: then nothing
/// would fence the job, report it or adopt it) takes the job's leader with it, by the
/// kernel's parent-death signal. Set after the switch to the job's user (`become_account`
/// runs first), since a change of credentials clears it; a shim gone before it was set is
/// caught by the parent check.
#[allow(unsafe_code)]
pub(super) fn die_with_this_shim(command: &mut Command) {
    let shim = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only two system
    // calls (prctl, getppid), both async-signal-safe, allocating nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != shim {
                return Err(std::io::Error::other("its shim is gone"));
            }
            Ok(())
        });
    }
}

/// Makes the job's process `account` before it runs the job's program: a session of its
/// own (its own process group, so kill and suspend reach the whole job, and no terminal of
/// the worker's to reach), its supplementary groups, then its group, then its user (in that
/// order: each needs the privilege the next gives up), and only then its working directory.
/// std's `Command::uid` would drop every supplementary group, and setting them is not stable
/// std yet, so the calls are made here.
#[allow(unsafe_code)]
pub(super) fn become_account(
    command: &mut Command,
    account: &Account,
    cwd: &Path,
) -> Result<(), String> {
    let (uid, gid, groups) = (account.uid, account.gid, account.groups.clone());
    let cwd = std::ffi::CString::new(cwd.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("working directory {}: holds a NUL", cwd.display()))?;
    // SAFETY: the closure runs in the forked child before exec. It makes only system calls
    // (setsid, setgroups, setgid, setuid, chdir), all async-signal-safe, on data prepared
    // before the fork, and allocates nothing (nix passes the slice and the C string straight
    // to libc).
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            nix::unistd::setgroups(&groups)?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(uid)?;
            nix::unistd::chdir(cwd.as_c_str())?;
            Ok(())
        });
    }
    Ok(())
}
