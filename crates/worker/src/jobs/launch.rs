//! Starting an attempt under a shim of its own: the doubt a start may carry (a late or
//! crossing order, parked for the primary's word), the spec the shim runs, and the launch.

use super::*;

impl Jobs {
    /// Starts `attempt` of `job`, as pushed through the agent capability of the last answered
    /// join. For tests: the worker's own pushes go through [`Jobs::start_from`] with the
    /// number they came through.
    pub fn start(self: &Arc<Self>, job: Job, attempt: u32) {
        self.start_from(job, attempt, u64::MAX);
    }

    /// Starts `attempt` of `job` under a shim of its own, unless this worker already holds
    /// it (a start sent again after a failover). A newer attempt fences an older copy still
    /// held here. While a join is unanswered the start waits ([`crate::join_window`]); so
    /// does, until the primary says it is still due here, a start that came through the
    /// agent capability (`generation`) of an older join than the last answered one (over a
    /// connection this worker has left: a deposed primary's late push), or for an attempt no
    /// newer than one this worker let go of ([`crate::ended`]).
    pub fn start_from(self: &Arc<Self>, job: Job, attempt: u32, generation: u64) {
        let id = job.id;
        let table = self.table();
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
            // for is this one's to wait for.
            fenced = self.window().forget(id);
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
        };
        let parked = match doubt {
            None => self.window().park(start),
            Some(_) => {
                self.window().hold(start);
                None
            }
        };
        let Some(start) = parked else {
            let mut table = table;
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

    /// Launches the attempt's shim, with the job table held throughout (nothing can start or
    /// fence the job meanwhile).
    pub(super) fn launch(
        self: &Arc<Self>,
        mut table: MutexGuard<'_, HashMap<JobId, Held>>,
        start: Parked,
    ) {
        let Parked {
            job,
            attempt,
            fenced,
        } = start;
        let id = job.id;
        let span = tracing::info_span!("job", id, attempt);
        let spec = ShimSpec {
            after: fenced,
            ..self.shim_spec(&job, attempt)
        };
        // A job script is run from a copy the start carries: until this worker makes it, a
        // script job fails here by name rather than run its arguments as a command.
        let launched = match job.spec.script {
            Some(script) => Err(std::io::Error::other(format!(
                "job script {script}: this worker's build does not run job scripts yet"
            ))),
            None => self.launcher.launch(&spec),
        };
        match launched {
            Err(e) => {
                warn!(job = id, attempt, error = %e, "cannot start the job's shim");
                self.return_spare(&spec);
                table.insert(id, Held::new(attempt, HeldPhase::Finished));
                drop(table);
                let (jobs, end) = (
                    self.clone(),
                    JobEnd::Failed(format!("cannot start the job's supervisor: {e}")),
                );
                tokio::spawn(async move { jobs.finish(id, attempt, end).await }.instrument(span));
            }
            Ok(launched) => {
                table.insert(
                    id,
                    Held {
                        shim: Some(launched.shim),
                        ..Held::new(attempt, HeldPhase::Running)
                    },
                );
                drop(table);
                let jobs = self.clone();
                tokio::spawn(async move { jobs.supervise(launched, spec).await }.instrument(span));
            }
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

    pub(super) fn shim_spec(&self, job: &Job, attempt: u32) -> ShimSpec {
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
            // The script is run from its copy in the spool (`script`), its bytes carried
            // with the start, not in the spec.
            script: _,
            stdout: _,
            stderr: _,
            open_mode: _,
            // The controller's and the scheduler's business: a job reaches its host held by
            // neither.
            hold: _,
            begin_time_ms: _,
            warn_signal: _,
            no_requeue: _,
        } = &job.spec;
        let run_as = match self.settings.job_users {
            xce_client::types::JobUsers::EachUser { root } => Some(RunAs {
                user: user.clone(),
                allow_root: root,
            }),
            xce_client::types::JobUsers::Any | xce_client::types::JobUsers::Only(_) => None,
        };
        // A job that names no directory runs in the spool, or, as its user, in their home
        // (empty here: the shim looks it up).
        let cwd = match (cwd.is_empty(), &run_as) {
            (false, _) => PathBuf::from(cwd),
            (true, None) => self.spool.clone(),
            (true, Some(_)) => PathBuf::new(),
        };
        // The job's own variables come last, so nothing it was submitted with can fake them.
        let facts = xce_client::export::JobFacts {
            spec: &job.spec,
            id: job.id,
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
        ShimSpec {
            id: job.id,
            attempt,
            command: command.clone(),
            env,
            cwd,
            spool: self.spool.clone(),
            kill_grace_ms: self.settings.kill_grace.as_millis() as u64,
            fence_at_ms: self.lease.deadline().map(|d| d.as_millis() as u64),
            cgroups: self.settings.cgroups.clone(),
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
        }
    }
}
