//! Pod sandboxes: a JSON record per sandbox in the sandbox dir (shared by the lab's kubelets;
//! each reads its node's), so a restarted kubelet finds what it made and `kube-ovn-lab exec`
//! finds a pod's network namespace.
//!
//! With the direct runtime, a sandbox is a network namespace per pod, attached by running the
//! CNI conflist as a runtime does. The record is written *before* CNI ADD (without a result) and
//! completed after it: a kubelet killed mid-ADD leaves a record, and the sandbox is torn down
//! (DEL, netns removed) on restart like any other that is not wanted, instead of leaking an
//! address. With containerd ([`super::cri_pods`]) the sandbox is containerd's, and the record,
//! written once it is ready, holds its ID, network namespace and addresses ([`CriSandbox`]).

use std::io::ErrorKind;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use kube_ovn_testkit::netns;
use serde_json::Value;

use crate::agent::names::{container_id, short_hash};
use crate::cni_runtime::{self, Runtime, Sandbox};

/// Where `ip netns` keeps its namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// One pod sandbox, as recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRecord {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The node whose kubelet made it.
    #[serde(default)]
    pub node: String,
    /// The network namespace's name (`/run/netns/<netns>` for the direct runtime; the file name
    /// of [`CriSandbox::netns_path`] for containerd's).
    pub netns: String,
    /// The sandbox's ID (containerd's, or one of ours for the direct runtime).
    pub container_id: String,
    pub ifname: String,
    /// The CNI ADD result (direct runtime); `None` until ADD succeeded.
    pub result: Option<Value>,
    /// What containerd reported of its sandbox (containerd runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri: Option<CriSandbox>,
    pub created: String,
}

/// A containerd sandbox, as its verbose PodSandboxStatus described it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriSandbox {
    /// The network namespace file containerd mounted (under its state dir).
    pub netns_path: PathBuf,
    /// The addresses the runtime reports (its CNI result's).
    pub ips: Vec<IpAddr>,
}

impl SandboxRecord {
    /// A new sandbox for a pod on `node`: a fresh container ID, the namespace named after the
    /// pod's uid.
    pub fn new(node: &str, namespace: &str, name: &str, uid: &str, netns_prefix: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            node: node.to_owned(),
            netns: netns_name(netns_prefix, uid),
            container_id: container_id(),
            ifname: "eth0".into(),
            result: None,
            cri: None,
            created: crate::agent::now(),
        }
    }

    /// The record of containerd's ready sandbox `id` for a pod on `node`.
    pub fn of_cri(node: &str, namespace: &str, name: &str, uid: &str, id: &str, cri: CriSandbox) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            node: node.to_owned(),
            netns: cri
                .netns_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            container_id: id.to_owned(),
            ifname: "eth0".into(),
            result: None,
            cri: Some(cri),
            created: crate::agent::now(),
        }
    }

    /// Whether the sandbox was made (ADD succeeded, or containerd's is ready).
    pub fn is_ready(&self) -> bool {
        self.result.is_some() || self.cri.is_some()
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The pod's network namespace file.
    pub fn netns_path(&self) -> PathBuf {
        match &self.cri {
            Some(cri) => cri.netns_path.clone(),
            None => Path::new(NETNS_DIR).join(&self.netns),
        }
    }

    /// The record's file name: namespace and name are DNS names (no `_`), so the file of a pod
    /// is found by its prefix; the uid tells successive pods of one name apart.
    fn file_name(&self) -> String {
        format!("{}_{}_{}.json", self.namespace, self.name, self.uid)
    }

    pub fn cni(&self) -> Sandbox {
        Sandbox {
            container_id: self.container_id.clone(),
            netns: self.netns_path().display().to_string(),
            ifname: self.ifname.clone(),
            pod: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }

    /// The pod's addresses, from the ADD result's `ips` (in its order), or as containerd
    /// reported them.
    pub fn ips(&self) -> Vec<IpAddr> {
        match &self.cri {
            Some(cri) => cri.ips.clone(),
            None => result_ips(self.result.as_ref().unwrap_or(&Value::Null)),
        }
    }
}

/// The addresses of a CNI result (`ips[].address`, CIDRs).
pub fn result_ips(result: &Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .filter_map(|cidr| cidr.split('/').next()?.parse().ok())
        .collect()
}

/// `<prefix><10 hex of the pod uid's hash>`: unique per pod, stable across restarts.
pub fn netns_name(prefix: &str, uid: &str) -> String {
    format!("{prefix}{}", short_hash(uid.as_bytes(), 10))
}

/// The sandbox dir, or one node's records in it.
#[derive(Debug, Clone)]
pub struct SandboxDir {
    dir: PathBuf,
    node: Option<String>,
}

impl SandboxDir {
    /// Every record in `dir`.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            node: None,
        })
    }

    /// Only the records of `node`'s sandboxes: the lab's kubelets share one dir, and a kubelet
    /// must never tear down another node's sandbox as one of its pods that went.
    #[must_use]
    pub fn of_node(mut self, node: &str) -> Self {
        self.node = Some(node.to_owned());
        self
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn read(&self, prefix: &str) -> Vec<SandboxRecord> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the sandbox dir");
                return Vec::new();
            }
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let json = Path::new(&file)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"));
            if !file.starts_with(prefix) || !json {
                continue;
            }
            let path = entry.path();
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<SandboxRecord>(&b).map_err(|e| e.to_string()))
            {
                Ok(record) if self.node.as_ref().is_none_or(|n| *n == record.node) => records.push(record),
                Ok(_) => {}
                // Not ours to guess about: say so and leave the file for a person.
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "unreadable sandbox record; ignored");
                }
            }
        }
        records.sort_by(|a, b| a.created.cmp(&b.created));
        records
    }

    /// Every record.
    pub fn load_all(&self) -> Vec<SandboxRecord> {
        self.read("")
    }

    /// The records of pod `namespace/name` (any uid).
    pub fn load_for(&self, namespace: &str, name: &str) -> Vec<SandboxRecord> {
        self.read(&format!("{namespace}_{name}_"))
    }

    /// Writes a record (atomically: a reader never sees half of one).
    pub fn write(&self, record: &SandboxRecord) -> std::io::Result<()> {
        let path = self.dir.join(record.file_name());
        let tmp = self.dir.join(format!(".{}.tmp", record.file_name()));
        let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)
    }

    pub fn remove(&self, record: &SandboxRecord) -> std::io::Result<()> {
        match std::fs::remove_file(self.dir.join(record.file_name())) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// What can fail making or removing a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Netns(kube_ovn_testkit::CommandError),
    #[error("sandbox record in {dir}: {source}")]
    Record { dir: String, source: std::io::Error },
    #[error("CNI {command}: {source}")]
    Cni {
        command: &'static str,
        source: cni_runtime::Error,
    },
    #[error("CNI {command}: the plugin run did not finish: {message}")]
    Join { command: &'static str, message: String },
    #[error(transparent)]
    Cri(#[from] crate::runtime::cri::CriError),
    #[error("sandbox {id} is containerd's, and this kubelet runs without containerd")]
    NoRuntime { id: String },
    #[error("pod log dir {dir}: {source}")]
    Logs { dir: String, source: std::io::Error },
}

/// Runs the shared namespace helpers (`kube_ovn_testkit::netns`, the ones the tests use) off the
/// async workers: they wait for `ip`.
async fn netns_op(
    op: impl FnOnce() -> Result<(), kube_ovn_testkit::CommandError> + Send + 'static,
) -> Result<(), SandboxError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| SandboxError::Join {
            command: "netns",
            message: e.to_string(),
        })?
        .map_err(SandboxError::Netns)
}

/// Creates the namespace (replacing a leftover of the same name, which can only be an earlier
/// attempt for the same pod) with `lo` up, as runtimes bring it up.
pub async fn create_netns(name: &str) -> Result<(), SandboxError> {
    let name = name.to_owned();
    netns_op(move || {
        netns::del_netns(&name)?;
        netns::add_netns(&name)
    })
    .await
}

/// Removes the namespace; one already gone is fine.
pub async fn delete_netns(name: &str) -> Result<(), SandboxError> {
    let name = name.to_owned();
    netns_op(move || netns::del_netns(&name)).await
}

/// CNI ADD for the sandbox (blocking plugin runs, off the async workers).
pub async fn cni_add(runtime: &Runtime, record: &SandboxRecord) -> Result<Value, SandboxError> {
    let (runtime, sandbox) = (runtime.clone(), record.cni());
    tokio::task::spawn_blocking(move || runtime.add(&sandbox))
        .await
        .map_err(|e| SandboxError::Join {
            command: "ADD",
            message: e.to_string(),
        })?
        .map_err(|source| SandboxError::Cni {
            command: "ADD",
            source,
        })
}

/// CNI DEL for the sandbox, with its ADD result as `prevResult` when there is one.
pub async fn cni_del(runtime: &Runtime, record: &SandboxRecord) -> Result<(), SandboxError> {
    let (runtime, sandbox, prev) = (runtime.clone(), record.cni(), record.result.clone());
    tokio::task::spawn_blocking(move || runtime.del(&sandbox, prev.as_ref()))
        .await
        .map_err(|e| SandboxError::Join {
            command: "DEL",
            message: e.to_string(),
        })?
        .map_err(|source| SandboxError::Cni {
            command: "DEL",
            source,
        })
}

/// Makes a sandbox for the pod: record, namespace, ADD, record completed. On failure what was
/// made is undone (DEL, namespace, record) before the error is returned, as a runtime does
/// before the kubelet tries again.
pub async fn set_up(
    dir: &SandboxDir,
    runtime: &Runtime,
    mut record: SandboxRecord,
) -> Result<SandboxRecord, SandboxError> {
    let record_error = |source| SandboxError::Record {
        dir: dir.path().display().to_string(),
        source,
    };
    dir.write(&record).map_err(record_error)?;
    let attached = async {
        create_netns(&record.netns).await?;
        cni_add(runtime, &record).await
    }
    .await;
    match attached {
        Ok(result) => {
            record.result = Some(result);
            dir.write(&record).map_err(record_error)?;
            Ok(record)
        }
        Err(e) => {
            if let Err(undo) = tear_down(dir, runtime, &record).await {
                tracing::warn!(error = %undo, "undoing the failed sandbox failed; it stays recorded");
            }
            Err(e)
        }
    }
}

/// Removes a sandbox: DEL, namespace, record, in that order, so a failure leaves the record
/// for the next attempt.
pub async fn tear_down(
    dir: &SandboxDir,
    runtime: &Runtime,
    record: &SandboxRecord,
) -> Result<(), SandboxError> {
    cni_del(runtime, record).await?;
    delete_netns(&record.netns).await?;
    dir.remove(record).map_err(|source| SandboxError::Record {
        dir: dir.path().display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_are_found_by_pod() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SandboxDir::open(&tmp.path().join("sandboxes")).unwrap();
        let mut a = SandboxRecord::new("n1", "default", "a", "uid-1", "kol-t-p");
        a.result = Some(serde_json::json!({"ips": [{"address": "10.1.0.2/24"}, {"address": "fd00::2/64"}]}));
        let b = SandboxRecord::new("n1", "default", "a.b", "uid-2", "kol-t-p");
        dir.write(&a).unwrap();
        dir.write(&b).unwrap();
        std::fs::write(dir.path().join("default_broken_x.json"), "{").unwrap();
        assert_eq!(dir.load_for("default", "a"), [a.clone()]);
        assert_eq!(dir.load_all().len(), 2, "the broken one is skipped");
        // Another node's record is not this node's.
        let mut c = SandboxRecord::of_cri(
            "n2",
            "default",
            "c",
            "uid-3",
            "f00d",
            CriSandbox {
                netns_path: "/s/netns/cni-1".into(),
                ips: vec!["10.1.0.3".parse().unwrap()],
            },
        );
        dir.write(&c).unwrap();
        assert_eq!(dir.clone().of_node("n1").load_all().len(), 2);
        assert_eq!(dir.clone().of_node("n2").load_for("default", "c"), [c.clone()]);
        assert!(c.is_ready() && a.is_ready() && !b.is_ready());
        assert_eq!(c.netns_path(), PathBuf::from("/s/netns/cni-1"));
        assert_eq!(c.netns, "cni-1");
        assert_eq!(c.ips(), ["10.1.0.3".parse::<IpAddr>().unwrap()]);
        c.cri = None;
        assert_eq!(c.netns_path(), PathBuf::from("/run/netns/cni-1"));
        assert_eq!(
            a.ips(),
            ["10.1.0.2".parse::<IpAddr>().unwrap(), "fd00::2".parse().unwrap()]
        );
        assert!(a.netns.starts_with("kol-t-p") && a.netns.len() == "kol-t-p".len() + 10);
        assert_eq!(a.netns, netns_name("kol-t-p", "uid-1"), "stable");
        assert_ne!(a.netns, b.netns);
        dir.remove(&a).unwrap();
        dir.remove(&a).unwrap();
        assert!(dir.load_for("default", "a").is_empty());
    }
}
