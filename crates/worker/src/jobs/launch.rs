//! Starting an attempt under a shim of its own: the doubt a start may carry (a late or
//! crossing order, parked for the primary's word), the spec the shim runs, and the launch.

use super::*;

impl Jobs {
    /// Starts `attempt` of `job`, as pushed through the agent capability of the last answered
    /// join. For tests: the worker's own pushes go through [`Jobs::start_from`] with the
    /// number they came through.
    pub fn start(self: &Arc<Self>, job: Job, attempt: u32) {
        self.start_from(job, attempt, u64::MAX, None);
    }

    /// [`Jobs::start`] for a job with a script: its bytes, as a start carries them.
    pub fn start_script(self: &Arc<Self>, job: Job, attempt: u32, script: Vec<u8>) {
        self.start_from(job, attempt, u64::MAX, Some(script));
    }

    /// Starts `attempt` of `job` under a shim of its own, unless this worker already holds
    /// it (a start sent again after a failover). A newer attempt fences an older copy still
    /// held here. While a join is unanswered the start waits ([`crate::join_window`]); so
    /// does, until the primary says it is still due here, a start that came through the
    /// agent capability (`generation`) of an older join than the last answered one (over a
    /// connection this worker has left: a deposed primary's late push), or for an attempt no
    /// newer than one this worker let go of ([`crate::ended`]).
    pub fn start_from(
        self: &Arc<Self>,
        job: Job,
        attempt: u32,
        generation: u64,
        script: Option<Vec<u8>>,
    ) {
        let id = job.id;
        let mut table = self.table();
        let mut fenced = None;
        if let Some(old) = table.get(&id).copied() {
            if old.attempt >= attempt {
                debug!(
                    job = id,
                    attempt, "start for an attempt already held; ignored"
                );
                return;
            }
            // A parked older attempt never ran: it is let go, and the copy it was to wait
            // for is this one's to wait for. One that waited for room never ran either.
            fenced = self.window().forget(id);
            let (withdrawn, admitted) = self.admission().withdraw(id);
            if let Some(((_, older), _)) = withdrawn {
                info!(
                    job = id,
                    attempt = older,
                    "a newer attempt arrived; the older one never ran"
                );
            }
            self.run_waited(&mut table, admitted);
            if let Some(shim) = old.shim.filter(|_| old.phase != HeldPhase::Finished) {
                warn!(
                    job = id,
                    attempt = old.attempt,
                    "a newer attempt arrived; killing the old copy"
                );
                signal_shim(shim, Signal::SIGUSR2);
                fenced = Some(FencedCopy {
                    attempt: old.attempt,
                    shim,
                });
            }
        }
        let doubt = if self.window().from_a_left_connection(generation) {
            Some(Doubt::LeftConnection)
        } else if table.contains_key(&id) {
            None
        } else {
            self.ended().covering(id, attempt).map(Doubt::Ended)
        };
        let start = Parked {
            job,
            attempt,
            fenced,
            script,
        };
        let parked = match doubt {
            None => self.window().park(start),
            Some(_) => {
                self.window().hold(start);
                None
            }
        };
        let Some(start) = parked else {
            table.insert(id, Held::new(attempt, HeldPhase::Running));
            let Some(doubt) = doubt else {
                info!(
                    job = id,
                    attempt, "start waits for this worker's join to be answered"
                );
                return;
            };
            warn!(
                job = id,
                attempt,
                why = %doubt,
                "a late order? The start waits until the primary says it is still due"
            );
            // While a join is unanswered, its answer has the primary asked.
            if !self.window().is_open() {
                self.ask_about(id, attempt);
            }
            return;
        };
        self.launch(table, start);
    }

    /// Launches the attempt's shim if the host has room for it now, else holds it until an
    /// end frees enough ([`crate::admission`]); with the job table held throughout (nothing
    /// can start or fence the job meanwhile).
    pub(super) fn launch(
        self: &Arc<Self>,
        mut table: MutexGuard<'_, HashMap<JobId, Held>>,
        start: Parked,
    ) {
        let (id, attempt) = (start.job.id, start.attempt);
        let need = start.job.spec.resources.clone();
        let admitted = self.admission().admit((id, attempt), need, start);
        let Some(start) = admitted else {
            if table.get(&id).is_none_or(|h| h.attempt != attempt) {
                table.insert(id, Held::new(attempt, HeldPhase::Running));
            }
            let waiting = self.admission().waiting();
            info!(
                job = id,
                attempt, waiting, "start waits for room on this host; it runs when one ends"
            );
            return;
        };
        self.run_admitted(&mut table, vec![start]);
    }

    /// Launches starts that waited for room and now have it, unless the worker stops: then
    /// none of them runs (the primary sends them again after a rejoin).
    pub(super) fn run_waited(
        self: &Arc<Self>,
        table: &mut HashMap<JobId, Held>,
        starts: Vec<Parked>,
    ) {
        if !*self.stop.borrow() {
            return self.run_admitted(table, starts);
        }
        let mut starts: std::collections::VecDeque<Parked> = starts.into();
        while let Some(start) = starts.pop_front() {
            let (id, attempt) = (start.job.id, start.attempt);
            info!(
                job = id,
                attempt, "the worker stops; a start that waited for room is not run"
            );
            starts.extend(self.admission().ended((id, attempt)));
            drop_attempt(table, id, attempt);
        }
    }

    /// Launches starts admission let in, and those that the failure of one lets in after it.
    pub(super) fn run_admitted(
        self: &Arc<Self>,
        table: &mut HashMap<JobId, Held>,
        starts: Vec<Parked>,
    ) {
        let mut starts: std::collections::VecDeque<Parked> = starts.into();
        while let Some(start) = starts.pop_front() {
            let key = (start.job.id, start.attempt);
            if let Err(why) = self.run_start(table, start) {
                starts.extend(self.admission().ended(key));
                self.not_launched(table, key.0, key.1, why);
            }
        }
    }

    /// Launches one admitted attempt's shim; why not, if it cannot.
    fn run_start(
        self: &Arc<Self>,
        table: &mut HashMap<JobId, Held>,
        start: Parked,
    ) -> Result<(), String> {
        let Parked {
            job,
            attempt,
            fenced,
            script,
        } = start;
        let id = job.id;
        let span = tracing::info_span!("job", id, attempt);
        let spec = ShimSpec {
            after: fenced,
            ..self.shim_spec(&job, attempt, script.as_deref())?
        };
        let launched = match self.launcher.launch(&spec) {
            Ok(launched) => launched,
            Err(e) => {
                self.return_spare(&spec);
                if let Some(copy) = &spec.script {
                    let _ = std::fs::remove_file(copy);
                }
                return Err(format!("cannot start the job's supervisor: {e}"));
            }
        };
        // A suspend that came while the start waited holds: the job stops once it starts.
        let phase = table
            .get(&id)
            .filter(|h| h.attempt == attempt)
            .map_or(HeldPhase::Running, |h| h.phase);
        table.insert(
            id,
            Held {
                shim: Some(launched.shim),
                ..Held::new(attempt, phase)
            },
        );
        let jobs = self.clone();
        tokio::spawn(async move { jobs.supervise(launched, spec).await }.instrument(span));
        Ok(())
    }

    /// Ends an attempt that could not be launched: failed, with `why`.
    fn not_launched(
        self: &Arc<Self>,
        table: &mut HashMap<JobId, Held>,
        id: JobId,
        attempt: u32,
        why: String,
    ) {
        warn!(job = id, attempt, error = %why, "cannot start the job's shim");
        table.insert(id, Held::new(attempt, HeldPhase::Finished));
        let (jobs, end) = (self.clone(), JobEnd::Failed(why));
        let span = tracing::info_span!("job", id, attempt);
        tokio::spawn(async move { jobs.finish(id, attempt, end).await }.instrument(span));
    }

    /// An admitted attempt's processes are gone: the starts that waited for its share run.
    pub(super) fn free(self: &Arc<Self>, id: JobId, attempt: u32) {
        let mut table = self.table();
        let admitted = self.admission().ended((id, attempt));
        if !admitted.is_empty() {
            self.run_waited(&mut table, admitted);
        }
    }

    /// Puts the spare a shim was given back in the pool if it is still there: the launch
    /// failed, or the shim ended before it wrote its record (it started nothing). A shim
    /// that wrote its record renamed the spare away.
    pub(super) fn return_spare(&self, spec: &ShimSpec) {
        if let Some(spare) = spec.spare.as_deref().filter(|s| s.exists()) {
            let _ = self.spares.keep(spare);
        }
    }

    /// What the attempt's shim is told; writes the job's script copy. Refuses, with the
    /// reason the job's end carries, what cannot run here.
    pub(super) fn shim_spec(
        &self,
        job: &Job,
        attempt: u32,
        script_body: Option<&[u8]>,
    ) -> Result<ShimSpec, String> {
        // Every spec field decided here: a new one fails to compile until the host's part of
        // it is carried to the shim, or named as none of the host's business.
        let xce_client::types::JobSpec {
            name: _,
            user,
            queue: _,
            command,
            env,
            cwd,
            // Generic resources are not bound to a job on its host yet: counted only.
            resources:
                xce_client::types::Resources {
                    cpus,
                    mem_mb,
                    gres: _,
                },
            priority: _,
            limits: xce_client::types::Limits { time_limit_s },
            // The script is run from its copy in the spool, its bytes carried with the start.
            script,
            // Resolved by `output_path::of_job`, with the job's name, user and cwd.
            stdout: _,
            stderr: _,
            open_mode,
            // The controller's and the scheduler's business: a job reaches its host held by
            // neither.
            hold: _,
            begin_time_ms: _,
            warn_signal,
            // The controller's business, when a host is lost.
            no_requeue: _,
            // The controller's business: a job reaches its host once its dependency is met.
            dependency: _,
            kill_on_invalid_dep: _,
            // A task reaches its host as a job of its own (its array in `job.array_task`).
            array: _,
            // The controller's business: who the job's use is charged to.
            account: _,
        } = &job.spec;
        let run_as = match self.settings.job_users {
            xce_client::types::JobUsers::EachUser { root } => Some(RunAs {
                user: user.clone(),
                allow_root: root,
            }),
            xce_client::types::JobUsers::Any | xce_client::types::JobUsers::Only(_) => None,
        };
        // A job that names no directory runs in the home of the account it runs as: the
        // worker's own, or its user's (empty here: the shim looks it up).
        let cwd = match (cwd.is_empty(), &run_as) {
            (false, _) => PathBuf::from(cwd),
            (true, None) => self.settings.own_home.clone(),
            (true, Some(_)) => PathBuf::new(),
        };
        // The job's own variables come last, so nothing it was submitted with can fake them.
        let facts = xce_client::export::JobFacts {
            spec: &job.spec,
            id: job.id,
            array_task: job.array_task.as_ref(),
            attempt,
            host: &self.host,
        };
        let env = env
            .iter()
            .cloned()
            .chain(
                xce_client::export::job_variables(&facts)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v)),
            )
            .collect();
        let output =
            xce_client::output_path::of_job(&job.spec, job.id, job.array_task.as_ref(), &self.host)
                .map_err(|e| e.to_string())?;
        let output = Output {
            stdout: output.stdout,
            stderr: output.stderr,
            append: match open_mode {
                Some(xce_client::types::OpenMode::Append) => true,
                Some(xce_client::types::OpenMode::Truncate) => false,
                // A requeued job's later attempts add to what the earlier ones wrote.
                None => attempt > 1,
            },
        };
        let (command, script) = match (script, script_body) {
            (None, _) => (command.clone(), None),
            (Some(id), None) => {
                return Err(format!("the job's script {id} did not come with its start"))
            }
            (Some(id), Some(body)) => {
                let copy = self.write_script(job.id, attempt, *id, body)?;
                let path = copy.to_string_lossy();
                (
                    xce_client::script::command_of(body, &path, command),
                    Some(copy),
                )
            }
        };
        Ok(ShimSpec {
            id: job.id,
            attempt,
            command,
            env,
            cwd,
            spool: self.spool.clone(),
            kill_grace_ms: self.settings.kill_grace.as_millis() as u64,
            fence_at_ms: self.lease.deadline().map(|d| d.as_millis() as u64),
            cgroups: self.settings.cgroups.clone(),
            home: run_as.is_none().then(|| self.settings.own_home.clone()),
            run_as,
            refused: xce_client::fit::may_run(&self.settings.job_users, user).err(),
            limits: Limits {
                cpus: *cpus,
                mem_mb: *mem_mb,
            },
            time_limit_s: *time_limit_s,
            after: None,
            worker: self.me,
            spare: self.spares.take(),
            script,
            output: Some(output),
            warning: *warn_signal,
        })
    }

    /// Writes the attempt's private copy of its script, checked against the id it was
    /// submitted with, into `<spool>/scripts` (which anyone may pass through but not list):
    /// readable only by its owner, whom the shim makes the job's user.
    fn write_script(
        &self,
        id: JobId,
        attempt: u32,
        script: xce_client::script::ScriptId,
        body: &[u8],
    ) -> Result<PathBuf, String> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        if xce_client::script::ScriptId::of(body) != script {
            return Err(format!(
                "the bytes of the job's script are not those of {script}"
            ));
        }
        let dir = self.spool.join("scripts");
        let cannot = |e: std::io::Error| format!("cannot write the job's script copy: {e}");
        std::fs::create_dir_all(&dir).map_err(cannot)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).map_err(cannot)?;
        let path = dir.join(format!("{id}.{attempt}"));
        let tmp = dir.join(format!("{id}.{attempt}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp)
            .map_err(cannot)?;
        std::io::Write::write_all(&mut file, body).map_err(cannot)?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(cannot)?;
        Ok(path)
    }
}
