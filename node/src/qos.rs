//! Live QoS: keeps each running pod's port at the rates its annotations ask for
//! (`ingress_rate`, `egress_rate`, `egress_burst`), as Kube-OVN's daemon does on a pod update.
//!
//! Level-triggered: a pod event (or a finished ADD) only names the pod; the task then reads the
//! pod from the cache and the port from the replica and fixes what differs. A failed update
//! (OVSDB refused or lost the transaction) is retried with a doubling delay capped at
//! [`RETRY_MAX`], until it applies or a newer event supersedes it; a malformed annotation is not
//! retried, since only a new annotation can fix it: the port keeps its rates, and the pod gets a
//! Warning event (`QoSAnnotationInvalid`, naming the key and value; once per message) — the
//! annotations are the pod author's, and a value the controller's reader refuses (`2.5`) is
//! refused here too.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use kube_ovn_support::Watched;

use crate::error::DaemonError;
use crate::ovs::Ovs;
use crate::plan;

/// The first retry's delay; each further one doubles it.
pub const RETRY_MIN: Duration = Duration::from_millis(200);
/// The longest delay between two retries of one pod.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// How long to wait before retry number `attempt` (0 for the first).
pub fn retry_delay(attempt: u32) -> Duration {
    RETRY_MIN
        .checked_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
        .map_or(RETRY_MAX, |d| d.min(RETRY_MAX))
}

/// Pods to look at, each when it is due; a pod appears once however often it is named.
#[derive(Debug, Default)]
pub struct Pending {
    due: HashMap<String, (Instant, u32)>,
}

impl Pending {
    /// Look at `key` now (an event: any backoff starts over).
    pub fn now(&mut self, key: String, now: Instant) {
        self.due.insert(key, (now, 0));
    }

    /// `key` failed at `now`: look again after the next backoff delay, which is returned.
    pub fn failed(&mut self, key: String, now: Instant, attempt: u32) -> Duration {
        let delay = retry_delay(attempt);
        self.due.insert(key, (now + delay, attempt + 1));
        delay
    }

    /// Removes and returns the keys due at `now`, with their attempt numbers.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, u32)> {
        let keys: Vec<String> = self
            .due
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.due.remove(&k).map(|(_, attempt)| (k, attempt)))
            .collect()
    }

    /// When the next key is due.
    pub fn next(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }
}

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The QoS task: what it reads and acts on. Its inputs are the two channels [`Qos::run`] takes;
/// its outputs are the ports' QoS rows and Warning events on the pods.
pub struct Qos {
    /// `--node-name`, for the events.
    pub node_name: String,
    /// For the events.
    pub kube: kube::Client,
    /// The ports, and their QoS.
    pub ovs: Ovs,
    /// Pods scheduled here (their annotations).
    pub pods: Watched<Pod>,
}

/// Runs until both inputs close: pod events from the watch, and pods whose ADD finished (their
/// port may have been made from annotations older than the last event).
pub async fn qos_task(
    qos: Qos,
    mut applied: mpsc::UnboundedReceiver<Arc<Pod>>,
    mut added: mpsc::UnboundedReceiver<String>,
) {
    let mut pending = Pending::default();
    let recorder = Recorder::new(
        qos.kube.clone(),
        Reporter {
            controller: "kube-ovn-cni".into(),
            instance: Some(qos.node_name.clone()),
        },
    );
    // The refusal last published per pod, so a pod is told once per message, not per event.
    let mut reported: HashMap<String, String> = HashMap::new();
    let (mut events_open, mut adds_open) = (true, true);
    while events_open || adds_open || pending.next().is_some() {
        let wake = pending.next();
        tokio::select! {
            event = applied.recv(), if events_open => match event {
                Some(pod) => pending.now(pod_key(&pod), Instant::now()),
                None => events_open = false,
            },
            key = added.recv(), if adds_open => match key {
                Some(key) => pending.now(key, Instant::now()),
                None => adds_open = false,
            },
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                for (key, attempt) in pending.take_due(Instant::now()) {
                    let span = tracing::info_span!("qos", pod = %key);
                    match qos.sync_pod_qos(&key).instrument(span.clone()).await {
                        Ok(refused) if refused.is_empty() => {
                            reported.remove(&key);
                        }
                        Ok(refused) => {
                            let message = refused.join("; ");
                            if reported.get(&key) != Some(&message) {
                                warn_pod(&qos, &recorder, &key, &message).await;
                                reported.insert(key, message);
                            }
                        }
                        Err(e) => {
                            let delay = pending.failed(key, Instant::now(), attempt);
                            span.in_scope(|| tracing::warn!(error = %e, attempt, retry_in = ?delay, "QoS update failed; will retry"));
                        }
                    }
                }
            }
        }
    }
}

/// A Warning event on pod `key` saying which QoS annotation was refused and that its port keeps
/// the rates it has.
async fn warn_pod(qos: &Qos, recorder: &Recorder, key: &str, message: &str) {
    let Some((namespace, name)) = key.split_once('/') else {
        return;
    };
    let Some(pod) = qos.pods.get(name, Some(namespace)) else {
        return;
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "QoSAnnotationInvalid".into(),
        note: Some(format!(
            "node {}: {message}; the port keeps its current rates until the annotation is fixed",
            qos.node_name
        )),
        action: "ApplyQoS".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(pod = %key, error = %e, "cannot publish event");
    }
}

impl Qos {
    /// Brings every port of pod `key` (`namespace/name`) to the rates its annotations ask for.
    /// A pod no longer cached has nothing to do (DEL removes its ports). Returns the refusals:
    /// per port whose annotations are malformed, the port and the error (key and value); such a
    /// port keeps its rates.
    pub async fn sync_pod_qos(&self, key: &str) -> Result<Vec<String>, DaemonError> {
        let mut refused = Vec::new();
        let Some((namespace, name)) = key.split_once('/') else {
            return Ok(refused);
        };
        let Some(pod) = self.pods.get(name, Some(namespace)) else {
            return Ok(refused);
        };
        for iface in self.ovs.pod_interfaces() {
            let ids = &iface.external_ids;
            if ids.get("pod_name").map(String::as_str) != Some(name)
                || ids.get("pod_namespace").map(String::as_str) != Some(namespace)
            {
                continue;
            }
            let provider = ids.get("provider").map_or("ovn", String::as_str);
            let wanted = match plan::qos_plan(pod.metadata.annotations.as_ref(), provider) {
                Ok(q) => q,
                Err(e) => {
                    tracing::warn!(port = %iface.name, error = %e, "QoS annotation refused until it changes");
                    refused.push(format!("port {}: {e}", iface.name));
                    continue;
                }
            };
            if self.ovs.current_qos(&iface.name) != Some(wanted) {
                self.ovs.set_qos(&iface.name, wanted).await?;
                tracing::info!(port = %iface.name, ?wanted, "QoS updated");
            }
        }
        Ok(refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_cap_and_never_overflow() {
        assert_eq!(retry_delay(0), RETRY_MIN);
        assert_eq!(retry_delay(1), RETRY_MIN * 2);
        assert_eq!(retry_delay(3), RETRY_MIN * 8);
        assert_eq!(retry_delay(20), RETRY_MAX);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
        let total: Duration = (0..8).map(retry_delay).sum();
        assert!(
            total < Duration::from_mins(1),
            "{total:?}: the first retries come quickly"
        );
    }

    #[test]
    fn pending_keys_come_due_once_and_an_event_resets_the_backoff() {
        let t0 = Instant::now();
        let mut pending = Pending::default();
        pending.now("a/p".into(), t0);
        pending.now("a/p".into(), t0);
        assert_eq!(pending.take_due(t0), vec![("a/p".to_owned(), 0)]);
        assert!(pending.take_due(t0).is_empty() && pending.next().is_none());

        let delay = pending.failed("a/p".into(), t0, 0);
        assert_eq!(pending.next(), Some(t0 + delay));
        assert!(pending.take_due(t0).is_empty(), "not before its delay");
        let later = t0 + delay;
        assert_eq!(pending.take_due(later), vec![("a/p".to_owned(), 1)]);
        let second = pending.failed("a/p".into(), later, 1);
        assert_eq!(second, delay * 2);
        // A new event for the pod makes it due at once, back at attempt 0.
        pending.now("a/p".into(), later);
        assert_eq!(pending.take_due(later), vec![("a/p".to_owned(), 0)]);
    }
}
