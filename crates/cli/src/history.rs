//! `xce history`: finished jobs that retired from the cluster's live state (`sacct`,
//! `bhist`), from the answering controller's history store, page by page.

use clap::Args;
use xce_client::history::{id_range, HistoryFilter, TimeField};
use xce_client::ops::list_history;
use xce_client::types::{JobId, JobResult, JobState};
use xce_client::when;

use crate::columns;
use crate::commands::{check, client, job_results, job_states, remember};
use crate::output::{self, fail};
use crate::{Cli, Format};

/// The most records one listing reads before it stops and says how to narrow it.
const MAX_SCAN: u64 = 2_000_000;

/// List finished jobs that left the live state (retired to history), as `sacct`: one line per
/// job, or with -o json an array of job objects.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only jobs of this user.
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Only jobs charged to this account.
    #[arg(long, short = 'A')]
    account: Option<String>,
    /// Only jobs of this queue.
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// Only jobs of exactly this name.
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Only jobs in these states (repeatable): done or exited.
    #[arg(long, value_parser = job_states())]
    state: Vec<JobState>,
    /// Only jobs that ended with these results (repeatable).
    #[arg(long, value_parser = job_results())]
    result: Vec<JobResult>,
    /// Only an array's own record and its tasks'.
    #[arg(long, value_name = "ID")]
    array: Option<JobId>,
    /// Only these ids: ID, or FIRST-LAST (either end may be left out).
    #[arg(long = "id", value_name = "RANGE")]
    ids: Option<String>,
    /// Only jobs whose time (--time-of) is at or after TIME: now-1d, today, YYYY-MM-DD,
    /// YYYY-MM-DDTHH:MM[:SS] (local time) or RFC 3339.
    #[arg(long, short = 'S', value_name = "TIME")]
    since: Option<String>,
    /// Only jobs whose time (--time-of) is at or before TIME (the forms of --since).
    #[arg(long, short = 'E', value_name = "TIME")]
    until: Option<String>,
    /// Which time --since and --until bound: submit, start or end.
    #[arg(long = "time-of", value_name = "WHICH", default_value = "end",
          value_parser = clap::builder::PossibleValuesParser::new(["submit", "start", "end"]))]
    time_of: String,
    /// The text table's columns, comma-separated (those of xce jobs --format).
    #[arg(long, value_name = "COLUMNS", default_value = columns::HISTORY)]
    format: String,
    /// At most this many jobs, the lowest ids first.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Only jobs with ids above this one: the last id of the previous page.
    #[arg(long, value_name = "ID", default_value_t = 0)]
    after: JobId,
}

impl HistoryArgs {
    /// The filter the flags give, or the flag that does not read.
    fn filter(&self, f: Format) -> HistoryFilter {
        let time = |flag: &str, text: &Option<String>, day| {
            text.as_deref().map(|t| {
                when::parse(t, when::now_ms(), day)
                    .unwrap_or_else(|e| fail(f, "invalid", &format!("{flag}: {e}")))
            })
        };
        let (first_id, last_id) = match self.ids.as_deref().map(id_range) {
            None => (None, None),
            Some(Ok(range)) => range,
            Some(Err(e)) => fail(f, "invalid", &e),
        };
        HistoryFilter {
            user: self.user.clone(),
            account: self.account.clone(),
            queue: self.queue.clone(),
            name: self.name.clone(),
            states: self.state.clone(),
            results: self.result.clone(),
            array: self.array,
            first_id,
            last_id,
            time: TimeField::parse(&self.time_of).unwrap_or(TimeField::End),
            since_ms: time("since", &self.since, when::TimeOfDay::Last),
            until_ms: time("until", &self.until, when::TimeOfDay::Next),
        }
    }
}

/// Runs `xce history`.
pub async fn run(cli: &Cli, args: &HistoryArgs) -> i32 {
    let f = cli.output;
    let columns = columns::parse(&args.format).unwrap_or_else(|e| fail(f, "invalid", &e));
    let filter = args.filter(f);
    let (c, hint) = client(cli);
    let mut printer = output::JobsPrinter::new(f, columns);
    let listed = list_history(&c, filter, args.after, args.limit, MAX_SCAN, |page| {
        printer.page(page)
    })
    .await;
    match &listed {
        Ok(_) => printer.finish(),
        Err(_) => printer.abort(),
    }
    let listed = check(f, listed);
    if listed.behind > 0 {
        eprintln!(
            "xce: the answering controller's history lacks {} retired jobs (it is catching up): \
             this listing may lack some",
            listed.behind
        );
    }
    if listed.scan_capped {
        eprintln!(
            "xce: stopped after reading {} history records with jobs left to look at: narrow \
             the query with --user, --account, --array or --id, or go on with --after {}",
            listed.scanned, listed.next
        );
    }
    remember(&c, &hint);
    0
}
