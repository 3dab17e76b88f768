//! The node's network health, as Kube-OVN's `loopOvn0Check`: every `--ovn0-check-interval` the
//! join subnet's gateway is pinged through `ovn0`, and the Node's `NetworkUnavailable`
//! condition says the outcome (reason `JoinSubnetGatewayReachable` or
//! `JoinSubnetGatewayUnreachable`). The controller's gateway selection reads it: a node whose
//! join gateway is unreachable cannot carry a centralized subnet's traffic, so its subnets fail
//! over to a standby.
//!
//! Unlike Kube-OVN's daemon, which exits when the ping fails, this one keeps running (and
//! serving CNI requests), reports the condition and checks again.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_dataplane::{Netlink, Netns, ping};
use kube_ovn_support::Watched;

use crate::error::DaemonError;
use crate::join::{OVN0, join_address};

/// The Node condition type (Kubernetes' own) and Kube-OVN's reasons.
pub const CONDITION: &str = "NetworkUnavailable";
pub const REACHABLE: &str = "JoinSubnetGatewayReachable";
pub const UNREACHABLE: &str = "JoinSubnetGatewayUnreachable";

/// Echo requests per check, each given this long: an unreachable gateway is known within
/// 3 s of the check starting, and a loaded userspace datapath gets a second per echo.
const ATTEMPTS: u32 = 3;
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// Kube-OVN's daemon checks only after waiting at start-up for `ovn0` to reach its gateway;
/// here, until the first answer, a failure is reported only once this much time has passed
/// (ovn-controller may still be installing the node's flows; a node reported unavailable
/// meanwhile would lose its centralized subnets to another gateway for nothing).
const STARTUP_GRACE: Duration = Duration::from_secs(30);

/// `(status, reason, message)` of the condition for an outcome, worded as Kube-OVN words it.
pub fn condition(reachable: bool, gateways: &[IpAddr]) -> (&'static str, &'static str, String) {
    let list = gateways
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if reachable {
        (
            "False",
            REACHABLE,
            format!("ping check to gateway ip {list} succeeded"),
        )
    } else {
        (
            "True",
            UNREACHABLE,
            format!("ping check to gateway ip {list} failed"),
        )
    }
}

/// Whether `node` already carries exactly this condition.
fn has_condition(node: &K8sNode, wanted: &(&str, &str, String)) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == CONDITION
                && c.status == wanted.0
                && c.reason.as_deref() == Some(wanted.1)
                && c.message.as_deref() == Some(wanted.2.as_str())
        })
}

/// The ovn0 check task: what it reads. Its only input is its own interval; its output is the
/// Node's condition.
pub struct Ovn0Check {
    /// `--node-name`.
    pub node_name: String,
    /// `--ovn0-check-interval`.
    pub interval: Duration,
    /// Where ovs-vswitchd runs (`ovn0` is there), and netlink in it.
    pub ovs_ns: Netns,
    pub ovs_nl: Netlink,
    /// Every Node (this one's join annotations and its current condition).
    pub nodes: Watched<K8sNode>,
    /// To patch the Node's status.
    pub kube: kube::Client,
}

impl Ovn0Check {
    /// Checks every `--ovn0-check-interval`, for as long as the daemon runs.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let started = tokio::time::Instant::now();
        let mut answered_once = false;
        loop {
            tick.tick().await;
            let grace = !answered_once && started.elapsed() < STARTUP_GRACE;
            match self.check_once(grace).await {
                Ok(Some(true)) => answered_once = true,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ovn0 check failed; will retry"),
            }
        }
    }

    /// One check; `Some(reachable)` once there was something to check. In `grace`, an unreachable
    /// gateway is not reported yet.
    async fn check_once(&self, grace: bool) -> Result<Option<bool>, DaemonError> {
        let name = &self.node_name;
        let Some(me) = self.nodes.get(name, None) else {
            return Ok(None);
        };
        // Before the controller's join annotations and the node task's ovn0 there is nothing to
        // check yet (and no reason to call the network unavailable).
        let Ok(Some(join)) = join_address(&me) else {
            return Ok(None);
        };
        if join.gateways.is_empty() || self.ovs_nl.link(OVN0).await?.is_none() {
            return Ok(None);
        }
        let mut reachable = true;
        for gateway in &join.gateways {
            let answered = ping::ping(&self.ovs_ns, OVN0, *gateway, ATTEMPTS, REPLY_TIMEOUT)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot ping the join gateway");
                    false
                });
            reachable &= answered;
        }
        if !reachable && grace {
            tracing::debug!("join gateway not answering yet; within the start-up grace");
            return Ok(Some(false));
        }
        let wanted = condition(reachable, &join.gateways);
        if has_condition(&me, &wanted) {
            return Ok(Some(reachable));
        }
        if reachable {
            tracing::info!(gateways = %wanted.2, "join subnet gateway reachable through ovn0");
        } else {
            tracing::warn!(gateways = %wanted.2, "join subnet gateway unreachable through ovn0: Node NetworkUnavailable=True");
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        // A strategic merge of one condition (merge key `type`): the kubelet's stay as they are.
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": CONDITION, "status": wanted.0, "reason": wanted.1, "message": wanted.2,
            "lastTransitionTime": now, "lastHeartbeatTime": now,
        }]}});
        Api::<K8sNode>::all(self.kube.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(|source| DaemonError::Kube {
                op: format!("set condition {CONDITION} on node {name}"),
                source: Box::new(source),
            })?;
        Ok(Some(reachable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_worded_as_kube_ovns_and_compared_whole() {
        let gw: Vec<IpAddr> = vec!["100.64.0.1".parse().unwrap()];
        let up = condition(true, &gw);
        assert_eq!(
            up,
            (
                "False",
                REACHABLE,
                "ping check to gateway ip 100.64.0.1 succeeded".to_owned()
            )
        );
        let down = condition(false, &gw);
        assert_eq!((down.0, down.1), ("True", UNREACHABLE));
        let node: K8sNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "False", "reason": REACHABLE,
                 "message": "ping check to gateway ip 100.64.0.1 succeeded"}]}
        }))
        .unwrap();
        assert!(has_condition(&node, &up));
        assert!(!has_condition(&node, &down));
    }
}
