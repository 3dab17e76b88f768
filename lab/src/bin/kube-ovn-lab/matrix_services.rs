//! The Services the matrix probes, as the API shows them: their ready backends, where the
//! outside host reaches the announced ones (the `bgp` annotation, or a `BgpAdvertisement`
//! selecting them), the communities the ToR should see on them, and for
//! `externalTrafficPolicy: Local` the nodes it should route them through.

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::bgp_advertisement::{AdvertiseKind, BgpAdvertisement};
use kube_ovn_lab::cluster::matrix::{self, ServiceTarget, bgp_policy};
use kube_ovn_lab::cluster::topology::Topology;

/// The Services with a selector and a ClusterIP (TCP, the first such port), with the pods behind
/// their ready endpoints and, for announced ones, where the outside host reaches them (the
/// backends then see `ingress_sources`, or the outside host's own address for a `Local` one).
/// Selectorless ones (the API server's `kubernetes`) are left out: their endpoints are not
/// netexec servers.
pub async fn services(
    t: &Topology,
    client: &kube::Client,
    ingress_sources: &[IpAddr],
) -> anyhow::Result<Vec<ServiceTarget>> {
    let slices = Api::<EndpointSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing EndpointSlices")?;
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Services")?;
    let advertisements = Api::<BgpAdvertisement>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing BgpAdvertisements")?
        .items;
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Namespaces")?
        .items
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
        .collect();
    let mut out = Vec::new();
    for svc in services.items {
        let (Some(namespace), Some(name), Some(spec)) = (
            svc.metadata.namespace.clone(),
            svc.metadata.name.clone(),
            svc.spec.as_ref(),
        ) else {
            continue;
        };
        if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
            continue;
        }
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        else {
            continue; // headless
        };
        let Some(port) = spec
            .ports
            .iter()
            .flatten()
            .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .and_then(|p| u16::try_from(p.port).ok())
        else {
            continue;
        };
        // Ready endpoints (an unset `ready` means ready, discovery.k8s.io/v1): the pods, and
        // the nodes they run on.
        let ready: Vec<_> = slices
            .items
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace.as_str()))
            .filter(|s| {
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    == Some(&name)
            })
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .collect();
        let mut backends: Vec<String> = ready
            .iter()
            .filter_map(|e| e.target_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .filter_map(|r| r.name.clone())
            .collect();
        backends.sort();
        backends.dedup();
        let mut local_next_hops: Vec<IpAddr> = ready
            .iter()
            .filter_map(|e| t.node(e.node_name.as_deref()?))
            .map(|n| IpAddr::V4(n.ip))
            .collect();
        local_next_hops.sort();
        local_next_hops.dedup();
        let vpc = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::VPC))
            .cloned()
            .unwrap_or_else(|| matrix::DEFAULT_VPC.to_owned());
        let annotated = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        let lb_ip = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref())
            .into_iter()
            .flatten()
            .find_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok());
        let external_ip = spec
            .external_ips
            .iter()
            .flatten()
            .find_map(|ip| ip.parse::<IpAddr>().ok());
        let (address, kind) = match (lb_ip, external_ip) {
            (Some(ip), _) => (Some(ip), AdvertiseKind::LoadBalancerIps),
            (None, ip) => (ip, AdvertiseKind::ExternalIps),
        };
        let selected = bgp_policy::communities_for(
            &advertisements,
            kind,
            &svc.metadata.labels.clone().unwrap_or_default(),
            namespace_labels.get(&namespace).unwrap_or(&BTreeMap::new()),
        );
        let outside_ip = address.filter(|_| annotated || selected.is_some());
        let local = spec.external_traffic_policy.as_deref() == Some("Local");
        out.push(ServiceTarget {
            namespace,
            name,
            ip,
            port,
            vpc,
            backends,
            outside_ip,
            ingress_sources: match outside_ip {
                Some(_) if local => vec![Topology::outside_ip().into()],
                _ => ingress_sources.to_vec(),
            },
            local,
            local_next_hops,
            communities: selected.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Whether every Service's ready endpoints are the Running pods its selector matches, and one
/// with endpoints carries the VPC annotation the controller writes after its VIPs.
pub async fn services_settled(t: &Topology, client: &kube::Client) -> anyhow::Result<bool> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Pods")?;
    let listed = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Services")?;
    for svc in services(t, client, &[]).await? {
        let selector = listed
            .items
            .iter()
            .find(|s| {
                s.metadata.namespace.as_deref() == Some(svc.namespace.as_str())
                    && s.metadata.name.as_deref() == Some(svc.name.as_str())
            })
            .and_then(|s| s.spec.as_ref()?.selector.clone())
            .unwrap_or_default();
        let mut running: Vec<String> = pods
            .items
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(svc.namespace.as_str()))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter(|p| {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        running.sort();
        anyhow::ensure!(
            running == svc.backends,
            "{}: endpoints {:?}, Running pods {running:?}",
            svc.label(),
            svc.backends
        );
        let annotated = listed.items.iter().any(|s| {
            s.metadata.name.as_deref() == Some(svc.name.as_str())
                && s.metadata.namespace.as_deref() == Some(svc.namespace.as_str())
                && s.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(keys::VPC))
        });
        anyhow::ensure!(
            svc.backends.is_empty() || annotated,
            "{}: no VIPs written yet",
            svc.label()
        );
    }
    Ok(true)
}
