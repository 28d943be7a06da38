//! Printing results and errors as text tables or the JSON shapes of DESIGN §3.

use std::io::Write;

use serde_json::Value;
use xce_client::json;
use xce_client::types::{ClusterInfo, Host, Job, Queue};

use crate::columns::{self, Column};
use crate::Format;

/// Prints an error in the chosen format and exits non-zero.
pub fn fail(format: Format, code: &str, message: &str) -> ! {
    match format {
        Format::Json => println!("{}", json::error(code, message)),
        Format::Text => eprintln!("xce: {message}"),
    }
    std::process::exit(1)
}

fn print_json(v: &Value) {
    println!("{v}");
}

fn or_dash(s: Option<&str>) -> &str {
    s.unwrap_or("-")
}

/// Prints a job listing page by page as it arrives, in the same shape as one whole list:
/// a table with one header line, or one JSON array.
pub struct JobsPrinter {
    format: Format,
    /// The text table's columns (`--format`).
    columns: Vec<Column>,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    printed: usize,
    /// Each task still waiting in an array on a line of its own (`--expand`).
    expand: bool,
}

impl JobsPrinter {
    /// Starts a listing (the table header is printed with the first page, or at the end).
    pub fn new(format: Format, columns: Vec<Column>) -> JobsPrinter {
        JobsPrinter {
            format,
            columns,
            out: std::io::BufWriter::new(std::io::stdout().lock()),
            printed: 0,
            expand: false,
        }
    }

    /// Lists each task still waiting in an array on a line of its own (`xce jobs --expand`),
    /// as a pending job `ARRAY_INDEX`, instead of the array's one line `ARRAY_[INDICES]`.
    pub fn expanded(mut self) -> JobsPrinter {
        self.expand = true;
        self
    }

    /// Prints one page.
    pub fn page(&mut self, jobs: &[Job]) {
        for j in jobs {
            match waiting_tasks(j).filter(|_| self.expand) {
                Some(tasks) => tasks.for_each(|task| self.print(&task)),
                None => self.print(j),
            }
        }
    }

    fn print(&mut self, j: &Job) {
        if self.printed == 0 {
            self.start();
        }
        let _ = match self.format {
            Format::Json => {
                let sep = if self.printed == 0 { "" } else { "," };
                write!(self.out, "{sep}{}", json::job(j))
            }
            Format::Text => writeln!(self.out, "{}", columns::row(&self.columns, j)),
        };
        self.printed += 1;
    }

    fn start(&mut self) {
        let _ = match self.format {
            Format::Json => write!(self.out, "["),
            Format::Text => writeln!(self.out, "{}", columns::header(&self.columns)),
        };
    }

    /// Ends a listing that failed part-way: what was printed is closed (a JSON array stays
    /// valid), and nothing is printed when nothing was.
    pub fn abort(self) {
        if self.printed > 0 {
            self.finish();
        }
    }

    /// Ends the listing.
    pub fn finish(mut self) {
        if self.printed == 0 {
            self.start();
        }
        if self.format == Format::Json {
            let _ = writeln!(self.out, "]");
        }
        let _ = self.out.flush();
    }
}

/// The tasks still waiting in array `j`, each as the pending job it will be, in index order;
/// `None` for a job that holds none.
fn waiting_tasks(j: &Job) -> Option<impl Iterator<Item = Job> + '_> {
    let (spec, progress) = (j.spec.array.as_ref()?, j.array.as_ref()?);
    if progress.pending.is_empty() {
        return None;
    }
    let shape = xce_client::types::ArrayTask {
        array_id: j.id,
        index: 0,
        count: spec.tasks.len(),
        min: spec.tasks.first().unwrap_or(0),
        max: spec.tasks.last().unwrap_or(0),
        step: spec.step(),
    };
    Some(progress.pending.iter().map(move |index| Job {
        array: None,
        array_task: Some(xce_client::types::ArrayTask { index, ..shape }),
        spec: xce_client::types::JobSpec {
            array: None,
            ..j.spec.clone()
        },
        ..j.clone()
    }))
}

/// A job's state as the listing shows it: with how it ended when that is not told by the
/// state alone (`exited (timeout)`; `done` is always `completed`), and why a pending job
/// waits (`pending (held)`).
pub fn state_shown(j: &Job) -> String {
    match (j.state, j.result, j.pend_code) {
        (xce_client::types::JobState::Exited, Some(result), _) => {
            format!("{} ({})", j.state.name(), result.name())
        }
        (xce_client::types::JobState::Pending, _, Some(code)) => {
            format!("{} ({})", j.state.name(), code.name())
        }
        (state, _, _) => state.name().to_string(),
    }
}

/// Prints one job.
pub fn job(format: Format, j: &Job) {
    if format == Format::Json {
        return print_json(&json::job(j));
    }
    let v = json::job(j);
    if let Value::Object(map) = v {
        for (k, v) in map {
            let shown = match v {
                Value::Null => "-".to_string(),
                Value::String(s) => s,
                Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(" "),
                other => other.to_string(),
            };
            // Where the output is, on which host.
            let shown = match (k.as_str(), &j.host) {
                ("stdout" | "stderr", Some(host)) if shown != "-" => format!("{shown} (on {host})"),
                _ => shown,
            };
            println!("{k:<12} {shown}");
        }
    }
    if let Some(limit) = j.spec.limits.time_limit_s {
        println!(
            "{:<12} {}",
            "time_limit",
            xce_client::time_limit::format(limit)
        );
    }
}

/// Prints a job's script: its bytes as they are, or in JSON as text (invalid UTF-8
/// replaced).
pub fn script(format: Format, id: u64, body: &[u8]) {
    use std::io::Write;
    match format {
        Format::Json => print_json(&serde_json::json!({
            "id": id,
            "script": String::from_utf8_lossy(body),
        })),
        Format::Text => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(body).and_then(|()| out.flush());
        }
    }
}

/// Prints the id of a submitted job; `parsable`: the id alone (what scripts parse, as
/// `sbatch --parsable`).
pub fn submitted(format: Format, id: u64, parsable: bool) {
    match format {
        Format::Json => print_json(&serde_json::json!({ "id": id })),
        Format::Text if parsable => println!("{id}"),
        Format::Text => println!("Job <{id}> is submitted."),
    }
}

/// Prints the acknowledgement of a control command.
pub fn done(format: Format, what: &str) {
    match format {
        Format::Json => print_json(&serde_json::json!({ "ok": true, "message": what })),
        Format::Text => println!("{what}"),
    }
}

/// Prints the queues.
pub fn queues(format: Format, queues: &[Queue]) {
    if format == Format::Json {
        return print_json(&Value::Array(queues.iter().map(json::queue).collect()));
    }
    println!(
        "{:<12} {:>8} {:<6} {:<8} {:>8} {:>8} {:>12} {:>12}",
        "QUEUE", "PRIORITY", "OPEN", "ACTIVE", "PENDING", "RUNNING", "DEFAULTTIME", "MAXTIME"
    );
    let time = |s: Option<u32>| s.map_or_else(|| "-".to_string(), xce_client::time_limit::format);
    for q in queues {
        println!(
            "{:<12} {:>8} {:<6} {:<8} {:>8} {:>8} {:>12} {:>12}",
            q.name,
            q.priority,
            if q.open { "open" } else { "closed" },
            if q.active { "active" } else { "inact" },
            q.pending,
            q.running,
            time(q.default_time_s),
            time(q.max_time_s)
        );
    }
}

/// Prints the hosts.
pub fn hosts(format: Format, hosts: &[Host]) {
    if format == Format::Json {
        return print_json(&Value::Array(hosts.iter().map(json::host).collect()));
    }
    println!(
        "{:<16} {:<12} {:>5} {:>9} {:>8} {:>9}",
        "HOST", "STATE", "CPUS", "MEM_MB", "RUNNING", "CPUS_USED"
    );
    for h in hosts {
        println!(
            "{:<16} {:<12} {:>5} {:>9} {:>8} {:>9}",
            h.name,
            h.state.name(),
            h.capacity.cpus,
            h.capacity.mem_mb,
            h.running,
            h.used.cpus
        );
    }
}

/// Prints the cluster.
pub fn cluster(format: Format, c: &ClusterInfo) {
    if format == Format::Json {
        return print_json(&json::cluster(c));
    }
    println!(
        "primary: {}  term: {}",
        or_dash(c.primary.as_deref()),
        c.term
    );
    match c.hold_version {
        Some(hold) => println!(
            "cluster version: {} (held at {hold} by hold_version)",
            c.active_version
        ),
        None => println!("cluster version: {}", c.active_version),
    }
    println!("{:<10} {:<24} {:<12} VERSION", "NAME", "ADDRESS", "ROLE");
    for m in &c.members {
        let version = m.version.map_or_else(|| "-".to_string(), |v| v.to_string());
        println!(
            "{:<10} {:<24} {:<12} {version}",
            m.name,
            m.addr,
            m.role.name()
        );
    }
    if c.schedulers.is_empty() {
        println!("schedulers: none");
    } else {
        let names: Vec<String> = c
            .schedulers
            .iter()
            .map(|s| {
                let role = if s.active { "active" } else { "standby" };
                format!("{} ({role})", s.name)
            })
            .collect();
        println!("schedulers: {}", names.join(", "));
    }
}

/// Prints one event-stream item as it arrives: a JSON line, or a line of text.
pub fn stream_item(format: Format, item: &xce_client::events::StreamItem) {
    use xce_client::events::StreamItem;
    use xce_client::types::ClusterEvent;
    let mut out = std::io::stdout().lock();
    let _ = match (format, item) {
        (Format::Json, item) => writeln!(out, "{}", json::stream_item(item)),
        (Format::Text, StreamItem::Resync { reason }) => writeln!(out, "resync  {reason}"),
        (
            Format::Text,
            StreamItem::Event(ClusterEvent::Job {
                id,
                state,
                host,
                attempt,
                queue,
                pend_reason,
                reason,
                task,
                ..
            }),
        ) => writeln!(
            out,
            "job     <{}> {} queue={queue} host={} attempt={attempt}{}",
            task.map_or_else(
                || id.to_string(),
                |(array, index)| format!("{array}_{index}")
            ),
            state.name(),
            or_dash(host.as_deref()),
            pend_reason
                .as_deref()
                .or(reason.as_deref())
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        (Format::Text, StreamItem::Event(ClusterEvent::Host { name, state, .. })) => {
            writeln!(out, "host    <{name}> {}", state.name())
        }
        (
            Format::Text,
            StreamItem::Event(ClusterEvent::Queue {
                name,
                priority,
                open,
                active,
                ..
            }),
        ) => writeln!(
            out,
            "queue   <{name}> priority={priority} {} {}",
            if *open { "open" } else { "closed" },
            if *active { "active" } else { "inactive" }
        ),
    };
    let _ = out.flush();
}

/// Prints the tokens: never a secret, which the cluster does not have.
pub fn tokens(format: Format, tokens: &[xce_client::types::TokenInfo]) {
    if format == Format::Json {
        return print_json(&Value::Array(tokens.iter().map(json::token_info).collect()));
    }
    println!(
        "{:<16}  {:<16} {:<8} {:<20} EXPIRES",
        "ID", "USER", "ROLE", "CREATED"
    );
    for t in tokens {
        let expires = t.expires_ms.map(json::rfc3339);
        println!(
            "{:<16}  {:<16} {:<8} {:<20} {}",
            t.id,
            t.user,
            t.role.name(),
            json::rfc3339(t.created_ms),
            or_dash(expires.as_deref())
        );
    }
}
