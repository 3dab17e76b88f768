//! The lab's EndpointSlice controller: for each Service with a selector, EndpointSlices
//! (discovery.k8s.io/v1) listing the pods of its namespace that match, as Kubernetes'
//! endpointslice controller writes them (what kube-ovn's controller reads for its load balancers).
//!
//! - One set of slices per address family of the Service (`spec.ipFamilies`; else the family of
//!   its ClusterIP; else those of the pods' addresses).
//! - An endpoint per pod that has an address of the family and is not finished: `ready` (pod
//!   Ready and not terminating, or the Service publishes not-ready addresses), `serving` (pod
//!   Ready), `terminating` (pod being deleted), `nodeName`, `targetRef`.
//! - Ports are the Service's, with named `targetPort`s resolved through each pod's
//!   `containerPorts` (name and protocol); pods resolving them differently go into different
//!   slices, and a pod lacking a named port is left out. At most 100 endpoints per slice.
//! - A family without endpoints keeps one empty slice, as the real controller does.
//! - Slices are labelled `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//!   kube-ovn-lab`, owned by the Service, and named `<service>-<ipv4|ipv6>-<ports hash>[-n]` so
//!   each pass finds its own. Services without a selector are left alone (their slices are the
//!   user's); our slices of a Service that lost its selector, or is gone, are deleted.
//!
//! [`desired_slices`] is the decision, without I/O; [`run`] feeds it from caches.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use super::informer::{Pass, Passes, informer, ready, run_passes};
use super::names::short_hash;

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The `managed-by` value of the slices this controller writes.
pub const MANAGED_BY: &str = "kube-ovn-lab";
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The real controller's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ips(pod: &Pod) -> Vec<IpAddr> {
    let status = pod.status.as_ref();
    let mut ips: Vec<IpAddr> = status
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| p.ip.parse().ok())
        .collect();
    if ips.is_empty()
        && let Some(ip) = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok())
    {
        ips.push(ip);
    }
    ips
}

fn family_of(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// The address families the Service's slices are for.
fn families(svc: &Service, pods: &[&Pod]) -> Vec<String> {
    let spec = svc.spec.as_ref();
    if let Some(families) = spec.and_then(|s| s.ip_families.clone()).filter(|f| !f.is_empty()) {
        return families;
    }
    if let Some(ip) = spec
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    {
        return vec![family_of(&ip).to_owned()];
    }
    let mut seen: Vec<String> = Vec::new();
    for ip in pods.iter().flat_map(|p| pod_ips(p)) {
        let f = family_of(&ip).to_owned();
        if !seen.contains(&f) {
            seen.push(f);
        }
    }
    if seen.is_empty() {
        seen.push("IPv4".into());
    }
    seen
}

/// The Service's ports for one pod, or `None` if a named target port is not among the pod's
/// container ports.
fn resolve_ports(svc: &Service, pod: &Pod) -> Option<Vec<EndpointPort>> {
    let mut ports = Vec::new();
    for port in svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
    {
        let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
        let number = match &port.target_port {
            None => port.port,
            Some(IntOrString::Int(n)) => *n,
            Some(IntOrString::String(name)) => {
                pod.spec
                    .as_ref()?
                    .containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| {
                        cp.name.as_deref() == Some(name.as_str())
                            && cp.protocol.as_deref().unwrap_or("TCP") == protocol
                    })?
                    .container_port
            }
        };
        ports.push(EndpointPort {
            name: Some(port.name.clone().unwrap_or_default()),
            port: Some(number),
            protocol: Some(protocol),
            app_protocol: port.app_protocol.clone(),
        });
    }
    Some(ports)
}

fn endpoint(svc: &Service, pod: &Pod, ip: IpAddr) -> Endpoint {
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let ready = pod_ready(pod);
    Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(publish || (ready && !terminating)),
            serving: Some(publish || ready),
            terminating: Some(terminating),
        }),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.namespace(),
            name: Some(pod.name_any()),
            uid: pod.uid(),
            ..ObjectReference::default()
        }),
        ..Endpoint::default()
    }
}

/// The slices `svc` should have, given the pods of its namespace (empty: no selector).
pub fn desired_slices(svc: &Service, pods: &[&Pod]) -> Vec<EndpointSlice> {
    let selector: BTreeMap<String, String> = svc
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    if selector.is_empty() {
        return Vec::new();
    }
    let mut selected: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| {
            let labels = p.labels();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .collect();
    selected.sort_by_key(|p| p.name_any());
    let mut slices = Vec::new();
    for family in families(svc, &selected) {
        // Ports (as JSON, to order and compare) → endpoints with them.
        let mut groups: BTreeMap<String, (Vec<EndpointPort>, Vec<Endpoint>)> = BTreeMap::new();
        for pod in &selected {
            let Some(ip) = pod_ips(pod).into_iter().find(|ip| family_of(ip) == family) else {
                continue;
            };
            let Some(ports) = resolve_ports(svc, pod) else {
                continue;
            };
            let key = serde_json::to_string(&ports).unwrap_or_default();
            groups
                .entry(key)
                .or_insert_with(|| (ports, Vec::new()))
                .1
                .push(endpoint(svc, pod, ip));
        }
        if groups.is_empty() {
            slices.push(slice(svc, &family, "[]", Vec::new(), Vec::new(), 0));
            continue;
        }
        for (key, (ports, endpoints)) in groups {
            for (i, chunk) in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE).enumerate() {
                slices.push(slice(svc, &family, &key, ports.clone(), chunk.to_vec(), i));
            }
        }
    }
    slices
}

fn slice(
    svc: &Service,
    family: &str,
    ports_key: &str,
    ports: Vec<EndpointPort>,
    endpoints: Vec<Endpoint>,
    chunk: usize,
) -> EndpointSlice {
    let name = svc.name_any();
    let mut labels = BTreeMap::from([
        (SERVICE_NAME_LABEL.to_owned(), name.clone()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ]);
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert(HEADLESS_LABEL.to_owned(), String::new());
    }
    let suffix = if chunk == 0 {
        String::new()
    } else {
        format!("-{chunk}")
    };
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!(
                "{name}-{}-{}{suffix}",
                family.to_ascii_lowercase(),
                short_hash(ports_key.as_bytes(), 8)
            )),
            namespace: svc.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name,
                uid: svc.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        address_type: family.to_owned(),
        endpoints,
        ports: Some(ports),
    }
}

/// Whether the stored slice already says what `want` says.
fn same(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    have.address_type == want.address_type
        && have.endpoints == want.endpoints
        && have.ports.clone().unwrap_or_default() == want.ports.clone().unwrap_or_default()
        && have.metadata.labels == want.metadata.labels
        && have.metadata.owner_references == want.metadata.owner_references
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("EndpointSlice {slice}: {source}")]
    Write { slice: String, source: kube::Error },
}

/// Keeps slices in step until dropped.
pub async fn run(client: Client) -> Result<(), Error> {
    let services = informer(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
        "Service",
    );
    let pods = informer(Api::<Pod>::all(client.clone()), watcher::Config::default(), "Pod");
    let slices = informer(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
        "EndpointSlice",
    );
    let mut controller = Controller {
        client,
        services: services.store,
        pods: pods.store,
        slices: slices.store,
    };
    let changes = futures::stream::select_all([services.changes, pods.changes, slices.changes]).boxed();
    run_passes(changes, &mut controller).await;
    Ok(())
}

struct Controller {
    client: Client,
    services: Store<Service>,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
}

impl Passes for Controller {
    fn ready(&self) -> bool {
        ready(&self.services) && ready(&self.pods) && ready(&self.slices)
    }

    async fn pass(&mut self) -> Pass {
        let pods = self.pods.state();
        let mut by_namespace: HashMap<String, Vec<&Pod>> = HashMap::new();
        for pod in &pods {
            by_namespace
                .entry(pod.namespace().unwrap_or_default())
                .or_default()
                .push(pod);
        }
        // Our slices by (namespace, name).
        let mut existing: HashMap<(String, String), Arc<EndpointSlice>> = self
            .slices
            .state()
            .into_iter()
            .map(|s| ((s.namespace().unwrap_or_default(), s.name_any()), s))
            .collect();
        let mut outcome = Pass::Done;
        for svc in self.services.state() {
            let ns = svc.namespace().unwrap_or_default();
            let want = desired_slices(&svc, by_namespace.get(&ns).map_or(&[][..], Vec::as_slice));
            let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &ns);
            for slice in want {
                let name = slice.name_any();
                let key = (ns.clone(), name.clone());
                let result = match existing.remove(&key) {
                    Some(have) if same(&have, &slice) => Ok(()),
                    Some(have) => {
                        let mut slice = slice;
                        slice.metadata.resource_version = have.resource_version();
                        api.replace(&name, &PostParams::default(), &slice).await.map(drop)
                    }
                    None => api.create(&PostParams::default(), &slice).await.map(drop),
                };
                if let Err(e) = check(result, &ns, &name) {
                    tracing::warn!(service = %format!("{ns}/{}", svc.name_any()), error = %e, "will retry");
                    outcome = Pass::Retry;
                }
            }
        }
        // What is left is ours and wanted by no Service.
        for ((ns, name), _) in existing {
            let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &ns);
            let result = api.delete(&name, &DeleteParams::default()).await.map(drop);
            if let Err(e) = check(result, &ns, &name) {
                tracing::warn!(error = %e, "will retry");
                outcome = Pass::Retry;
            }
        }
        outcome
    }
}

/// A write's result; conflicts, existing and gone objects mean the cache was stale, which the
/// next pass (the cache's event) corrects.
fn check(result: Result<(), kube::Error>, ns: &str, name: &str) -> Result<(), Error> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        Err(source) => Err(Error::Write {
            slice: format!("{ns}/{name}"),
            source,
        }),
        Ok(()) => Ok(()),
    }
}

#[cfg(test)]
#[path = "endpointslices_tests.rs"]
mod tests;
