//! The lab's ClusterIP allocator: what kube-apiserver does for Services at create time, done
//! here just after (the emulator stores Services as given).
//!
//! Services of type ClusterIP, NodePort or LoadBalancer without `spec.clusterIP` (headless ones,
//! `None`, are left alone, as are ExternalName ones) get an address per family from the ranges of
//! `--service-cluster-ip-range` (v4 and/or v6, primary first): `clusterIP`, `clusterIPs`,
//! `ipFamilies` and `ipFamilyPolicy` are set as the real server sets them. The first address of
//! each range is kept for `default/kubernetes`, which is created if missing. The addresses in use
//! are read from the Services themselves, so an address is free again once its Service is gone,
//! and a restart rebuilds the allocation. A user-chosen address outside the ranges or already
//! taken is kept as given, with a Warning Event on the Service (the real server would refuse the
//! create; here the Service already exists). NodePorts are not allocated.
//!
//! [`plan`] is the decision, without I/O; [`run`] feeds it from a cache.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::events::EventRecorder;
use super::informer::{Pass, Passes, WarnedOnce, informer, oldest_first, ready, run_passes};

/// What the allocator is given.
#[derive(Debug, Clone)]
pub struct ServicesConfig {
    /// One range per family, primary first ([`parse_ranges`]).
    pub cluster_ip_ranges: Vec<IpNet>,
    /// Where the API server listens, for `default/kubernetes`'s target port and its
    /// EndpointSlice; `None`: port 6443 and no EndpointSlice.
    pub apiserver: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--service-cluster-ip-range {text:?}: {why}")]
    Ranges { text: String, why: String },
    #[error("the allocator needs at least one service cluster IP range")]
    NoRanges,
}

/// Parses `--service-cluster-ip-range`: one or two CIDRs, comma-separated, of different
/// families, each with room for the `kubernetes` address and at least one more.
pub fn parse_ranges(text: &str) -> Result<Vec<IpNet>, Error> {
    let invalid = |why: String| Error::Ranges {
        text: text.to_owned(),
        why,
    };
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim) {
        let net: IpNet = part
            .parse()
            .map_err(|e| invalid(format!("{part:?} is not a CIDR: {e}")))?;
        if net.trunc() != net {
            return Err(invalid(format!(
                "{part:?} has host bits set (the network is {})",
                net.trunc()
            )));
        }
        if allocatable(&net).is_none() {
            return Err(invalid(format!("{part:?} is too small")));
        }
        ranges.push(net);
    }
    match ranges.as_slice() {
        [] => Err(invalid("no range".into())),
        [_] => Ok(ranges),
        [a, b] if family(&a.addr()) != family(&b.addr()) => Ok(ranges),
        [_, _] => Err(invalid(
            "two ranges of one family; dual-stack needs one IPv4 and one IPv6".into(),
        )),
        _ => Err(invalid("more than two ranges".into())),
    }
}

/// `IPv4` or `IPv6`, as `spec.ipFamilies` spells them.
pub fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_u128(v4: bool, n: u128) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)))
    } else {
        IpAddr::V6(Ipv6Addr::from(n))
    }
}

/// The address kube-apiserver gives `default/kubernetes`: the range's first after the network.
pub fn kubernetes_address(range: &IpNet) -> IpAddr {
    from_u128(range.addr().is_ipv4(), to_u128(range.network()) + 1)
}

/// The addresses handed out dynamically (inclusive): after the `kubernetes` one, up to the last
/// (IPv4's broadcast excluded); `None` if there are none.
fn allocatable(range: &IpNet) -> Option<(u128, u128)> {
    let first = to_u128(range.network()) + 2;
    let last = if range.addr().is_ipv4() {
        to_u128(range.broadcast()).checked_sub(1)?
    } else {
        to_u128(range.broadcast())
    };
    (first <= last).then_some((first, last))
}

/// What the allocator reads of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceView {
    /// `namespace/name`.
    pub key: String,
    pub uid: String,
    pub type_: Option<String>,
    pub cluster_ip: Option<String>,
    pub cluster_ips: Vec<String>,
    pub ip_families: Vec<String>,
    pub ip_family_policy: Option<String>,
}

impl ServiceView {
    pub fn of(svc: &Service) -> Self {
        let spec = svc.spec.clone().unwrap_or_default();
        Self {
            key: format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()),
            uid: svc.uid().unwrap_or_default(),
            type_: spec.type_,
            cluster_ip: spec.cluster_ip.filter(|ip| !ip.is_empty()),
            cluster_ips: spec.cluster_ips.unwrap_or_default(),
            ip_families: spec.ip_families.unwrap_or_default(),
            ip_family_policy: spec.ip_family_policy,
        }
    }

    fn wants_cluster_ip(&self) -> bool {
        matches!(
            self.type_.as_deref(),
            None | Some("ClusterIP" | "NodePort" | "LoadBalancer")
        ) && self.cluster_ip.as_deref() != Some("None")
    }

    /// The addresses the Service holds or asks for.
    fn requested(&self) -> Vec<String> {
        if self.cluster_ips.is_empty() {
            self.cluster_ip.iter().cloned().collect()
        } else {
            self.cluster_ips.clone()
        }
    }
}

/// What to do about one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write these addressing fields (new addresses, or the fields that go with given ones).
    Set {
        key: String,
        uid: String,
        cluster_ips: Vec<IpAddr>,
        ip_families: Vec<String>,
        ip_family_policy: String,
    },
    /// Leave it, and say why in a Warning Event.
    Warn {
        key: String,
        uid: String,
        message: String,
    },
}

/// The decisions for `services` (in the order to honour claims: oldest first), given addresses
/// already handed out whose Services the cache does not show yet (`pending`, by uid).
pub fn plan<S: std::hash::BuildHasher>(
    ranges: &[IpNet],
    services: &[ServiceView],
    pending: &HashMap<String, Vec<IpAddr>, S>,
) -> Vec<Decision> {
    let mut used: HashMap<IpAddr, String> = HashMap::new();
    for ips in pending.values() {
        for ip in ips {
            used.insert(*ip, String::new());
        }
    }
    let mut decisions = Vec::new();
    let mut to_allocate = Vec::new();
    let range_text = ranges
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    for svc in services.iter().filter(|s| s.wants_cluster_ip()) {
        if pending.contains_key(&svc.uid) {
            continue;
        }
        let requested = svc.requested();
        if requested.is_empty() {
            to_allocate.push(svc);
            continue;
        }
        let warn = |message: String| Decision::Warn {
            key: svc.key.clone(),
            uid: svc.uid.clone(),
            message,
        };
        let mut parsed = Vec::new();
        let warned_before = decisions.len();
        for (i, text) in requested.iter().enumerate() {
            let Ok(ip) = text.parse::<IpAddr>() else {
                decisions.push(warn(format!(
                    "spec.clusterIPs[{i}]: Invalid value: {text:?}: must be a valid IP address"
                )));
                continue;
            };
            parsed.push(ip);
            if !ranges.iter().any(|r| r.contains(&ip)) {
                decisions.push(warn(format!(
                    "spec.clusterIPs[{i}]: Invalid value: {text:?}: provided IP is not in the valid range. \
                     The range of valid IPs is {range_text}"
                )));
            } else if let Some(owner) = used.get(&ip).filter(|o| **o != svc.key) {
                let by = if owner.is_empty() {
                    String::new()
                } else {
                    format!(" (by {owner})")
                };
                decisions.push(warn(format!(
                    "spec.clusterIPs[{i}]: Invalid value: {text:?}: provided IP is already allocated{by}"
                )));
            } else {
                used.insert(ip, svc.key.clone());
            }
        }
        // Given addresses: complete the fields that go with them, as the server defaults them.
        let families: Vec<String> = parsed.iter().map(|ip| family(ip).to_owned()).collect();
        let policy = svc.ip_family_policy.clone().unwrap_or_else(|| {
            if parsed.len() > 1 {
                "RequireDualStack"
            } else {
                "SingleStack"
            }
            .to_owned()
        });
        let complete = svc.cluster_ips.len() == parsed.len()
            && svc.cluster_ip.as_deref() == requested.first().map(String::as_str)
            && svc.ip_families == families
            && svc.ip_family_policy.as_ref() == Some(&policy);
        // A Service warned about is left exactly as given.
        if !complete && decisions.len() == warned_before {
            decisions.push(Decision::Set {
                key: svc.key.clone(),
                uid: svc.uid.clone(),
                cluster_ips: parsed,
                ip_families: families,
                ip_family_policy: policy,
            });
        }
    }
    for svc in to_allocate {
        decisions.push(allocate(ranges, svc, &mut used));
    }
    decisions
}

fn allocate(ranges: &[IpNet], svc: &ServiceView, used: &mut HashMap<IpAddr, String>) -> Decision {
    let warn = |message: String| Decision::Warn {
        key: svc.key.clone(),
        uid: svc.uid.clone(),
        message,
    };
    let policy = svc
        .ip_family_policy
        .clone()
        .unwrap_or_else(|| "SingleStack".into());
    let configured: Vec<&str> = ranges.iter().map(|r| family(&r.addr())).collect();
    let families: Vec<String> = if svc.ip_families.is_empty() {
        match policy.as_str() {
            "SingleStack" => configured.iter().take(1).map(|f| (*f).to_owned()).collect(),
            _ => configured.iter().map(|f| (*f).to_owned()).collect(),
        }
    } else {
        for (i, f) in svc.ip_families.iter().enumerate() {
            if !configured.contains(&f.as_str()) && (policy != "PreferDualStack" || i == 0) {
                return warn(format!(
                    "spec.ipFamilies[{i}]: Invalid value: {f:?}: not configured on this cluster \
                     (service cluster IP ranges: {configured:?})"
                ));
            }
        }
        let mut families = svc.ip_families.clone();
        families.retain(|f| configured.contains(&f.as_str()));
        if policy != "SingleStack" && families.len() == 1 && configured.len() == 2 {
            let other = configured.iter().find(|f| **f != families[0]).copied();
            families.extend(other.map(str::to_owned));
        }
        families
    };
    match (policy.as_str(), families.len()) {
        ("SingleStack", n) if n > 1 => {
            return warn(
                "spec.ipFamilies: Invalid value: more than one family for a SingleStack Service".into(),
            );
        }
        ("RequireDualStack", n) if n < 2 => {
            return warn(
                "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack"
                    .into(),
            );
        }
        ("SingleStack" | "PreferDualStack" | "RequireDualStack", _) => {}
        (other, _) => {
            return warn(format!(
                "spec.ipFamilyPolicy: Unsupported value: {other:?}: supported values: \"SingleStack\", \
                 \"PreferDualStack\", \"RequireDualStack\""
            ));
        }
    }
    let mut ips = Vec::new();
    for f in &families {
        let Some(range) = ranges.iter().find(|r| family(&r.addr()) == f) else {
            continue;
        };
        let Some(ip) = lowest_free(range, used) else {
            return warn(format!(
                "failed to allocate a ClusterIP: the range {range} is full"
            ));
        };
        ips.push(ip);
    }
    for ip in &ips {
        used.insert(*ip, svc.key.clone());
    }
    Decision::Set {
        key: svc.key.clone(),
        uid: svc.uid.clone(),
        cluster_ips: ips,
        ip_families: families,
        ip_family_policy: policy,
    }
}

/// The lowest address of `range` not in `used` (linear in the addresses used, not the range).
fn lowest_free(range: &IpNet, used: &HashMap<IpAddr, String>) -> Option<IpAddr> {
    let (first, last) = allocatable(range)?;
    let v4 = range.addr().is_ipv4();
    let taken: BTreeSet<u128> = used
        .keys()
        .filter(|ip| range.contains(*ip))
        .map(|ip| to_u128(*ip))
        .collect();
    let mut candidate = first;
    for n in taken.range(first..=last) {
        if *n != candidate {
            break;
        }
        candidate += 1;
    }
    (candidate <= last).then(|| from_u128(v4, candidate))
}

/// Allocates until dropped.
pub async fn run(client: Client, config: ServicesConfig) -> Result<(), Error> {
    if config.cluster_ip_ranges.is_empty() {
        return Err(Error::NoRanges);
    }
    let services = informer(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
        "Service",
    );
    let mut allocator = Allocator {
        events: EventRecorder::new(client.clone(), "kube-ovn-lab-services", None),
        client,
        config,
        services: services.store,
        pending: HashMap::new(),
        warned: WarnedOnce::default(),
    };
    run_passes(services.changes, &mut allocator).await;
    Ok(())
}

struct Allocator {
    client: Client,
    events: EventRecorder,
    config: ServicesConfig,
    services: Store<Service>,
    /// Addresses written whose Services the cache does not show with them yet, by uid.
    pending: HashMap<String, Vec<IpAddr>>,
    warned: WarnedOnce,
}

impl Passes for Allocator {
    fn ready(&self) -> bool {
        ready(&self.services)
    }

    async fn pass(&mut self) -> Pass {
        let services = oldest_first(&self.services);
        let views: Vec<ServiceView> = services.iter().map(|s| ServiceView::of(s)).collect();
        // A pending allocation is done once the cache shows it (or the Service went).
        self.pending.retain(|uid, _| {
            views
                .iter()
                .find(|v| &v.uid == uid)
                .is_some_and(|v| v.requested().is_empty())
        });
        let live: HashSet<&str> = views.iter().map(|v| v.uid.as_str()).collect();
        self.warned.keep_only(&live);
        let mut outcome = Pass::Done;
        if !views.iter().any(|v| v.key == "default/kubernetes") && !self.ensure_kubernetes().await {
            outcome = Pass::Retry;
        }
        for decision in plan(&self.config.cluster_ip_ranges, &views, &self.pending) {
            match decision {
                Decision::Set {
                    key,
                    uid,
                    cluster_ips,
                    ip_families,
                    ip_family_policy,
                } => {
                    let Some(svc) = services.iter().find(|s| s.uid().as_deref() == Some(uid.as_str())) else {
                        continue;
                    };
                    let span = tracing::info_span!("service", service = %key);
                    let ips: Vec<String> = cluster_ips.iter().map(ToString::to_string).collect();
                    let patch = json!({
                        "metadata": {"resourceVersion": svc.resource_version()},
                        "spec": {"clusterIP": ips.first(), "clusterIPs": ips, "ipFamilies": ip_families,
                                 "ipFamilyPolicy": ip_family_policy},
                    });
                    let api: Api<Service> =
                        Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
                    match api
                        .patch(&svc.name_any(), &PatchParams::default(), &Patch::Merge(patch))
                        .await
                    {
                        Ok(_) => {
                            span.in_scope(|| tracing::info!(cluster_ips = ?ips, "ClusterIP set"));
                            if svc
                                .spec
                                .as_ref()
                                .and_then(|s| s.cluster_ip.as_deref())
                                .is_none_or(str::is_empty)
                            {
                                self.pending.insert(uid, cluster_ips);
                            }
                        }
                        // Changed or gone meanwhile: the next pass sees the new state.
                        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                        Err(e) => {
                            span.in_scope(|| tracing::warn!(error = %e, "could not set the ClusterIP"));
                            outcome = Pass::Retry;
                        }
                    }
                }
                Decision::Warn { key, uid, message } => {
                    if !self.warned.first_time(&uid, &message) {
                        continue;
                    }
                    tracing::warn!(service = %key, %message, "ClusterIP left as given");
                    if let Some(svc) = services.iter().find(|s| s.uid().as_deref() == Some(uid.as_str())) {
                        self.events
                            .warning(
                                &EventRecorder::reference(svc.as_ref()),
                                "ClusterIPNotAllocated",
                                &message,
                            )
                            .await;
                    }
                }
            }
        }
        outcome
    }
}

impl Allocator {
    /// Creates `default/kubernetes` (and its EndpointSlice when the API server's address is
    /// known); false if that failed.
    async fn ensure_kubernetes(&self) -> bool {
        let primary = &self.config.cluster_ip_ranges[0];
        let ip = kubernetes_address(primary);
        let port = self.config.apiserver.map_or(6443, |a| a.port());
        let svc: Service = match serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": ip.to_string(), "clusterIPs": [ip.to_string()],
                     "ipFamilies": [family(&ip)], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
        })) {
            Ok(svc) => svc,
            Err(e) => {
                tracing::error!(error = %e, "the kubernetes Service does not decode");
                return false;
            }
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), "default");
        match api.create(&PostParams::default(), &svc).await {
            Ok(_) => tracing::info!(cluster_ip = %ip, "created Service default/kubernetes"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not create Service default/kubernetes");
                return false;
            }
        }
        let Some(apiserver) = self.config.apiserver else {
            return true;
        };
        let slice: EndpointSlice = match serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes",
                                    "endpointslice.kubernetes.io/managed-by": "kube-ovn-lab-apiserver"}},
            "addressType": family(&apiserver.ip()),
            "endpoints": [{"addresses": [apiserver.ip().to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": apiserver.port(), "protocol": "TCP"}],
        })) {
            Ok(slice) => slice,
            Err(e) => {
                tracing::error!(error = %e, "the kubernetes EndpointSlice does not decode");
                return false;
            }
        };
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), "default");
        match slices.create(&PostParams::default(), &slice).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 409 => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not create EndpointSlice default/kubernetes");
                false
            }
        }
    }
}

#[cfg(test)]
#[path = "services_tests.rs"]
mod tests;
