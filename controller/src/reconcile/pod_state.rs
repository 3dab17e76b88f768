//! What a Pod object says about its network that several reconcilers read: its NIC key, and
//! whether it still needs an address. Pure: no I/O.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube_ovn_api::names;

/// The provider of the pod's primary NIC (Kube-OVN's default, `ovn`).
const PROVIDER: &str = "ovn";

/// The pod's NIC key: its switch port's and IP CR's name, `<pod>.<ns>`.
pub fn port_name(pod: &Pod) -> String {
    names::pod_port_name(&pod.name_any(), &pod.namespace().unwrap_or_default(), PROVIDER)
}

/// Whether the pod still needs its network (Kube-OVN's `isPodAlive`): a finished pod that will
/// not restart, an evicted one, or one past its deletion grace period does not.
pub fn is_alive(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    let restart = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let finished = (phase == "Succeeded" && restart != "Always")
        || (phase == "Failed" && restart == "Never")
        || (phase == "Failed" && status.and_then(|s| s.reason.as_deref()) == Some("Evicted"));
    !finished && grace_left(pod).is_none_or(|left| !left.is_zero())
}

/// Time left until a deleted pod's grace period ends (`None`: not being deleted).
pub fn grace_left(pod: &Pod) -> Option<Duration> {
    let deleted = pod.metadata.deletion_timestamp.as_ref()?;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    let end = deleted.0 + k8s_openapi::jiff::SignedDuration::from_secs(grace);
    let left = end.duration_since(k8s_openapi::jiff::Timestamp::now());
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}
