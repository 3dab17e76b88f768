//! The state file: what `up` made, written *before* each thing is made, so `down` can undo a lab
//! whose `up` crashed halfway. `down` undoes the records in reverse order and tolerates a record
//! whose thing never came to exist.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::topology::TorKind;

/// One thing `up` made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Made {
    /// A network namespace (its veths go with it).
    Netns { name: String },
    /// A process, stopped by PID; `start_time` (field 22 of `/proc/<pid>/stat`) tells it from a
    /// later process that got the same PID.
    Process {
        component: String,
        pid: u32,
        start_time: u64,
    },
}

/// How the lab's components run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Install {
    /// Our binaries as lab processes, the agent's kubelet stand-ins making pods.
    #[default]
    Processes,
    /// Real kubelets and containerd per node; everything of ours from `deploy/` (`kubectl
    /// apply -k deploy/overlays/lab`), in containers of the image built here.
    Manifests,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    pub name: String,
    pub nodes: usize,
    pub tor: TorKind,
    /// Where the component binaries were taken from.
    pub bin_dir: PathBuf,
    /// Set when `up` finished (the matrix may still have failed).
    #[serde(default)]
    pub up_finished: bool,
    #[serde(default)]
    pub install: Install,
    pub made: Vec<Made>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("reading the lab's state file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the lab's state file {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing the lab's state file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

impl LabState {
    /// The state at `path`; `Ok(None)` when there is none (the lab is not up).
    pub fn load(path: &Path) -> Result<Option<Self>, StateError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StateError::Parse {
                    path: path.to_owned(),
                    source,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Read {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Writes through a temporary file and a rename, so a crash leaves the old or the new file,
    /// never half of one.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let err = |source| StateError::Write {
            path: path.to_owned(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        std::fs::write(&tmp, bytes).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    pub fn processes(&self) -> impl DoubleEndedIterator<Item = (&str, u32, u64)> {
        self.made.iter().filter_map(|m| match m {
            Made::Process {
                component,
                pid,
                start_time,
            } => Some((component.as_str(), *pid, *start_time)),
            Made::Netns { .. } => None,
        })
    }

    /// The newest record of `component` (a restarted component has several).
    pub fn process(&self, component: &str) -> Option<(u32, u64)> {
        self.processes()
            .rev()
            .find(|(c, _, _)| *c == component)
            .map(|(_, pid, start)| (pid, start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tells_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert!(LabState::load(&path).unwrap().is_none());
        let state = LabState {
            name: "x".into(),
            nodes: 2,
            tor: TorKind::Frr,
            bin_dir: "/b".into(),
            up_finished: false,
            install: Install::Manifests,
            made: vec![
                Made::Netns {
                    name: "kl_x_cp".into(),
                },
                Made::Process {
                    component: "apiserver".into(),
                    pid: 42,
                    start_time: 7,
                },
                Made::Process {
                    component: "apiserver".into(),
                    pid: 43,
                    start_time: 9,
                },
            ],
        };
        state.save(&path).unwrap();
        let back = LabState::load(&path).unwrap().unwrap();
        assert_eq!(back, state);
        assert_eq!(back.process("apiserver"), Some((43, 9)));
        assert_eq!(back.process("controller"), None);
        std::fs::write(&path, "{").unwrap();
        let err = LabState::load(&path).unwrap_err().to_string();
        assert!(err.contains("not valid"), "{err}");
    }
}
