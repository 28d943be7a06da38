//! One logging setup for every daemon: text for a person or JSON lines for a log pipeline
//! (`--log-format`, `XCE_LOG_FORMAT`, `log.format:` in the YAML), and the level from
//! `RUST_LOG` when set, else `--log-level` / `XCE_LOG_LEVEL` / `log.level:`, else the daemon's
//! default. Logs go to stderr (journald takes them from there under systemd).

use serde::Deserialize;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (coloured only at a terminal).
    #[default]
    Text,
    /// One JSON object per line, with the event's span fields (job id, node name).
    Json,
}

impl LogFormat {
    /// The flag's value for this format.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Where a worker hands its log settings to the job shims it starts (its own executable):
/// the format, and the filter. The shim takes them out of its environment at once.
pub const HANDOFF_FORMAT: &str = "XCE_SHIM_LOG_FORMAT";
/// See [`HANDOFF_FORMAT`].
pub const HANDOFF_FILTER: &str = "XCE_SHIM_LOG_FILTER";

/// The logging flags every daemon takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// Log lines as text or as JSON objects [default: text].
    #[arg(long, env = "XCE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// The log level or filter ("info", "debug", "info,openraft=warn"); RUST_LOG wins.
    #[arg(long, env = "XCE_LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// The `log:` keys of a daemon's YAML; the flags win over them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogFile {
    pub format: Option<LogFormat>,
    pub level: Option<String>,
}

/// A filter that does not parse, named with where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {filter:?} is not a log level or filter: {reason}")]
pub struct LogError {
    pub source_name: &'static str,
    pub filter: String,
    pub reason: String,
}

/// What the flags, the environment and the file settle on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// The filter and where it came from.
    pub filter: (String, &'static str),
}

impl LogArgs {
    /// Flags (and their variables) over the file, over `default`; `RUST_LOG` over all.
    pub fn resolve(&self, file: &LogFile, default: &str) -> LogSettings {
        let format = self.log_format.or(file.format).unwrap_or_default();
        let filter = match (std::env::var("RUST_LOG").ok(), &self.log_level, &file.level) {
            (Some(env), _, _) if !env.trim().is_empty() => (env, "RUST_LOG"),
            (_, Some(flag), _) => (flag.clone(), "--log-level"),
            (_, None, Some(file)) => (file.clone(), "log.level"),
            _ => (default.to_string(), "the default log level"),
        };
        LogSettings { format, filter }
    }
}

impl LogSettings {
    /// What a worker handed its shim ([`HANDOFF_FORMAT`]), removed from the environment; the
    /// plain default (text, `RUST_LOG` or info) when there is none. Call while the process
    /// has one thread.
    pub fn take_handoff() -> LogSettings {
        let format = std::env::var(HANDOFF_FORMAT).ok();
        let filter = std::env::var(HANDOFF_FILTER).ok();
        std::env::remove_var(HANDOFF_FORMAT);
        std::env::remove_var(HANDOFF_FILTER);
        let args = LogArgs {
            log_format: format
                .and_then(|f| <LogFormat as clap::ValueEnum>::from_str(&f, true).ok()),
            log_level: filter,
        };
        args.resolve(&LogFile::default(), "info")
    }

    /// The variables that hand these settings to a shim.
    pub fn handoff(&self) -> [(&'static str, String); 2] {
        [
            (HANDOFF_FORMAT, self.format.name().to_string()),
            (HANDOFF_FILTER, self.filter.0.clone()),
        ]
    }

    /// The filter, checked.
    pub fn env_filter(&self) -> Result<EnvFilter, LogError> {
        let (filter, from) = &self.filter;
        EnvFilter::try_new(filter).map_err(|e| LogError {
            source_name: from,
            filter: filter.clone(),
            reason: e.to_string(),
        })
    }

    /// Installs the process's subscriber (once, in `main`).
    pub fn install(&self) -> Result<(), LogError> {
        let filter = self.env_filter()?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match self.format {
            LogFormat::Json => builder.json().with_current_span(true).init(),
            // Colour only for a person at a terminal; log files stay plain text.
            LogFormat::Text => builder
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shim takes on what its worker handed it, and leaves none of it to its job.
    #[test]
    fn a_shim_takes_its_workers_settings_out_of_its_environment() {
        let worker = LogSettings {
            format: LogFormat::Json,
            filter: ("debug,openraft=warn".into(), "log.level"),
        };
        for (k, v) in worker.handoff() {
            std::env::set_var(k, v);
        }
        let shim = LogSettings::take_handoff();
        assert_eq!(shim.format, LogFormat::Json);
        if std::env::var("RUST_LOG").map_or(true, |v| v.trim().is_empty()) {
            assert_eq!(shim.filter.0, "debug,openraft=warn");
        }
        assert!(std::env::var(HANDOFF_FORMAT).is_err());
        assert!(std::env::var(HANDOFF_FILTER).is_err());
        // Nothing handed over: text and the default level.
        assert_eq!(LogSettings::take_handoff().format, LogFormat::Text);
    }

    #[test]
    fn flags_win_over_the_file_and_a_bad_filter_is_named() {
        // RUST_LOG is read by resolve; this test runs with it unset or set alike by
        // comparing against what it would pick.
        let env = std::env::var("RUST_LOG")
            .ok()
            .filter(|e| !e.trim().is_empty());
        let file = LogFile {
            format: Some(LogFormat::Json),
            level: Some("debug".into()),
        };
        let none = LogArgs::default();
        let s = none.resolve(&file, "info");
        assert_eq!(s.format, LogFormat::Json);
        if env.is_none() {
            assert_eq!(s.filter, ("debug".to_string(), "log.level"));
        }
        let flags = LogArgs {
            log_format: Some(LogFormat::Text),
            log_level: Some("warn".into()),
        };
        let s = flags.resolve(&file, "info");
        assert_eq!(s.format, LogFormat::Text);
        if env.is_none() {
            assert_eq!(s.filter, ("warn".to_string(), "--log-level"));
            let s = none.resolve(&LogFile::default(), "info,openraft=warn");
            assert_eq!(s.filter.1, "the default log level");
            assert!(s.env_filter().is_ok());
        }
        let bad = LogSettings {
            format: LogFormat::Text,
            filter: ("xce=loud".into(), "log.level"),
        };
        let e = bad.env_filter().unwrap_err().to_string();
        assert!(e.starts_with("log.level: \"xce=loud\""), "{e}");
    }
}
