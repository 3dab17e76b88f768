//! klog's command-line flags, which every Kube-OVN component accepts and Kube-OVN's manifests
//! pass (`--logtostderr=false --alsologtostderr=true --log_file=… --log_file_max_size=200`,
//! `-v=3`): flattened into each binary's flags so that its manifests start ours. Honoured where
//! they make sense (verbosity, a log file), otherwise accepted and reported once as ignored.
//!
//! klog spells its flags with underscores; both `--log_file` and `--log-file` are accepted.
//!
//! What is honoured ([`KlogFlags::plan`], a pure function, decides):
//! - `-v`: the level when `RUST_LOG` is not set — 0–2 info, 3–4 debug, 5 and more trace (Kube-OVN
//!   logs its details at `V(3)` and its traces at `V(5)`). `RUST_LOG` always wins.
//! - `--logtostderr=false` with `--log_file`: JSON lines appended to that file (its directory is
//!   created); `--log_dir` alone: `<log_dir>/<program>.log`. Without either the lines stay on
//!   stdout (klog would write to the temporary directory; a pod's stdout is more useful).
//! - `--alsologtostderr=true`: every line on stdout too (our JSON logs have always gone to
//!   stdout, klog's to stderr); otherwise only lines at or above `--stderrthreshold` (klog's
//!   default: ERROR).
//! - `--log_file_max_size` (MB, klog's default 1800, 0: no limit): past it, the file is renamed
//!   `<file>.1` (replacing the previous one) and a new file started. klog truncates instead;
//!   keeping one generation loses less.
//!
//! Everything else given (`--vmodule`, header flags, `--log_backtrace_at`, `--one_output`, file
//! flags with `--logtostderr=true`, `-v` under `RUST_LOG`) is accepted and named once, in one
//! log line at start, as ignored.

use std::path::PathBuf;

use tracing::Level;

mod output;
#[cfg(test)]
mod tests;

pub use output::RotatingFile;

/// klog's flags (k8s.io/klog/v2 `InitFlags`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KlogFlags {
    /// klog verbosity: 0–2 info, 3–4 debug, 5 and more trace (unless `RUST_LOG` is set).
    #[arg(short = 'v', long = "v", env = "KLOG_V", default_value_t = 0)]
    pub verbosity: u8,
    /// Log to standard error instead of files (klog's default: true).
    #[arg(long = "logtostderr", alias = "log-to-stderr", env = "KLOG_LOGTOSTDERR", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub logtostderr: Option<bool>,
    /// Log to standard error as well as to the log file.
    #[arg(long = "alsologtostderr", env = "KLOG_ALSOLOGTOSTDERR", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub alsologtostderr: Option<bool>,
    /// Write the log to this file (when `--logtostderr=false`).
    #[arg(long = "log_file", alias = "log-file", env = "KLOG_LOG_FILE")]
    pub log_file: Option<PathBuf>,
    /// Maximum size of the log file in MB before it is cut (0: no limit).
    #[arg(
        long = "log_file_max_size",
        alias = "log-file-max-size",
        env = "KLOG_LOG_FILE_MAX_SIZE"
    )]
    pub log_file_max_size: Option<u64>,
    /// Directory for log files (klog names its files itself).
    #[arg(long = "log_dir", alias = "log-dir", env = "KLOG_LOG_DIR")]
    pub log_dir: Option<PathBuf>,
    /// Severity at or above which logs also go to stderr.
    #[arg(long = "stderrthreshold", env = "KLOG_STDERRTHRESHOLD")]
    pub stderrthreshold: Option<String>,
    /// Per-file verbosity (`pattern=N,…`).
    #[arg(long = "vmodule", env = "KLOG_VMODULE")]
    pub vmodule: Option<String>,
    /// Omit the header prefix of each line.
    #[arg(long = "skip_headers", alias = "skip-headers", env = "KLOG_SKIP_HEADERS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub skip_headers: Option<bool>,
    /// Omit headers in log files.
    #[arg(long = "skip_log_headers", alias = "skip-log-headers", env = "KLOG_SKIP_LOG_HEADERS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub skip_log_headers: Option<bool>,
    /// Put the file's directory in the header.
    #[arg(long = "add_dir_header", alias = "add-dir-header", env = "KLOG_ADD_DIR_HEADER", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub add_dir_header: Option<bool>,
    /// Emit a stack trace when logging at `file:line`.
    #[arg(
        long = "log_backtrace_at",
        alias = "log-backtrace-at",
        env = "KLOG_LOG_BACKTRACE_AT"
    )]
    pub log_backtrace_at: Option<String>,
    /// Only write each line to its own severity level's log file.
    #[arg(long = "one_output", alias = "one-output", env = "KLOG_ONE_OUTPUT", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub one_output: Option<bool>,
}

/// Where the lines go and at which level, decided from the flags alone ([`KlogFlags::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPlan {
    /// The filter from `-v`, or `None` when `RUST_LOG` decides.
    pub filter: Option<Level>,
    /// The least severe level written to stdout (`TRACE`: every line).
    pub stdout_from: Level,
    /// The log file, if any.
    pub file: Option<FileSink>,
    /// The flags given that have no effect, in klog's spelling (`--vmodule`).
    pub ignored: Vec<&'static str>,
}

/// A log file and its size limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSink {
    /// The file the lines are appended to.
    pub path: PathBuf,
    /// Its size in bytes past which it is rotated; `None`: no limit.
    pub max_bytes: Option<u64>,
}

/// klog's default `--log_file_max_size`, in MB.
const DEFAULT_MAX_SIZE_MB: u64 = 1800;

impl KlogFlags {
    /// What these flags ask for. `rust_log_set`: `RUST_LOG` is set (it then decides the level);
    /// `program` names the file under `--log_dir`.
    #[must_use]
    pub fn plan(&self, rust_log_set: bool, program: &str) -> LogPlan {
        let mut ignored = Vec::new();
        let filter = if rust_log_set {
            if self.verbosity != 0 {
                ignored.push("-v");
            }
            None
        } else {
            Some(verbosity_level(self.verbosity))
        };
        let file = if self.logtostderr.unwrap_or(true) {
            // klog: the file flags have no effect when logging to stderr.
            for (given, name) in [
                (self.log_file.is_some(), "--log_file"),
                (self.log_dir.is_some(), "--log_dir"),
                (self.log_file_max_size.is_some(), "--log_file_max_size"),
                (self.alsologtostderr.is_some(), "--alsologtostderr"),
                (self.stderrthreshold.is_some(), "--stderrthreshold"),
            ] {
                if given {
                    ignored.push(name);
                }
            }
            None
        } else {
            let path = match (&self.log_file, &self.log_dir) {
                (Some(file), dir) => {
                    if dir.is_some() {
                        // klog: `--log_file` wins over `--log_dir`.
                        ignored.push("--log_dir");
                    }
                    Some(file.clone())
                }
                (None, Some(dir)) => Some(dir.join(format!("{program}.log"))),
                (None, None) => None,
            };
            if path.is_none() {
                ignored.push("--logtostderr");
                if self.log_file_max_size.is_some() {
                    ignored.push("--log_file_max_size");
                }
            }
            path.map(|path| FileSink {
                path,
                max_bytes: match self.log_file_max_size.unwrap_or(DEFAULT_MAX_SIZE_MB) {
                    0 => None,
                    mb => Some(mb.saturating_mul(1024 * 1024)),
                },
            })
        };
        let stdout_from = if file.is_none() || self.alsologtostderr == Some(true) {
            if file.is_some() && self.stderrthreshold.is_some() {
                ignored.push("--stderrthreshold");
            }
            Level::TRACE
        } else {
            match self.stderrthreshold.as_deref().map(threshold_level) {
                None => Level::ERROR,
                Some(Some(level)) => level,
                Some(None) => {
                    ignored.push("--stderrthreshold");
                    Level::ERROR
                }
            }
        };
        for (given, name) in [
            (self.vmodule.is_some(), "--vmodule"),
            (self.skip_headers.is_some(), "--skip_headers"),
            (self.skip_log_headers.is_some(), "--skip_log_headers"),
            (self.add_dir_header.is_some(), "--add_dir_header"),
            (self.log_backtrace_at.is_some(), "--log_backtrace_at"),
            (self.one_output.is_some(), "--one_output"),
        ] {
            if given {
                ignored.push(name);
            }
        }
        LogPlan {
            filter,
            stdout_from,
            file,
            ignored,
        }
    }

    /// Starts the JSON logs as [`crate::init_json_logs`] does, honouring these flags, then logs
    /// once which of them were accepted and ignored. The program's name (for `--log_dir`) is
    /// its file name.
    pub fn init_logs(&self) {
        let program = std::env::args_os()
            .next()
            .map(PathBuf::from)
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "kube-ovn".to_owned());
        self.init_logs_with(&program, &[]);
    }

    /// [`KlogFlags::init_logs`] for `program`, naming in the same one line `other_ignored` too
    /// (the component's Kube-OVN flags we do not implement, from [`crate::kube_ovn_flags`]).
    pub fn init_logs_with(&self, program: &str, other_ignored: &[String]) {
        let plan = self.plan(std::env::var_os("RUST_LOG").is_some(), program);
        let opened = plan
            .file
            .as_ref()
            .map(|sink| RotatingFile::open(&sink.path, sink.max_bytes).map_err(|e| (sink, e)));
        let (file, open_error) = match opened {
            Some(Ok(file)) => (Some(file), None),
            Some(Err((sink, e))) => (None, Some(format!("{}: {e}", sink.path.display()))),
            None => (None, None),
        };
        // A file that cannot be opened leaves every line on stdout: never a start failure.
        let stdout_from = if file.is_some() {
            plan.stdout_from
        } else {
            Level::TRACE
        };
        output::install(plan.filter, stdout_from, file);
        if let Some(error) = open_error {
            tracing::error!(%error, "cannot open the log file (--log_file); logging to stdout only");
        }
        let ignored: Vec<String> = plan
            .ignored
            .iter()
            .map(|s| (*s).to_owned())
            .chain(other_ignored.iter().cloned())
            .collect();
        if !ignored.is_empty() {
            tracing::warn!(
                ignored = %ignored.join(" "),
                "accepted and ignored: flags of Kube-OVN's manifests this binary does not implement"
            );
        }
    }
}

/// klog's `-v` as a level: Kube-OVN logs details at `V(3)`, and more at `V(5)`.
#[must_use]
pub fn verbosity_level(v: u8) -> Level {
    match v {
        0..=2 => Level::INFO,
        3..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// klog's `--stderrthreshold`: a severity name or its number (0 INFO … 3 FATAL).
fn threshold_level(value: &str) -> Option<Level> {
    match value.trim().to_ascii_uppercase().as_str() {
        "INFO" | "0" => Some(Level::INFO),
        "WARNING" | "1" => Some(Level::WARN),
        // We have no FATAL: an error is the most severe line.
        "ERROR" | "2" | "FATAL" | "3" => Some(Level::ERROR),
        _ => None,
    }
}
