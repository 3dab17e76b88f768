//! Traffic mirroring (Kube-OVN's `--enable-mirror`, `--mirror-iface` and the pod annotation
//! `ovn.kubernetes.io/mirror`): copies of pods' packets leave `br-int` through an internal port,
//! `mirror0` by default, where `tcpdump -i mirror0` on the node sees them.
//!
//! - `--enable-mirror=true`: one mirror selecting every packet on the bridge (`select_all`),
//!   whatever the pods say (Kube-OVN's global mirror).
//! - otherwise: the ports of pods on this node annotated `ovn.kubernetes.io/mirror: "true"`
//!   (`<provider>.kubernetes.io/mirror` for an attachment's port), both directions. Kube-OVN
//!   selects only the packets leaving OVS towards the pod (`select_dst_port`); we take the
//!   packets the pod sends as well, which is what "mirror this pod" is asked for.
//! - nothing to mirror: no Mirror row and no port (Kube-OVN keeps an empty mirror and
//!   `mirror0` on every node even with mirroring off; an idle interface on every node is noise
//!   to `ip link` and to the node's monitoring).
//!
//! Level-triggered, like the node task: each pass reads the pod cache and the Open_vSwitch
//! replica, plans the one mirror this node should have ([`desired`]), compares it with what
//! is there ([`step`]) and fixes the difference, so a restart converges (a leftover global
//! mirror of a daemon now started with `--enable-mirror=false` is narrowed or removed) and a
//! mirror deleted by hand comes back. Passes run on pod changes, on replica changes (a pod's
//! port plugged or unplugged by ADD/DEL), on reconnects and every 30 s.
//!
//! Trust: the annotation is written by whoever may edit the pod, a tenant. It is honoured
//! without any check because what it does cannot reach past the pod: it copies the pod's own
//! traffic to an interface of the node's network namespace, which only root on the node (or a
//! privileged hostNetwork pod, already root there) can read. It gives the tenant nothing; its
//! cost is the datapath copying those packets, bounded by the pod's own traffic. A value other
//! than `"true"` or `"false"` is taken as `"false"` (as Kube-OVN, which mirrors only on
//! `"true"`) and reported to the pod's author as a Warning event naming the pod and the key.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::annotations::provider_key;
use kube_ovn_dataplane::Netlink;
use kube_ovn_ovsdb::ChangeSet;
use kube_ovn_support::Watched;

use crate::config::Config;
use crate::error::DaemonError;
use crate::ovs::Ovs;
use crate::ovs::mirror::{MirrorState, Selection};

/// How long the task waits for the pod cache's first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);
/// How long ovs-vswitchd gets to open a new mirror port.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// The safety-net pass against outside changes the replica does not show (the link set down).
const RESYNC: Duration = Duration::from_secs(30);

/// Whether the pod's annotations ask for its port on `provider`'s network to be mirrored.
/// Absent or `"false"`: no; `"true"`: yes; anything else is an error naming the key and value
/// (the caller treats it as no).
pub fn pod_wants_mirror(
    annotations: Option<&BTreeMap<String, String>>,
    provider: &str,
) -> Result<bool, String> {
    let key = provider_key(provider, keys::MIRROR).map_err(|e| e.to_string())?;
    match annotations.and_then(|a| a.get(&key)).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(format!(
            "annotation {key}: {other:?} is neither \"true\" nor \"false\"; the pod is not mirrored"
        )),
    }
}

/// A pod port on the bridge and its pod, as the planner sees them.
#[derive(Debug, Clone)]
pub struct PortOwner<'a> {
    /// The OVS port (the veth's host end).
    pub port: &'a str,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The port's provider (`ovn` for the primary network).
    pub provider: &'a str,
    /// The pod's annotations; `None` when the pod is no longer in the cache (being deleted).
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

/// What this node's mirror should select (`None`: no mirror and no port), and per pod the
/// annotation refused.
pub fn desired(global: bool, owners: &[PortOwner<'_>]) -> (Option<Selection>, BTreeMap<String, String>) {
    let mut refused = BTreeMap::new();
    if global {
        return (Some(Selection::All), refused);
    }
    let mut ports = BTreeSet::new();
    for owner in owners {
        // A port whose pod left the cache is on its way out (DEL follows): not mirrored.
        let Some(annotations) = owner.annotations else {
            continue;
        };
        match pod_wants_mirror(Some(annotations), owner.provider) {
            Ok(true) => {
                ports.insert(owner.port.to_owned());
            }
            Ok(false) => {}
            Err(e) => {
                refused.insert(owner.pod.clone(), e);
            }
        }
    }
    ((!ports.is_empty()).then_some(Selection::Ports(ports)), refused)
}

/// What one pass does to the mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Already as wanted.
    Keep,
    /// Create the port and the mirror, or correct the mirror's selection.
    Apply(Selection),
    /// Remove the mirror and the port.
    Remove,
}

/// The step from `state` to `want` for mirror port `iface`.
pub fn step(want: Option<&Selection>, state: &MirrorState, iface: &str) -> Step {
    match want {
        None if state.port || state.mirror.is_some() => Step::Remove,
        None => Step::Keep,
        Some(selection) => {
            let done = state.port && state.mirror.as_ref().is_some_and(|m| m.matches(selection, iface));
            if done {
                Step::Keep
            } else {
                Step::Apply(selection.clone())
            }
        }
    }
}

/// The flags the mirror task reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--node-name`, for the events.
    pub node_name: String,
    /// `--enable-mirror`.
    pub global: bool,
    /// `--mirror-iface`.
    pub iface: String,
}

impl Settings {
    /// From the validated flags.
    pub fn new(config: &Config) -> Self {
        Self {
            node_name: config.flags.node_name.clone(),
            global: config.flags.enable_mirror,
            iface: config.flags.mirror_iface.clone(),
        }
    }
}

/// The mirror task: what it reads and acts on.
pub struct MirrorTask {
    /// Its flags.
    pub settings: Settings,
    /// For the Warning events.
    pub kube: kube::Client,
    /// The bridge, its ports and the mirror.
    pub ovs: Ovs,
    /// Netlink where ovs-vswitchd runs (the mirror port is there).
    pub ovs_nl: Netlink,
    /// Pods scheduled here (their annotations).
    pub pods: Watched<Pod>,
}

impl MirrorTask {
    /// Keeps the mirror as the flags and the pods ask, until the process ends.
    pub async fn run(self) {
        while !self.pods.synced(SYNC_WAIT).await {
            tracing::info!("the mirror waits for the pod cache to list once");
        }
        let recorder = Recorder::new(
            self.kube.clone(),
            Reporter {
                controller: "kube-ovn-cni".into(),
                instance: Some(self.settings.node_name.clone()),
            },
        );
        let mut pod_changes = self.pods.changes();
        let mut ovs_changes = self.ovs.subscribe();
        let mut ovs_state = self.ovs.state();
        // The refusal last published per pod, so a pod is told once per message.
        let mut reported: HashMap<String, String> = HashMap::new();
        let mut attempt = 0;
        let mut ovs_open = true;
        loop {
            let wait = match self.reconcile().await {
                Ok(refused) => {
                    attempt = 0;
                    reported.retain(|pod, _| refused.contains_key(pod));
                    for (pod, message) in refused {
                        if reported.get(&pod) != Some(&message) {
                            tracing::warn!(%pod, %message, "mirror annotation refused");
                            self.warn_pod(&recorder, &pod, &message).await;
                            reported.insert(pod, message);
                        }
                    }
                    RESYNC
                }
                Err(e) => {
                    let delay = crate::qos::retry_delay(attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(error = %e, retry_in = ?delay, "mirror not applied; will retry");
                    delay
                }
            };
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    _ = pod_changes.changed() => break,
                    _ = ovs_state.changed() => break,
                    set = ovs_changes.recv(), if ovs_open => {
                        let Some(set) = set else {
                            // The client is gone (shutdown): the timer and the pods remain.
                            ovs_open = false;
                            continue;
                        };
                        // One pass for everything queued meanwhile, and none for the
                        // statistics ovs-vswitchd writes every few seconds.
                        let mut relevant = touches_mirror(&set);
                        while let Ok(more) = ovs_changes.try_recv() {
                            relevant |= touches_mirror(&more);
                        }
                        if relevant {
                            break;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
        }
    }

    /// One pass: plans the mirror from the flags, the pods and their ports, and brings OVS
    /// and the mirror port's link to it. Returns the refused annotations by pod.
    pub async fn reconcile(&self) -> Result<BTreeMap<String, String>, DaemonError> {
        let iface = &self.settings.iface;
        let interfaces = self.ovs.pod_interfaces();
        let pods: Vec<_> = interfaces
            .iter()
            .map(|i| {
                let id = |k: &str| i.external_ids.get(k).map_or("", String::as_str);
                self.pods.get(id("pod_name"), Some(id("pod_namespace")))
            })
            .collect();
        let owners: Vec<PortOwner<'_>> = interfaces
            .iter()
            .zip(&pods)
            .map(|(i, pod)| {
                let id = |k: &str| i.external_ids.get(k).map_or("", String::as_str);
                PortOwner {
                    port: &i.name,
                    pod: format!("{}/{}", id("pod_namespace"), id("pod_name")),
                    provider: i.external_ids.get("provider").map_or("ovn", String::as_str),
                    annotations: pod
                        .as_ref()
                        .map(|p| p.metadata.annotations.as_ref().unwrap_or(&EMPTY)),
                }
            })
            .collect();
        let (want, refused) = desired(self.settings.global, &owners);
        let state = self.ovs.mirror_state(iface);
        match step(want.as_ref(), &state, iface) {
            Step::Keep => {}
            Step::Apply(selection) => {
                self.ovs.apply_mirror(iface, &selection).await?;
                match &selection {
                    Selection::All => tracing::info!(%iface, "mirroring every packet on the bridge"),
                    Selection::Ports(ports) => {
                        tracing::info!(%iface, ?ports, "mirroring the annotated pods' ports");
                    }
                }
            }
            Step::Remove => {
                self.ovs.remove_mirror(iface).await?;
                tracing::info!(%iface, "nothing to mirror: mirror and port removed");
            }
        }
        if want.is_some() {
            self.link_up(iface).await?;
        }
        Ok(refused)
    }

    /// Brings the mirror port's link up once ovs-vswitchd has made it (Kube-OVN
    /// `configureMirrorLink`): a down link captures nothing.
    async fn link_up(&self, iface: &str) -> Result<(), DaemonError> {
        self.ovs.wait_opened(iface, OPEN_TIMEOUT).await?;
        let link = self.ovs_nl.require_link(iface).await?;
        if !link.up {
            self.ovs_nl.set_up(link.index).await?;
            tracing::info!(%iface, "mirror port up");
        }
        Ok(())
    }

    /// A Warning event on pod `key` saying its mirror annotation was refused.
    async fn warn_pod(&self, recorder: &Recorder, key: &str, message: &str) {
        let Some((namespace, name)) = key.split_once('/') else {
            return;
        };
        let Some(pod) = self.pods.get(name, Some(namespace)) else {
            return;
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "MirrorAnnotationInvalid".into(),
            note: Some(format!(
                "pod {key} on node {}: {message}",
                self.settings.node_name
            )),
            action: "Mirror".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &pod.object_ref(&())).await {
            tracing::debug!(pod = %key, error = %e, "cannot publish event");
        }
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// Whether a replica change can change the plan: a port or interface came or went (ADD, DEL),
/// or a bridge's ports or mirrors, or a mirror's selection, changed (by us, or by hand). Not
/// the statistics ovs-vswitchd writes into Interface, Port and Mirror every few seconds.
fn touches_mirror(set: &ChangeSet) -> bool {
    set.resync
        || set.changes.iter().any(|ch| {
            let (Some(old), Some(new)) = (&ch.old, &ch.new) else {
                return matches!(&*ch.table, "Port" | "Interface" | "Bridge" | "Mirror");
            };
            let columns: &[&str] = match &*ch.table {
                "Bridge" => &["ports", "mirrors"],
                "Mirror" => &[
                    "name",
                    "select_all",
                    "select_src_port",
                    "select_dst_port",
                    "output_port",
                ],
                "Port" => &["name", "interfaces"],
                _ => &[],
            };
            columns.iter().any(|c| old.get(*c) != new.get(*c))
        })
}

#[cfg(test)]
mod tests;
