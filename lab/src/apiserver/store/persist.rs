//! The state file: JSON lines, a header and a snapshot, then one line appended per change.
//!
//! A process that dies mid-write leaves at most a torn last line, which loading ignores: at most
//! that one write is lost and the file is never corrupt. Opening rewrites the file as a fresh
//! snapshot through a temporary file and `rename`, so the log does not grow across restarts.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ObjectKey;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {path} is corrupt at line {line}: {reason}")]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(rename = "kube-ovn-lab-state")]
    format: u32,
    rv: u64,
}

#[derive(Serialize, Deserialize)]
struct Line {
    rv: u64,
    group: String,
    plural: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    namespace: String,
    name: String,
    /// Absent for a deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    object: Option<Value>,
}

impl Line {
    fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// Loads the state: the last resourceVersion and every object, CRDs first (their kinds must be
/// served before their objects can be restored). A missing file is an empty state.
pub fn load(path: &Path) -> Result<(u64, Vec<Value>), PersistError> {
    let io = |source| PersistError::Io {
        path: path.to_owned(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, Vec::new())),
        Err(e) => return Err(io(e)),
    };
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(io)?;
    let corrupt = |line: usize, reason: String| PersistError::Corrupt {
        path: path.to_owned(),
        line,
        reason,
    };
    let Some(first) = lines.first() else {
        return Ok((0, Vec::new()));
    };
    let header: Header = serde_json::from_str(first).map_err(|e| corrupt(1, format!("bad header: {e}")))?;
    if header.format != 1 {
        return Err(corrupt(1, format!("unknown format {}", header.format)));
    }
    let mut rv = header.rv;
    let mut objects: BTreeMap<ObjectKey, Value> = BTreeMap::new();
    for (i, text) in lines.iter().enumerate().skip(1) {
        let line: Line = match serde_json::from_str(text) {
            Ok(l) => l,
            // The last line may be torn by a crash in the middle of its write.
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => return Err(corrupt(i + 1, e.to_string())),
        };
        rv = rv.max(line.rv);
        let key = line.key();
        match line.object {
            Some(obj) => objects.insert(key, obj),
            None => objects.remove(&key),
        };
    }
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|(k, _)| k.plural == "customresourcedefinitions");
    Ok((rv, crds.into_iter().chain(rest).map(|(_, v)| v).collect()))
}

/// The open state file, appended to on every change.
pub struct Log {
    path: PathBuf,
    file: BufWriter<File>,
}

impl Log {
    /// Rewrites `path` as a snapshot of `objects` at `rv`, then keeps it open for appending.
    pub fn open(
        path: &Path,
        rv: u64,
        objects: &BTreeMap<ObjectKey, Arc<Value>>,
    ) -> Result<Self, PersistError> {
        let io = |source| PersistError::Io {
            path: path.to_owned(),
            source,
        };
        let tmp = path.with_extension("tmp");
        {
            let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
            serde_json::to_writer(&mut w, &Header { format: 1, rv }).map_err(|e| io(e.into()))?;
            w.write_all(b"\n").map_err(io)?;
            for (key, obj) in objects {
                write_line(&mut w, rv, key, Some(obj)).map_err(io)?;
            }
            let f = w.into_inner().map_err(|e| io(e.into_error()))?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        let file = OpenOptions::new().append(true).open(path).map_err(io)?;
        Ok(Self {
            path: path.to_owned(),
            file: BufWriter::new(file),
        })
    }

    /// Appends one change and hands it to the kernel (a process crash then cannot lose it).
    pub fn append(&mut self, rv: u64, key: &ObjectKey, object: Option<&Value>) -> Result<(), PersistError> {
        let io = |source| PersistError::Io {
            path: self.path.clone(),
            source,
        };
        write_line(&mut self.file, rv, key, object).map_err(io)?;
        self.file.flush().map_err(io)
    }
}

fn write_line(w: &mut impl Write, rv: u64, key: &ObjectKey, object: Option<&Value>) -> std::io::Result<()> {
    let line = Line {
        rv,
        group: key.group.clone(),
        plural: key.plural.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        object: object.cloned(),
    };
    // One write per line, so a crash tears at most the line being written.
    let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::from)?;
    bytes.push(b'\n');
    w.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(plural: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            plural: plural.into(),
            namespace: String::new(),
            name: name.into(),
        }
    }

    #[test]
    fn snapshot_then_appends_then_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut objects = BTreeMap::new();
        objects.insert(key("nodes", "a"), Arc::new(json!({"metadata": {"name": "a"}})));
        let mut log = Log::open(&path, 5, &objects).unwrap();
        log.append(6, &key("nodes", "b"), Some(&json!({"metadata": {"name": "b"}})))
            .unwrap();
        log.append(7, &key("nodes", "a"), None).unwrap();
        drop(log);
        // A crash in the middle of the next write.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"rv":8,"group":"","plural":"nodes","name":"c","obj"#)
            .unwrap();
        let (rv, objs) = load(&path).unwrap();
        assert_eq!(rv, 7);
        assert_eq!(objs, vec![json!({"metadata": {"name": "b"}})]);
    }

    #[test]
    fn corruption_in_the_middle_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{\"kube-ovn-lab-state\":1,\"rv\":1}\nnot json\n{\"rv\":2,\"group\":\"\",\"plural\":\"nodes\",\"name\":\"x\"}\n").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
