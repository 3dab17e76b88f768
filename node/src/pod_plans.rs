//! A pod's [`NicPlan`] as the pods cache shows it: read now, or awaited on the pod watch until
//! the controller's annotations are complete (ADD), with what was missing when it times out.
//! Reads only the caches; used by the NIC server (`nic`, `server`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube_ovn_api::crd::{Subnet, Vlan};
use kube_ovn_api::wire::CniRequest;
use kube_ovn_support::Watched;

use crate::error::DaemonError;
use crate::metrics::Metrics;
use crate::plan::{self, NicPlan, PlanError, PlanInputs, Readiness, WaitingFor};

/// What a plan is read from.
#[derive(Clone)]
pub struct PodPlans {
    /// Pods scheduled here.
    pub pods: Watched<Pod>,
    /// Every subnet (their MTU, provider, underlay and gateway-check settings).
    pub subnets: Watched<Subnet>,
    /// The Vlans (an underlay subnet's ProviderNetwork, whose MTU label the pod takes).
    pub vlans: Watched<Vlan>,
    /// The nodes (this node's provider-network MTU label).
    pub nodes: Watched<Node>,
    /// The MTU when the subnet sets none.
    pub default_mtu: u32,
    /// `--node-name`, for the timeout's message.
    pub node_name: String,
    /// `--wait-address-timeout`: how long ADD waits for the annotations.
    pub wait_address_timeout: Duration,
    /// The waits for the address and the route are measured.
    pub metrics: Metrics,
}

impl PodPlans {
    /// Kube-OVN: the provider must be `ovn` or some subnet's `spec.provider`.
    pub fn check_provider(&self, provider: &str) -> Result<(), DaemonError> {
        if provider.is_empty() || provider == "ovn" {
            return Ok(());
        }
        let known = self
            .subnets
            .all()
            .iter()
            .any(|s| s.spec.provider.as_deref().is_some_and(|p| p == provider));
        if known {
            Ok(())
        } else {
            Err(DaemonError::BadRequest(format!(
                "provider {provider} is not bound to any subnet"
            )))
        }
    }

    /// The plan from the cached pod as it is now; `None` while annotations are incomplete.
    pub fn plan_now(&self, request: &CniRequest) -> Result<Option<NicPlan>, DaemonError> {
        Ok(match self.readiness_now(request)? {
            Some(Readiness::Ready(plan)) => Some(*plan),
            _ => None,
        })
    }

    /// Where the cached pod stands with its annotations; `None` while the pod is not cached.
    fn readiness_now(&self, request: &CniRequest) -> Result<Option<Readiness>, DaemonError> {
        let pod_id = || format!("{}/{}", request.pod_namespace, request.pod_name);
        let Some(pod) = self.pods.get(&request.pod_name, Some(&request.pod_namespace)) else {
            return Ok(None);
        };
        let annotations = pod.metadata.annotations.as_ref();
        let provider = if request.provider.is_empty() {
            "ovn"
        } else {
            &request.provider
        };
        let ls_key = format!("{provider}.kubernetes.io/logical_switch");
        let subnet = annotations
            .and_then(|a| a.get(&ls_key))
            .and_then(|ls| self.subnets.get(ls, None));
        let node = self.nodes.get(&self.node_name, None);
        // The subnet's Vlan names the provider network, not the pod's annotation (Trust).
        let vlan = subnet
            .as_ref()
            .and_then(|s| s.spec.vlan.as_deref())
            .filter(|v| !v.is_empty())
            .and_then(|v| self.vlans.get(v, None));
        let inputs = PlanInputs {
            request,
            subnet: subnet.as_deref(),
            provider_network: vlan.as_ref().and_then(|v| v.spec.effective_provider()),
            node_labels: node.as_ref().and_then(|n| n.metadata.labels.as_ref()),
            default_mtu: self.default_mtu,
        };
        match plan::readiness(annotations, &inputs) {
            Ok(readiness) => Ok(Some(readiness)),
            Err(PlanError::Annotation(source)) => Err(DaemonError::Annotation {
                pod: pod_id(),
                source,
            }),
            // Kube-OVN answers these with a failure the runtime retries: the label and the
            // U2O IP are written by others and may be fixed by the next try.
            Err(PlanError::Subnet(source)) => Err(DaemonError::NotReady {
                pod: pod_id(),
                what: source.to_string(),
            }),
        }
    }

    /// Re-evaluates `step` on the cached pod at once and after every pod event, until it gives
    /// a value or `deadline` passes (`Ok(None)`).
    async fn on_pod_changes<T>(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
        mut step: impl FnMut() -> Result<Option<T>, DaemonError>,
    ) -> Result<Option<T>, DaemonError> {
        let mut changes = self.pods.changes();
        loop {
            if let Some(value) = step()? {
                return Ok(Some(value));
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(DaemonError::Timeout {
                        pod: format!("{}/{}", request.pod_namespace, request.pod_name),
                        what: "the pod watch stopped; the daemon is shutting down".into(),
                    });
                }
                Err(_) => return Ok(None),
            }
        }
    }

    /// The cached pod, failing when it is being deleted.
    fn live_pod(&self, request: &CniRequest) -> Result<Option<Arc<Pod>>, DaemonError> {
        let pod = self.pods.get(&request.pod_name, Some(&request.pod_namespace));
        if pod
            .as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        {
            return Err(DaemonError::PodGone(format!(
                "{}/{}",
                request.pod_namespace, request.pod_name
            )));
        }
        Ok(pod)
    }

    fn not_seen(&self, request: &CniRequest) -> DaemonError {
        DaemonError::Timeout {
            pod: format!("{}/{}", request.pod_namespace, request.pod_name),
            what: format!(
                "not seen on node {} within {:?}; is it scheduled here?",
                self.node_name, self.wait_address_timeout
            ),
        }
    }

    /// Waits until the pod is in this node's cache (so it is scheduled here) and alive.
    pub async fn wait_for_pod(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
    ) -> Result<(), DaemonError> {
        self.on_pod_changes(request, deadline, || Ok(self.live_pod(request)?.map(drop)))
            .await?
            .ok_or_else(|| self.not_seen(request))
    }

    /// Waits (on the pod watch, not a poll) for the controller's annotations, until
    /// `deadline`; the timeout says what was missing.
    pub async fn wait_for_plan(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
    ) -> Result<NicPlan, DaemonError> {
        let started = Instant::now();
        let mut waiting_for: Option<WaitingFor> = None;
        let mut address_seen_at = None;
        let plan = self
            .on_pod_changes(request, deadline, || {
                self.live_pod(request)?;
                // One reading of the annotations per wake-up: the plan, or what is missing.
                match self.readiness_now(request)? {
                    Some(Readiness::Ready(plan)) => {
                        let now = started.elapsed();
                        let address_at = address_seen_at.unwrap_or(now);
                        self.metrics.wait("address", address_at);
                        self.metrics.wait("route", now.saturating_sub(address_at));
                        return Ok(Some(*plan));
                    }
                    Some(Readiness::Waiting(w)) => {
                        if w == WaitingFor::Route && address_seen_at.is_none() {
                            address_seen_at = Some(started.elapsed());
                        }
                        waiting_for = Some(w);
                    }
                    None => {}
                }
                Ok(None)
            })
            .await?;
        if let Some(plan) = plan {
            return Ok(plan);
        }
        let timeout = self.wait_address_timeout;
        let provider = if request.provider.is_empty() {
            "ovn"
        } else {
            &request.provider
        };
        let what = match waiting_for {
            None => return Err(self.not_seen(request)),
            Some(WaitingFor::Address) => format!(
                "no address allocated within {timeout:?} (annotation {provider}.kubernetes.io/allocated); see kube-ovn-controller logs"
            ),
            Some(WaitingFor::Route) => format!(
                "route is not ready within {timeout:?} (annotation {provider}.kubernetes.io/routed); see kube-ovn-controller logs"
            ),
        };
        Err(DaemonError::Timeout {
            pod: format!("{}/{}", request.pod_namespace, request.pod_name),
            what,
        })
    }
}
