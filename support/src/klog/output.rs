//! Where the JSON lines go: stdout (from a least severe level) and a log file that is rotated
//! past its size limit ([`RotatingFile`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Level;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// A log file appended to, renamed `<file>.1` and started anew when the next line would take it
/// past `max_bytes`. Each line is written whole, so a rotation never cuts one.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: Option<u64>,
    file: File,
    size: u64,
}

impl RotatingFile {
    /// Opens (creating it and its directory) `path` for appending.
    ///
    /// # Errors
    /// When the directory or the file cannot be created or opened.
    pub fn open(path: &Path, max_bytes: Option<u64>) -> io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            max_bytes,
            file,
            size,
        })
    }

    /// Appends one record (a whole line), rotating first if it would pass the limit. A record
    /// larger than the limit on its own still goes whole into a fresh file.
    ///
    /// # Errors
    /// When the rename, the new file or the write fails.
    pub fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        let len = u64::try_from(record.len()).unwrap_or(u64::MAX);
        if let Some(max) = self.max_bytes
            && self.size > 0
            && self.size.saturating_add(len) > max
        {
            self.rotate()?;
        }
        self.file.write_all(record)?;
        self.size = self.size.saturating_add(len);
        Ok(())
    }

    /// The previous generation's name: `<file>.1`.
    #[must_use]
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        std::fs::rename(&self.path, Self::rotated_path(&self.path))?;
        self.file = OpenOptions::new().create(true).append(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// The file as a `tracing` writer: each event is gathered in a buffer and written as one record
/// when the formatter is done with it.
#[derive(Clone)]
struct FileWriter(Arc<Mutex<RotatingFile>>);

struct Record {
    file: Arc<Mutex<RotatingFile>>,
    buf: Vec<u8>,
}

impl Write for Record {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_record(&self.buf) {
            // The log cannot report its own failure; stderr is the one place left.
            eprintln!("writing the log file {}: {e}", file.path.display());
        }
    }
}

impl<'a> MakeWriter<'a> for FileWriter {
    type Writer = Record;

    fn make_writer(&'a self) -> Self::Writer {
        Record {
            file: Arc::clone(&self.0),
            buf: Vec::with_capacity(256),
        }
    }
}

/// Installs the global subscriber: JSON lines with the current span (as
/// [`crate::init_json_logs`]), filtered by `filter` or else `RUST_LOG` (default info), on stdout
/// from `stdout_from` and, every line, in `file`.
pub(super) fn install(filter: Option<Level>, stdout_from: Level, file: Option<RotatingFile>) {
    let filter = match filter {
        Some(level) => EnvFilter::default().add_directive(LevelFilter::from_level(level).into()),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
    };
    let stdout = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_filter(LevelFilter::from_level(stdout_from));
    let file = file.map(|file| {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_ansi(false)
            .with_writer(FileWriter(Arc::new(Mutex::new(file))))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(stdout)
        .with(file)
        .init();
}
