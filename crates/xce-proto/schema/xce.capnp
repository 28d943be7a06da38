@0xcd6570f4bf2dc83c;
# The xce wire protocol: one listening port per controller serves the client-facing
# `Controller` interface (bootstrap capability) and, through `Controller.raft`, the
# controller-to-controller `Raft` interface.
#
# Compatibility: fields and methods are only ever appended with new ordinals.

# The one status taxonomy of DESIGN §3. Every reply carries it in its `ReplyHeader`.
enum Status {
  ok @0;
  redirect @1;   # I am a standby; the primary is at redirectHost:redirectPort.
  standby @2;    # I am a standby and do not know the primary's client address.
  noMaster @3;   # No primary is elected right now.
  notReady @4;   # I am primary but have not passed my readiness barrier yet.
  dupJob @5;     # That request token was already applied; the reply holds the original result.
  auth @6;
  perm @7;
  invalid @8;    # Bad request; `message` names the field.
  noEnt @9;      # No such job, queue or host.
  conflict @10;  # State changed under the caller.
  internal @11;  # Bug or storage failure.
}

# Common header of every reply.
struct ReplyHeader {
  status @0 :Status;
  message @1 :Text;
  # The primary's client address, set with `redirect` (and whenever the answering node knows it).
  redirectHost @2 :Text;
  redirectPort @3 :UInt16;
  # The primary's name, with `redirect`. A client that has a candidate of that name connects
  # to its own address for it: the answering node's view of the network (its `--peers`) need
  # not be the client's (a proxy, NAT, another interface).
  redirectName @4 :Text;
}

# Client-generated 128-bit request token that makes every write idempotent.
struct Token {
  hi @0 :UInt64;
  lo @1 :UInt64;
}

struct EnvVar {
  name @0 :Text;
  value @1 :Text;
}

enum JobState {
  pending @0;
  dispatched @1;
  running @2;
  suspended @3;
  done @4;
  exited @5;
}

# What a user asks for. Signed resource fields so that a negative request reaches the
# controller's validation (and gets `invalid` naming the field) instead of wrapping around.
struct JobSpec {
  name @0 :Text;
  user @1 :Text;
  queue @2 :Text;       # Empty means the default queue.
  command @3 :List(Text);
  env @4 :List(EnvVar);
  cwd @5 :Text;
  cpus @6 :Int32;
  memMb @7 :Int64;
  priority @8 :Int32;
  # Generic resources asked for beside cpus and memory, by name (GPUs, licenses, ...).
  gres @9 :List(NamedCount);
  limits @10 :JobLimits;
  # The job script's SHA-256 (empty: the job is `command`); with one, `command` holds the
  # script's arguments. The bytes travel beside the spec (`submit`'s and `startJob`'s
  # `script`), once.
  scriptId @11 :Data;
  # Output file patterns (`%j`, `%x`, ...) relative to `cwd`; empty: the default
  # (`xce-%j.out`, and stderr where stdout goes).
  stdout @12 :Text;
  stderr @13 :Text;
  openMode @14 :OpenMode;
  hold @15 :Bool;
  beginTimeMs @16 :UInt64;     # 0: none.
  warning @17 :WarningSignal;  # Its signal 0: none.
  noRequeue @18 :Bool;
  # What it waits for, in `--dependency`'s syntax (`afterok:12,after:13`); empty: nothing.
  dependency @19 :Text;
  # `--kill-on-invalid-dep`; without `has`, the cluster's default.
  hasKillOnInvalidDep @20 :Bool;
  killOnInvalidDep @21 :Bool;
  # An array of tasks, in `--array`'s syntax (`0-999%50`); empty: a plain job.
  array @22 :Text;
  # The account its use is charged to (`--account`); empty: none, or the user's default.
  account @23 :Text;
}

# An array's own record: its tasks not yet split off (index runs, `--array`'s syntax) and
# counts of the others.
struct ArrayProgress {
  pending @0 :Text;
  running @1 :UInt64;
  completed @2 :UInt64;
  failed @3 :UInt64;
  unrun @4 :UInt64;
  waiting @5 :UInt64;
}

# What a task knows of its array.
struct ArrayTask {
  arrayId @0 :UInt64;
  index @1 :UInt32;
  count @2 :UInt64;
  min @3 :UInt32;
  max @4 :UInt32;
  step @5 :UInt32;
}

# Where a job's dependency stands (`none`: it has none).
enum DependencyState {
  none @0;
  waiting @1;
  satisfied @2;
  never @3;
}

# How a job's output files are opened (`none`: truncate on the first attempt, append after).
enum OpenMode {
  none @0;
  append @1;
  truncate @2;
}

# A signal a job gets some time before its time limit (`--signal [B:]SIG@SECONDS`).
struct WarningSignal {
  signal @0 :Int32;     # 0: none.
  beforeS @1 :UInt32;
  leaderOnly @2 :Bool;  # `B:`: the batch shell alone, not its process group.
}

# A count of one named resource.
struct NamedCount {
  name @0 :Text;
  count @1 :UInt64;
}

# What a job may use beyond what it is given at placement.
struct JobLimits {
  timeLimitS @0 :UInt32;   # Wall-clock seconds from its start, not counting time suspended; 0: none.
}

# Why a pending job waits, as a code (`none`: not pending, or not judged yet).
enum PendCode {
  none @0;
  resources @1;
  priority @2;
  noScheduler @3;
  queueInactive @4;
  tooBig @5;
  held @6;
  beginTime @7;
  dependency @8;
  limit @9;
}

# How a job ended (`none`: it has not).
enum JobResult {
  none @0;
  completed @1;
  failed @2;
  cancelled @3;
  timeout @4;
  outOfMemory @5;
  nodeFail @6;
}

# A job as the controller knows it. Optional values: empty text and the `has*` flags mean null;
# times are milliseconds since the Unix epoch, 0 meaning "not yet".
struct Job {
  id @0 :UInt64;
  spec @1 :JobSpec;
  state @2 :JobState;
  pendReason @3 :Text;
  reason @4 :Text;
  host @5 :Text;
  attempt @6 :UInt32;
  hasExitCode @7 :Bool;
  exitCode @8 :Int32;
  hasSignal @9 :Bool;
  signal @10 :Int32;
  submitTimeMs @11 :UInt64;
  startTimeMs @12 :UInt64;
  endTimeMs @13 :UInt64;
  outputDir @14 :Text;   # The spool dir of the host of the latest attempt; empty before any.
  pendCode @15 :PendCode;
  result @16 :JobResult;
  cancelledBy @17 :Text;   # Empty: no one (or not known).
  dependencyState @18 :DependencyState;
  array @19 :ArrayProgress;   # Unset: no array's own record.
  arrayTask @20 :ArrayTask;   # Unset: no task.
  hasRuns @21 :Bool;   # False from a controller older than this field: read `attempt`.
  runs @22 :UInt32;    # How many of its attempts started.
  hasExpectedStart @23 :Bool;   # A pending job with a start reserved by backfill:
  expectedStartMs @24 :UInt64;  # when, at the latest (ms since the epoch).
  usage @25 :Usage;             # Unset: none reported yet.
  attempts @26 :List(AttemptRun);  # Its attempts that started, oldest first.
}

# One attempt of a job that started.
struct AttemptRun {
  attempt @0 :UInt32;
  host @1 :Text;
  startMs @2 :UInt64;
  endMs @3 :UInt64;          # 0: it runs.
  hasExitCode @4 :Bool;
  exitCode @5 :Int32;
  hasSignal @6 :Bool;
  signal @7 :Int32;
  reason @8 :Text;           # Empty: none.
  usage @9 :Usage;           # Unset: none measured.
}

enum JobAction {
  kill @0;
  suspend @1;
  resume @2;
  requeue @3;
}

struct Queue {
  name @0 :Text;
  priority @1 :Int32;
  open @2 :Bool;
  active @3 :Bool;
  pending @4 :UInt32;
  running @5 :UInt32;
  # A queue's time rules in seconds; 0: none.
  defaultTimeS @6 :UInt32;
  maxTimeS @7 :UInt32;
}

enum QueueAction {
  open @0;
  close @1;
  activate @2;
  inactivate @3;
}

enum MemberRole {
  primary @0;
  standby @1;
  unreachable @2;
}

struct Member {
  name @0 :Text;
  addr @1 :Text;
  role @2 :MemberRole;
  version @3 :UInt32;   # The newest cluster version its build runs; 0: not heard.
}

struct ClusterInfo {
  primary @0 :Text;   # Empty when no primary is known.
  term @1 :UInt64;
  members @2 :List(Member);
  schedulers @3 :List(SchedulerInfo);
  # The cluster version in force (what every member can apply); raised by the primary once
  # every member runs a newer build, never lowered.
  activeVersion @4 :UInt32;
  # The version the primary's configuration holds the cluster at (`hold_version`); 0: none.
  holdVersion @5 :UInt32;
}

# Filter for `listJobs`; empty fields mean "any".
struct JobFilter {
  queue @0 :Text;
  states @1 :List(JobState);
  user @2 :Text;
  # Appended: a controller of an older build ignores them, so clients filter again.
  name @3 :Text;
  results @4 :List(JobResult);
  # 0: any.
  submittedSinceMs @5 :UInt64;
}

# The client-facing interface, and the bootstrap capability of every controller port.
interface Controller {
  # `job` is the job as the primary holds it right after the submit (also for `dupJob`), so a
  # caller that shows it (the HTTP API) needs no second call.
  # `script`: the bytes of the spec's script (empty for a job without one). The primary logs
  # them only when it does not hold that script yet.
  submit @0 (token :Token, spec :JobSpec, script :Data) -> (header :ReplyHeader, jobId :UInt64, job :Job);
  # One page of the jobs passing `filter`, in id order, with ids above `after` (0: from the
  # start): at most `limit` jobs (0: the controller's default page; it caps both the count
  # and the bytes of a page far below the message limit). `next` is the `after` of the next
  # page, 0 when this page was the last.
  listJobs @1 (filter :JobFilter, after :UInt64, limit :UInt32)
      -> (header :ReplyHeader, jobs :List(Job), next :UInt64);
  jobInfo @2 (jobId :UInt64) -> (header :ReplyHeader, job :Job);
  jobControl @3 (token :Token, jobId :UInt64, action :JobAction) -> (header :ReplyHeader);
  listQueues @4 () -> (header :ReplyHeader, queues :List(Queue));
  queueControl @5 (token :Token, name :Text, action :QueueAction) -> (header :ReplyHeader);
  clusterInfo @6 () -> (header :ReplyHeader, cluster :ClusterInfo);

  # The controller-to-controller Raft interface of this node; only a connection that joined
  # as a controller gets it (others: `perm` in the header, and no capability).
  raft @7 () -> (raft :Raft, header :ReplyHeader);

  listHosts @8 () -> (header :ReplyHeader, hosts :List(Host));
  hostControl @9 (token :Token, name :Text, action :HostAction) -> (header :ReplyHeader);
  # A daemon announces itself; a worker registers (or re-registers) its host and its agent,
  # and lists the attempts it holds (resync). `orders` tell the worker what to do with them:
  # kill stale or unknown attempts (fencing), re-apply a suspend or resume it missed.
  # `lostAfterMs`: how long after its last heartbeat the primary declares a worker's jobs lost
  # (heartbeat TTL + lost grace); a worker cut off from the cluster kills its jobs before that.
  join @10 (token :Token, role :Role, host :HostAttributes, agent :Agent, held :List(HeldJob),
            queuesStarts :Bool)
      -> (header :ReplyHeader, orders :List(JobOrder), lostAfterMs :UInt64);
  # `queuesStarts`: the worker admits by its own resources, holding a start that does not fit
  # until an attempt's end frees room, so jobs may be dispatched to it ahead of its free
  # slots (cluster version 12). Not stored: the primary keeps it with the worker's agent.
  # Fire-and-forget liveness from a worker; `noEnt` (or `perm` on a connection that has not
  # joined as a worker) asks it to join again. The host is the session's: `name` is not read.
  heartbeat @11 (name :Text) -> (header :ReplyHeader);

  # Placement of a pending job on a host, by an operator or a scheduler session; validated at
  # apply time.
  dispatch @12 (token :Token, jobId :UInt64, host :Text) -> (header :ReplyHeader);
  # A worker reports a job attempt started or ended; idempotent per job and attempt. Only a
  # connection joined as a worker may; the host is the one it joined as (`host` is not read).
  jobStarted @13 (token :Token, host :Text, jobId :UInt64, attempt :UInt32) -> (header :ReplyHeader);
  jobFinished @14 (token :Token, host :Text, jobId :UInt64, attempt :UInt32, end :JobEnd,
                   usage :Usage) -> (header :ReplyHeader);

  # Streams the state changes passing `filter` to `listener`, from this primary's next applied
  # entry on, until the listener fails or is released, or the controller drops it: when it
  # falls too far behind, or this controller stops being the primary (told through
  # `listener.closed`). Events are not replayed across primaries: re-read state after
  # subscribing again.
  subscribe @15 (listener :EventListener, filter :EventFilter) -> (header :ReplyHeader);

  # A round trip that touches nothing (any session may call it): a client whose call has
  # gone unanswered for a while pings, so that a frozen controller, whose kernel keeps the
  # connection open, costs it a fraction of a second instead of a whole call timeout.
  ping @16 () -> (header :ReplyHeader);

  # ---- The scheduler (only a connection joined as a scheduler) ----
  # Asks for, or renews, the one scheduler lease for `name`, lasting `ttlMs` from when the
  # primary applies it. Granted when no one holds it, this scheduler (`name` and `instance`, a
  # number each scheduler process picks at random when it starts) holds it, or the holder's
  # ran out; a new holder gets the next `epoch`. Refused with `conflict` naming the holder.
  # `ttlMs` 0 releases the lease if this scheduler holds it (a clean stop), so a standby
  # takes over at once instead of waiting for it to run out; `epoch` is then 0.
  acquireScheduler @17 (token :Token, name :Text, ttlMs :UInt32, instance :UInt64)
      -> (header :ReplyHeader, epoch :UInt64);
  # Many placements in one replicated request, each validated at apply on its own; refused
  # as a whole (`conflict`) when `epoch` is not the current, unexpired lease's. `refused`
  # lists the placements that were not made, and why.
  dispatchBatch @18 (token :Token, epoch :UInt64, placements :List(Placement))
      -> (header :ReplyHeader, refused :List(Refusal));
  # Why jobs still pend, as the scheduler sees it; jobs no longer pending are skipped.
  setPendReasons @19 (token :Token, epoch :UInt64, reasons :List(PendReason))
      -> (header :ReplyHeader);

  # ---- Users' tokens ----
  # Proves this connection's caller with a user token (`xce_<id>_<secret>`): from then on its
  # session has the token's user and role, and every call re-checks that the token is still
  # valid (a revoked or expired token answers `auth` at once). A daemon's connection may not.
  authenticate @20 (token :Text) -> (header :ReplyHeader, user :Text, role :Role);
  # Admins only. A new token for `user` with `role` (user, operator or admin): the caller made
  # the secret and sends only its SHA-256 (`secretHash`, 32 bytes); `expiresInMs` 0 means it
  # never expires. Refused with `conflict` when `id` is taken.
  createToken @21 (token :Token, id :Text, user :Text, role :Role, secretHash :Data,
                   expiresInMs :UInt64) -> (header :ReplyHeader);
  listTokens @22 () -> (header :ReplyHeader, tokens :List(TokenInfo));
  revokeToken @23 (token :Token, id :Text) -> (header :ReplyHeader);
  # An apiserver's connection only: acts for the person a user token names. The returned
  # capability's calls are that person's, as if they had connected and authenticated (their
  # user and role; the token is re-checked on every call, so a revocation is felt at once).
  # The apiserver pipelines a token's first call on it and keeps it for that token's later
  # calls, so acting for someone costs no round trip. `auth` for a token that proves no
  # one. With authentication off (a connection without a certificate) an empty token acts
  # as an operator with no user, as any connection could by joining.
  actAs @24 (token :Text) -> (header :ReplyHeader, controller :Controller, user :Text, role :Role);

  # ---- Backups (admins only) ----
  # A backup is a file of frames (xce_client::backup_file): a header, then parts, each small
  # enough for one message and one Raft entry, so a cluster state of any size moves in pieces.
  #
  # Reads frame `frame` of a backup. With `backup` 0 the primary takes a new one, after a
  # linearizability check (every write acknowledged before the call is in it), and holds its
  # frames for the calls that read the rest; the reply names it (`backup`), says how many
  # frames it has and the Raft log `index` it was taken at. A held backup is dropped when a
  # newer one is taken or after a minute unread: reading it then (or from another controller,
  # after a failover) is `noEnt`, and the caller starts again.
  saveSnapshot @25 (backup :UInt64, frame :UInt32)
      -> (header :ReplyHeader, snapshot :Data, index :UInt64, backup :UInt64, frames :UInt32);
  # Restores one part of a backup (`snapshot`: the file's first frame, its header, is sent
  # beside each part as `backupHeader`). The first part replaces the state of a cluster that has
  # never held a job or a user token (`conflict` otherwise) and makes every restored host
  # unavailable until its worker joins; each later part adds jobs, and is taken only once the
  # part whose token is `base` (the first part's) has been applied. `invalid`, naming why,
  # for what a backup cannot hold or a format this controller does not read.
  restoreSnapshot @26 (token :Token, snapshot :Data, backupHeader :Data, base :Token)
      -> (header :ReplyHeader);

  # ---- Membership (admins only) ----
  # Adds controller `name` at `addr` (host:port), which must be running with `--join`: it
  # catches up as a learner (from a snapshot when the log has moved on), then votes. Refused
  # with `conflict` when it is a member already, `notReady` when it did not catch up in time.
  addController @27 (token :Token, name :Text, addr :Text) -> (header :ReplyHeader);
  # Removes controller `name` from the members; `noEnt` when it is not one.
  removeController @28 (token :Token, name :Text) -> (header :ReplyHeader);

  # ---- Changing jobs ----
  # Changes one job (`xce update`, `xce hold`, `xce release`): a pending job any field of
  # `changes`, a placed one only its time limit (its worker's shim keeps the new one). A user
  # changes their own jobs, and only lowers priority and time; an operator any job. `perm`
  # otherwise, `conflict` for a change a placed or ended job cannot take, `invalid` naming
  # the field that breaks a rule a submit would have broken.
  updateJob @29 (token :Token, jobId :UInt64, changes :JobChanges) -> (header :ReplyHeader);
  # Sends signal number `signal` to a running job's process group, or to its leading process
  # alone (`leaderOnly`: Slurm's `B:`); once, like the kill order. A user their own jobs.
  signalJob @30 (token :Token, jobId :UInt64, signal :Int32, leaderOnly :Bool)
      -> (header :ReplyHeader);
  # The bytes of a job's script (`xce job ID --script`): its owner's, or anyone's for an
  # operator. `noEnt` for a job without one.
  jobScript @31 (jobId :UInt64) -> (header :ReplyHeader, script :Data);
  # An action on tasks of array `jobId`, each task taking it as a job of its own would:
  # `tasks` lists them as `ID_[...]` does (`7`, `1-5,9`); empty: the whole array (its
  # waiting tasks and every task split off). `xce kill 42_7`, `xce hold 42_[1-5]`,
  # `xce update 42 --throttle 4`. Cluster version 10 on (refused naming it before).
  controlTasks @32 (token :Token, jobId :UInt64, tasks :Text, op :TaskOp)
      -> (header :ReplyHeader);
  # Task `index` of array `jobId`: its own record once split off, else the array's own (the
  # task still waits in it). `noEnt` when the array has no such task.
  getTask @33 (jobId :UInt64, index :UInt32) -> (header :ReplyHeader, job :Job);

  # ---- History (cluster version 13 on) ----
  # One page of the retired jobs passing `filter` in the answering controller's history
  # store, in id order, with ids above `after`: at most `limit` (0: 100; at most 1,000).
  # `next` is the `after` of the next page, 0 when this was the last; a page that read the
  # controller's bound of records (`scanned`) holds fewer and says where to go on. `behind`:
  # retired jobs this controller's history does not hold yet (it is catching up).
  listHistory @34 (filter :HistoryFilter, after :UInt64, limit :UInt32)
      -> (header :ReplyHeader, jobs :List(Job), next :UInt64, behind :UInt64, scanned :UInt64);
}

# Which retired jobs `listHistory` answers; empty fields (0 for numbers) mean "any".
struct HistoryFilter {
  user @0 :Text;
  account @1 :Text;
  queue @2 :Text;
  name @3 :Text;
  states @4 :List(JobState);
  results @5 :List(JobResult);
  # An array: its own record and its tasks'.
  arrayId @6 :UInt64;
  firstId @7 :UInt64;
  lastId @8 :UInt64;
  # The time `sinceMs` and `untilMs` bound (both included).
  time @9 :HistoryTime;
  sinceMs @10 :UInt64;
  untilMs @11 :UInt64;
}

enum HistoryTime {
  submit @0;
  start @1;
  end @2;
}

# What `controlTasks` does to each task.
struct TaskOp {
  union {
    action @0 :JobAction;
    update @1 :TaskUpdate;
    signal @2 :TaskSignal;
  }
}

# `xce update` of tasks: the changes, and the array's new throttle (the whole array only).
struct TaskUpdate {
  changes @0 :JobChanges;
  throttle @1 :UInt32;
  setThrottle @2 :Bool;
}

# `xce signal` of tasks.
struct TaskSignal {
  signal @0 :Int32;
  leaderOnly @1 :Bool;
}

# What `updateJob` changes: each field only with its `set` flag (capnp has no optional
# scalars), the others kept.
struct JobChanges {
  name @0 :Text;
  setName @1 :Bool;
  priority @2 :Int32;
  setPriority @3 :Bool;
  queue @4 :Text;
  setQueue @5 :Bool;
  cpus @6 :UInt32;
  setCpus @7 :Bool;
  memMb @8 :UInt64;
  setMemMb @9 :Bool;
  timeLimitS @10 :UInt32;
  setTimeLimit @11 :Bool;
  hold @12 :Bool;
  setHold @13 :Bool;
  # 0: now.
  beginTimeMs @14 :UInt64;
  setBeginTime @15 :Bool;
}

# A user token as listed: never its secret or hash.
struct TokenInfo {
  id @0 :Text;
  user @1 :Text;
  role @2 :Role;
  createdMs @3 :UInt64;
  expiresMs @4 :UInt64;   # 0: never.
}

# One scheduler decision: run `jobId` on `host`.
struct Placement {
  jobId @0 :UInt64;
  host @1 :Text;
}

# A placement of a batch that was not made.
struct Refusal {
  jobId @0 :UInt64;
  status @1 :Status;
  message @2 :Text;
}

struct PendReason {
  jobId @0 :UInt64;
  reason @1 :Text;
  code @2 :PendCode;
  hasExpectedStart @3 :Bool;   # The start backfill reserved for it:
  expectedStartMs @4 :UInt64;  # ms since the epoch.
}

# A scheduler the primary has heard from recently; `active` holds the unexpired lease.
struct SchedulerInfo {
  name @0 :Text;
  active @1 :Bool;
}

# ---- Events ------------------------------------------------------------------------------

enum EventKind {
  job @0;
  host @1;
  queue @2;
}

# Which events a subscription receives; empty `kinds` means all.
struct EventFilter {
  kinds @0 :List(EventKind);
}

# One state change, with the log index of the entry that made it.
struct Event {
  index @0 :UInt64;
  union {
    job @1 :JobEvent;
    host @2 :HostEvent;
    queue @3 :QueueEvent;
  }
}

# A job was created, or its state, host, attempt or reasons changed.
struct JobEvent {
  id @0 :UInt64;
  state @1 :JobState;
  host @2 :Text;         # Empty: none.
  attempt @3 :UInt32;
  queue @4 :Text;
  pendReason @5 :Text;   # Empty: none.
  reason @6 :Text;       # Empty: none.
  user @7 :Text;         # Whose job it is (what an event filter by user needs).
  pendCode @8 :PendCode;
  result @9 :JobResult;
  # A task of an array (`hasTask`): the array's id and the task's index (`ID_IDX`).
  hasTask @10 :Bool;
  arrayJobId @11 :UInt64;
  arrayTaskId @12 :UInt32;
}

# A host registered, or its state changed.
struct HostEvent {
  name @0 :Text;
  state @1 :HostState;
}

# A queue was defined, or its priority or flags changed.
struct QueueEvent {
  name @0 :Text;
  priority @1 :Int32;
  open @2 :Bool;
  active @3 :Bool;
}

# What a subscriber passes to `subscribe`; the controller calls it with batches in log order,
# one batch in flight at a time (a listener that does not return holds the next batch back,
# until it is dropped for being too slow).
interface EventListener {
  events @0 (events :List(Event)) -> ();
  # The controller ended the subscription, and why.
  closed @1 (reason :Text) -> ();
}

# What a job's attempts used, as their hosts measured them; unset from a worker older than
# the field.
struct Usage {
  cpuUserMs @0 :UInt64;
  cpuSysMs @1 :UInt64;
  maxRssKb @2 :UInt64;
}

# How a job attempt ended, as its worker saw it.
struct JobEnd {
  union {
    exitCode @0 :Int32;
    signal @1 :Int32;
    # It never ran (command not found, bad working directory, ...): the reason.
    failed @2 :Text;
    # The kernel killed it for going over its memory limit (its cgroup's OOM killer).
    outOfMemory @3 :Void;
    # Its shim stopped it at its time limit; how the process then ended.
    timedOut @4 :ProcessEnd;
  }
}

# How a process ended: an exit code or a signal.
struct ProcessEnd {
  hasExitCode @0 :Bool;
  exitCode @1 :Int32;
  hasSignal @2 :Bool;
  signal @3 :Int32;
}

# Carries openraft's messages between controllers. The payloads are openraft's own serde
# types, encoded by the controller's `network::codec`; snapshot bytes travel raw in `chunk` so
# that snapshots stream in bounded pieces.
interface Raft {
  appendEntries @0 (request :Data) -> (reply :Data);
  vote @1 (request :Data) -> (reply :Data);
  installSnapshot @2 (request :Data, chunk :Data) -> (reply :Data);
  # Would you vote for me? Asked before a controller stands for election (and raises its
  # term); granted only by a node that has not heard from a primary within its lease and whose
  # log is not ahead of the candidate's. A node cut off from the cluster therefore never
  # raises its term, and cannot depose a healthy primary when it returns.
  preVote @3 (request :Data) -> (reply :Data);
  # A primary that no majority has acknowledged within its lease (a slow or lossy link) hands
  # over: it asks the standby whose log is furthest ahead to stand for election as soon as the
  # other voters' leader lease allows, instead of after a full election timeout. Accepted only
  # from the primary the receiver currently follows, for that primary's term.
  stepDown @4 (request :Data) -> (reply :Data);
  # What this controller's build runs: the newest cluster version (store format) it reads
  # and writes, and its build's name. The primary asks every member, and raises the active
  # version once all run a newer one. A build from before this method answers with an
  # `unimplemented` exception: it runs version 6.
  buildInfo @5 () -> (version :UInt32, build :Text);
  # Retired jobs this controller's history store holds with retirement sequence numbers from
  # `fromSeq` on, in order, at most `limit`: what a controller whose history lacks some (it
  # installed a snapshot past them, was added, or lost its store) pulls from a peer. Stops at
  # the first number this store lacks too; a record purged by age comes as a tombstone.
  historyRange @6 (fromSeq :UInt64, limit :UInt32) -> (records :List(RetiredRecord));
}

# One retired job as a history store keeps it: its sequence number, its stored record (the
# store format, then the record; empty when purged by age, a tombstone), and its script's
# bytes (empty for a job without one).
struct RetiredRecord {
  seq @0 :UInt64;
  job @1 :Data;
  script @2 :Data;
  id @3 :UInt64;
}

# ---- Hosts (workers) -------------------------------------------------------------------------

enum HostState {
  ok @0;
  closed @1;        # An operator closed it: no new jobs.
  unavailable @2;   # Its worker stopped heartbeating for longer than the TTL.
}

struct Host {
  name @0 :Text;
  cpus @1 :UInt32;
  memMb @2 :UInt64;
  state @3 :HostState;
  running @4 :UInt32;
  cpusUsed @5 :UInt32;
  jobUsers @6 :JobUsers;
  gres @7 :List(NamedCount);       # Generic resources offered, by name.
  memMbUsed @8 :UInt64;
  gresUsed @9 :List(NamedCount);
  queuesStarts @10 :Bool;   # Its worker's join said it holds starts back (see `join`).
}

# Whose jobs a host runs, and as whom: what its worker reported at join.
struct JobUsers {
  union {
    # Every job as the worker's own account, whoever submitted it (a dev or test cluster).
    any @0 :Void;
    # Each job as its own user (a worker running as root); root's too only if `eachUser`.
    eachUser @1 :Bool;
    # Only this account's jobs, run as it (a worker not running as root).
    only @2 :Text;
  }
}

enum HostAction {
  open @0;
  close @1;
}

# Who is joining; decides what a connection may do (the controller's authorization table).
# With TLS a role is the certificate's (or a token's, for a person); without, it is claimed at
# join (authentication is off).
enum Role {
  user @0;
  worker @1;
  scheduler @2;
  apiserver @3;
  operator @4;
  admin @5;
  controller @6;   # A controller peer: the only role that may reach the Raft interface.
  login @7;        # A login host's certificate: it lets people connect, who then need a token.
}

# What a worker reports about its host when it joins.
struct HostAttributes {
  name @0 :Text;
  cpus @1 :UInt32;
  memMb @2 :UInt64;
  spoolDir @3 :Text;   # Where the worker writes job output, `<spoolDir>/<id>.<attempt>.out|err`.
  jobUsers @4 :JobUsers;
  gres @5 :List(NamedCount);   # Generic resources offered, by name.
}

# Capability a worker passes at join; the controller starts, signals and fences jobs through it.
interface Agent {
  ping @0 () -> ();
  # Run attempt `attempt` of `job`; the worker reports its start and end through the controller.
  # `script`: the bytes of the job's script (empty for a job without one).
  startJob @1 (job :Job, attempt :UInt32, script :Data) -> (header :ReplyHeader);
  # Kill (SIGTERM, then SIGKILL after the worker's grace period), suspend or resume one
  # attempt's whole process group. An attempt the worker does not hold answers noEnt.
  signalJob @2 (order :JobOrder) -> (header :ReplyHeader);
  # Any signal to one attempt's process group, or its leading process alone (`xce signal`).
  sendSignal @3 (jobId :UInt64, attempt :UInt32, signal :Int32, leaderOnly :Bool) -> (header :ReplyHeader);
  # One running attempt's new time limit in seconds from its start (0: none), which its shim
  # keeps from then on.
  setTimeLimit @4 (jobId :UInt64, attempt :UInt32, timeLimitS :UInt32) -> (header :ReplyHeader);
  # Several starts for this worker in one call (an array's tasks, a host topped up), each
  # taken as `startJob` takes it, in order. A worker of an older build does not have it: the
  # primary then sends each start alone.
  startJobs @5 (starts :List(JobStart)) -> (header :ReplyHeader);
}

# One start of `startJobs`: as `startJob`'s parameters.
struct JobStart {
  job @0 :Job;
  attempt @1 :UInt32;
  script @2 :Data;
}

# A signal for one attempt of a job.
enum JobSignal {
  kill @0;
  suspend @1;
  resume @2;
}

struct JobOrder {
  jobId @0 :UInt64;
  attempt @1 :UInt32;
  signal @2 :JobSignal;
}

# Where an attempt a worker holds stands on the worker.
enum HeldPhase {
  running @0;
  suspended @1;
  finished @2;   # Ended; its end report is not acknowledged yet.
}

struct HeldJob {
  jobId @0 :UInt64;
  attempt @1 :UInt32;
  phase @2 :HeldPhase;
}
