//! Pod status as a kubelet reports it: what a running pod's status says (phase, addresses,
//! conditions, container statuses), and what a pod whose containers were stopped for deletion
//! says. Pure: given the pod and what the kubelet knows, the status to write, or `None` when the
//! pod already says it (timestamps of things that did not change are kept).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::{Value, json};

/// What the kubelet knows of a running pod.
pub struct Running<'a> {
    pub pod_ips: &'a [IpAddr],
    pub host_ips: &'a [IpAddr],
    /// Shown as `kube-ovn-lab://<id>` in the statuses of containers the runtime did not run.
    pub container_id: &'a str,
    /// The runtime's IDs (`containerd://<id>`) of the containers it runs, by name.
    pub container_ids: &'a BTreeMap<String, String>,
}

/// The pod's conditions and container states, as `ready` says.
const CONDITIONS: &[&str] = &[
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

fn conditions(pod: &Pod, ready: bool, now: &str) -> Vec<Value> {
    let old: Vec<Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let wanted = |type_: &str| match type_ {
        "Ready" | "ContainersReady" | "PodReadyToStartContainers" => ready,
        _ => true,
    };
    let mut out: Vec<Value> = Vec::new();
    // Conditions of other types are kept, in their place.
    for c in &old {
        let type_ = c["type"].as_str().unwrap_or_default();
        if !CONDITIONS.contains(&type_) {
            out.push(c.clone());
        }
    }
    for type_ in CONDITIONS {
        let status = if wanted(type_) { "True" } else { "False" };
        let previous = old.iter().find(|c| c["type"] == *type_);
        let since = previous
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        let mut condition = json!({"type": type_, "status": status, "lastProbeTime": null,
                                   "lastTransitionTime": since});
        if status == "False" && *type_ != "PodReadyToStartContainers" {
            condition["reason"] = json!(if *type_ == "Ready" || *type_ == "ContainersReady" {
                "PodCompleted"
            } else {
                "Unknown"
            });
        }
        out.push(condition);
    }
    out
}

/// When the container started: from its running state, or its terminated one once stopped.
fn started_at(pod: &Pod, container: &str) -> Option<Value> {
    let state = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()?;
    let since = match (&state.running, &state.terminated) {
        (Some(running), _) => running.started_at.as_ref(),
        (None, Some(terminated)) => terminated.started_at.as_ref(),
        (None, None) => None,
    };
    since.and_then(|t| serde_json::to_value(t).ok())
}

/// The status of the running pod, or `None` if it already says so.
pub fn running(pod: &Pod, running: &Running<'_>, now: &str) -> Option<Value> {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let since = started_at(pod, &c.name).unwrap_or_else(|| json!(now));
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                   "containerID": running.container_ids.get(&c.name).cloned()
                       .unwrap_or_else(|| format!("kube-ovn-lab://{}", running.container_id)),
                   "ready": true, "started": true, "restartCount": 0,
                   "state": {"running": {"startedAt": since}}, "lastState": {}})
        })
        .collect();
    let ips = |list: &[IpAddr]| {
        list.iter()
            .map(|ip| json!({"ip": ip.to_string()}))
            .collect::<Vec<_>>()
    };
    let start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| json!(now));
    let status = json!({
        "phase": "Running",
        "podIP": running.pod_ips.first().map(ToString::to_string),
        "podIPs": ips(running.pod_ips),
        "hostIP": running.host_ips.first().map(ToString::to_string),
        "hostIPs": ips(running.host_ips),
        "startTime": start,
        "conditions": conditions(pod, true, now),
        "containerStatuses": statuses,
    });
    changed(pod, status)
}

/// The status of a pod whose containers were stopped because it is being deleted, or `None` if
/// it already says so.
pub fn stopped(pod: &Pod, now: &str) -> Option<Value> {
    let old = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let statuses: Vec<Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let before = old.iter().find(|s| s.name == c.name);
            let finished = before
                .and_then(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                .and_then(|t| serde_json::to_value(t).ok())
                .unwrap_or_else(|| json!(now));
            let mut terminated = json!({"exitCode": 0, "reason": "Completed", "finishedAt": finished});
            if let Some(since) = started_at(pod, &c.name) {
                terminated["startedAt"] = since;
            }
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                   "containerID": before.and_then(|s| s.container_id.clone()),
                   "ready": false, "started": false, "restartCount": 0,
                   "state": {"terminated": terminated}, "lastState": {}})
        })
        .collect();
    let status = json!({"conditions": conditions(pod, false, now), "containerStatuses": statuses});
    changed(pod, status)
}

/// `status` if it differs from the pod's in a field it sets (compared as typed values, so
/// absent and null agree).
fn changed(pod: &Pod, status: Value) -> Option<Value> {
    let want: PodStatus = serde_json::from_value(status.clone()).ok()?;
    let have = pod.status.clone().unwrap_or_default();
    let same = status.as_object()?.keys().all(|k| match k.as_str() {
        "phase" => want.phase == have.phase,
        "podIP" => want.pod_ip == have.pod_ip,
        "podIPs" => want.pod_ips == have.pod_ips,
        "hostIP" => want.host_ip == have.host_ip,
        "hostIPs" => want.host_ips == have.host_ips,
        "startTime" => want.start_time == have.start_time,
        "conditions" => want.conditions == have.conditions,
        "containerStatuses" => want.container_statuses == have.container_statuses,
        _ => false,
    });
    (!same).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "2026-01-01T00:00:01Z";
    const T2: &str = "2026-01-01T00:00:02Z";

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "kube-ovn-lab/netexec"}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort",
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": T1}]},
        }))
        .unwrap()
    }

    fn apply(pod: &mut Pod, status: &Value) {
        let mut whole = serde_json::to_value(&pod.status).unwrap();
        for (k, v) in status.as_object().unwrap() {
            whole[k] = v.clone();
        }
        pod.status = Some(serde_json::from_value(whole).unwrap());
    }

    #[test]
    fn a_running_pod_says_so_once() {
        let pod_ips: Vec<IpAddr> = vec!["10.16.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let host_ips: Vec<IpAddr> = vec!["172.30.0.11".parse().unwrap()];
        let info = Running {
            pod_ips: &pod_ips,
            host_ips: &host_ips,
            container_id: "abc",
            container_ids: &BTreeMap::new(),
        };
        let mut p = pod();
        let status = running(&p, &info, T2).expect("a change");
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["podIP"], "10.16.0.5");
        assert_eq!(status["podIPs"], json!([{"ip": "10.16.0.5"}, {"ip": "fd00::5"}]));
        assert_eq!(status["hostIP"], "172.30.0.11");
        let conditions = status["conditions"].as_array().unwrap();
        assert!(conditions.iter().all(|c| c["status"] == "True"), "{conditions:?}");
        let scheduled = conditions.iter().find(|c| c["type"] == "PodScheduled").unwrap();
        assert_eq!(scheduled["lastTransitionTime"], T1, "kept");
        let container = &status["containerStatuses"][0];
        assert_eq!(
            (&container["ready"], &container["image"]),
            (&json!(true), &json!("kube-ovn-lab/netexec"))
        );
        assert_eq!(container["state"]["running"]["startedAt"], T2);
        apply(&mut p, &status);
        assert_eq!(
            running(&p, &info, "2026-01-01T00:00:09Z"),
            None,
            "nothing new to say"
        );
        // Deleted: not ready, containers terminated, once.
        let stop = stopped(&p, "2026-01-01T00:00:03Z").expect("a change");
        let ready = stop["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(
            (&ready["status"], &ready["lastTransitionTime"]),
            (&json!("False"), &json!("2026-01-01T00:00:03Z"))
        );
        assert_eq!(
            stop["containerStatuses"][0]["state"]["terminated"]["startedAt"],
            T2
        );
        assert_eq!(stop["containerStatuses"][0]["containerID"], "kube-ovn-lab://abc");
        apply(&mut p, &stop);
        assert_eq!(stopped(&p, "2026-01-01T00:00:04Z"), None);
    }
}
