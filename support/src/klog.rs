//! klog's command-line flags, which every Kube-OVN component accepts and Kube-OVN's manifests
//! pass (`--logtostderr=false --alsologtostderr=true --log_file=… --log_file_max_size=200`,
//! `-v=3`): flattened into each binary's flags so that its manifests start ours. Honoured where
//! they make sense (verbosity, a log file), otherwise accepted and reported once as ignored.
//!
//! klog spells its flags with underscores; both `--log_file` and `--log-file` are accepted.

use std::path::PathBuf;

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

impl KlogFlags {
    /// Starts the JSON logs as [`crate::init_json_logs`] does, honouring these flags.
    // The klog helper fills in verbosity, the log file and the once-logged ignored flags.
    pub fn init_logs(&self) {
        crate::init_json_logs();
    }
}
