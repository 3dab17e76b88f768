use std::path::{Path, PathBuf};

use clap::Parser;
use tracing::Level;

use super::{FileSink, KlogFlags, LogPlan, RotatingFile, verbosity_level};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    klog: KlogFlags,
}

fn klog(args: &[&str]) -> KlogFlags {
    Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
        .unwrap()
        .klog
}

fn plan(args: &[&str]) -> LogPlan {
    klog(args).plan(false, "kube-ovn-test")
}

/// Kube-OVN v1.16.2's install.sh and speaker.yaml pass exactly these to every component.
const MANIFEST: &[&str] = &[
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--log_file=/var/log/kube-ovn/kube-ovn-controller.log",
    "--log_file_max_size=200",
];

#[test]
fn kube_ovns_manifest_flags_write_the_file_and_stdout_and_ignore_nothing() {
    assert_eq!(
        plan(MANIFEST),
        LogPlan {
            filter: Some(Level::INFO),
            stdout_from: Level::TRACE,
            file: Some(FileSink {
                path: PathBuf::from("/var/log/kube-ovn/kube-ovn-controller.log"),
                max_bytes: Some(200 * 1024 * 1024),
            }),
            ignored: vec![],
        }
    );
}

#[test]
fn no_flags_is_stdout_at_info() {
    let plan = plan(&[]);
    assert_eq!(plan.filter, Some(Level::INFO));
    assert_eq!(plan.stdout_from, Level::TRACE);
    assert_eq!(plan.file, None);
    assert!(plan.ignored.is_empty());
}

#[test]
fn verbosity_maps_to_levels_unless_rust_log_is_set() {
    assert_eq!(verbosity_level(0), Level::INFO);
    assert_eq!(verbosity_level(2), Level::INFO);
    assert_eq!(verbosity_level(3), Level::DEBUG);
    assert_eq!(verbosity_level(4), Level::DEBUG);
    assert_eq!(verbosity_level(5), Level::TRACE);
    assert_eq!(verbosity_level(9), Level::TRACE);
    assert_eq!(plan(&["-v=3"]).filter, Some(Level::DEBUG));
    assert_eq!(plan(&["--v", "5"]).filter, Some(Level::TRACE));
    let under_rust_log = klog(&["-v=3"]).plan(true, "p");
    assert_eq!(under_rust_log.filter, None);
    assert_eq!(under_rust_log.ignored, vec!["-v"]);
    assert!(klog(&[]).plan(true, "p").ignored.is_empty());
}

#[test]
fn file_flags_are_ignored_when_logging_to_stderr_as_klog_does() {
    let plan = plan(&[
        "--log_file=/tmp/x.log",
        "--log_file_max_size=10",
        "--alsologtostderr",
    ]);
    assert_eq!(plan.file, None);
    assert_eq!(
        plan.ignored,
        vec!["--log_file", "--log_file_max_size", "--alsologtostderr"]
    );
}

#[test]
fn without_alsologtostderr_stdout_gets_what_reaches_the_threshold() {
    let only_file = plan(&["--logtostderr=false", "--log-file=/tmp/x.log"]);
    assert_eq!(only_file.stdout_from, Level::ERROR);
    assert_eq!(
        only_file.file.map(|f| f.max_bytes),
        Some(Some(1800 * 1024 * 1024)),
        "klog's default size limit"
    );
    let warnings = plan(&[
        "--logtostderr=false",
        "--log_file=/tmp/x.log",
        "--stderrthreshold=WARNING",
    ]);
    assert_eq!(warnings.stdout_from, Level::WARN);
    assert!(warnings.ignored.is_empty());
    assert_eq!(
        plan(&["--logtostderr=false", "--log_file=/tmp/x", "--stderrthreshold=0"]).stdout_from,
        Level::INFO
    );
    let bad = plan(&[
        "--logtostderr=false",
        "--log_file=/tmp/x",
        "--stderrthreshold=loud",
    ]);
    assert_eq!(
        (bad.stdout_from, bad.ignored),
        (Level::ERROR, vec!["--stderrthreshold"])
    );
}

#[test]
fn log_dir_names_the_file_after_the_program_and_loses_to_log_file() {
    let dir = plan(&[
        "--logtostderr=false",
        "--log_dir=/var/log/kube-ovn",
        "--log_file_max_size=0",
    ]);
    assert_eq!(
        dir.file,
        Some(FileSink {
            path: PathBuf::from("/var/log/kube-ovn/kube-ovn-test.log"),
            max_bytes: None,
        })
    );
    let both = plan(&["--logtostderr=false", "--log_dir=/a", "--log_file=/b/c.log"]);
    assert_eq!(both.file.map(|f| f.path), Some(PathBuf::from("/b/c.log")));
    assert_eq!(both.ignored, vec!["--log_dir"]);
}

#[test]
fn no_file_to_write_keeps_stdout_and_says_so() {
    let plan = plan(&["--logtostderr=false", "--log_file_max_size=5"]);
    assert_eq!(plan.file, None);
    assert_eq!(plan.stdout_from, Level::TRACE);
    assert_eq!(plan.ignored, vec!["--logtostderr", "--log_file_max_size"]);
}

#[test]
fn flags_without_meaning_for_json_lines_are_named_once_each() {
    let plan = plan(&[
        "--vmodule=foo=3",
        "--skip_headers",
        "--skip_log_headers=true",
        "--add_dir_header=false",
        "--log_backtrace_at=x.go:1",
        "--one_output",
    ]);
    assert_eq!(
        plan.ignored,
        vec![
            "--vmodule",
            "--skip_headers",
            "--skip_log_headers",
            "--add_dir_header",
            "--log_backtrace_at",
            "--one_output"
        ]
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn the_file_and_its_directory_are_created_and_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kube-ovn/deeper/x.log");
    RotatingFile::open(&path, None)
        .unwrap()
        .write_record(b"one\n")
        .unwrap();
    // A restart appends, as klog does on start.
    RotatingFile::open(&path, None)
        .unwrap()
        .write_record(b"two\n")
        .unwrap();
    assert_eq!(read(&path), "one\ntwo\n");
}

#[test]
fn past_the_limit_the_file_becomes_dot_one_and_lines_stay_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.log");
    let rotated = RotatingFile::rotated_path(&path);
    assert_eq!(rotated, dir.path().join("x.log.1"));
    let mut file = RotatingFile::open(&path, Some(10)).unwrap();
    file.write_record(b"aaaa\n").unwrap();
    file.write_record(b"bbbb\n").unwrap();
    assert!(!rotated.exists(), "exactly at the limit: no rotation yet");
    file.write_record(b"cccc\n").unwrap();
    assert_eq!(
        (read(&rotated), read(&path)),
        ("aaaa\nbbbb\n".into(), "cccc\n".into())
    );
    // The next rotation replaces the previous generation.
    file.write_record(b"a line longer than the limit\n").unwrap();
    assert_eq!(read(&rotated), "cccc\n");
    assert_eq!(read(&path), "a line longer than the limit\n");
    // A reopened file counts the bytes already in it.
    let mut reopened = RotatingFile::open(&path, Some(40)).unwrap();
    reopened.write_record(b"dddddddddddd\n").unwrap();
    assert_eq!(read(&rotated), "a line longer than the limit\n");
    assert_eq!(read(&path), "dddddddddddd\n");
}
