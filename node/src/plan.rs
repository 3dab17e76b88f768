//! What one pod NIC should look like, computed from the pod's annotations, the request and the
//! subnet, with no I/O: names (`veth_name`), addresses, routes, MTU, the OVS interface's
//! `external_ids`, QoS (`rates`), and what the subnet decides (`pod_network`: MTU, gateway
//! check, localnet patch port, U2O next hop). The rest of the daemon applies a [`NicPlan`]; tests check it by input → output.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use kube_ovn_api::annotations::{
    AnnotationError, MacAddr, PodNetwork, PodNetworkError, Routes, pod_network, provider_key,
};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::names;
use kube_ovn_api::wire::{CniRequest, CniResponse, IpConfig, Route as WireRoute};

pub use crate::pod_network::{GatewayCheck, GatewayCheckMode, SubnetPlanError};
use crate::pod_network::{SubnetInputs, subnet_plan};
pub use crate::rates::{QosPlan, qos_plan};
pub use crate::veth_name::{IfnameError, check_ifname, host_nic_name, legacy_host_nic_name};

/// Where ADD stands with the controller's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Everything needed is there.
    Ready(Box<NicPlan>),
    /// Still waiting; names what is missing (for the timeout's message and the metrics).
    Waiting(WaitingFor),
}

/// What ADD is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingFor {
    /// `<provider>.kubernetes.io/allocated` and `ip_address` (the controller's IPAM).
    Address,
    /// `<provider>.kubernetes.io/routed` (the controller's port groups and policies).
    Route,
}

impl WaitingFor {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Address => "address",
            Self::Route => "route",
        }
    }
}

/// The NIC to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicPlan {
    /// Logical switch port name, OVS `external_ids:iface-id`.
    pub iface_id: String,
    /// Host end of the veth, also the OVS port and interface name.
    pub host_nic: String,
    /// Name in the pod.
    pub ifname: String,
    /// MAC in the pod (the logical switch port's).
    pub mac: [u8; 6],
    /// Addresses with their subnet's prefix length.
    pub addresses: Vec<IpNet>,
    /// Gateways, per family, when this NIC carries the default route.
    pub gateways: Vec<IpAddr>,
    /// Routes to install in the pod, default routes included.
    pub routes: Vec<PodRoute>,
    /// Routes reported to the runtime (the annotation's and the config's, as Kube-OVN does).
    pub reported_routes: Vec<WireRoute>,
    /// Pod MTU.
    pub mtu: u32,
    /// Logical switch (subnet name).
    pub logical_switch: String,
    /// OVS interface `external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// Rate limits.
    pub qos: QosPlan,
    /// Probed after the pod side is configured; `None`: not probed.
    pub gateway_check: Option<GatewayCheck>,
    /// The localnet patch port ADD waits for before configuring the pod side.
    pub wait_patch_port: Option<String>,
    /// Whether ADD announces the addresses (gratuitous ARP, unsolicited NA) once the port is
    /// bound; not for a live migration's target (`crate::pod_network::migration_target`).
    pub announce: bool,
}

/// Why no plan can be made from what is there.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A malformed annotation.
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    /// The subnet's settings (provider-network MTU label, U2O IP).
    #[error(transparent)]
    Subnet(#[from] SubnetPlanError),
}

/// A route in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodRoute {
    /// Destination.
    pub dst: IpNet,
    /// Next hop; on-link when `None`.
    pub via: Option<IpAddr>,
}

/// Things the plan needs besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct PlanInputs<'a> {
    /// The CNI request.
    pub request: &'a CniRequest,
    /// The NIC's subnet, when the cache has it.
    pub subnet: Option<&'a Subnet>,
    /// The ProviderNetwork of the subnet's Vlan, from the daemon's Vlan cache (never from
    /// the pod's `provider_network` annotation, which a tenant can write).
    pub provider_network: Option<&'a str>,
    /// This node's labels (the provider network's MTU).
    pub node_labels: Option<&'a BTreeMap<String, String>>,
    /// The daemon's default MTU.
    pub default_mtu: u32,
}

/// Decides from the pod's annotations whether ADD can proceed, and with what. A malformed
/// annotation is an error (naming key and value) rather than a wait: the controller writes
/// them whole, so waiting would only turn a clear message into a timeout.
pub fn readiness(
    annotations: Option<&BTreeMap<String, String>>,
    inputs: &PlanInputs<'_>,
) -> Result<Readiness, PlanError> {
    let request = inputs.request;
    let provider = if request.provider.is_empty() {
        "ovn"
    } else {
        request.provider.as_str()
    };
    let key = |name: &str| {
        provider_key(provider, name).unwrap_or_else(|_| format!("{provider}.kubernetes.io/{name}"))
    };
    // The controller's handshake, through the one typed reader (api's `pod_network`).
    let unreadable = |e: PodNetworkError| match e {
        PodNetworkError::Annotation(e) => e,
        PodNetworkError::Provider(e) => AnnotationError {
            key: key("ip_address"),
            value: provider.to_owned(),
            problem: kube_ovn_api::annotations::Problem::BadName(e.to_string()),
            expected: "a provider `ovn`, `<nad>.<ns>.ovn` or `<nad>.<ns>`",
        },
    };
    let Some(network) = PodNetwork::read(annotations, provider).map_err(unreadable)? else {
        return Ok(Readiness::Waiting(WaitingFor::Address));
    };
    let default_route_key = key("default_route");
    let default_route = match annotations.and_then(|a| a.get(&default_route_key)) {
        Some(v) => v == "true",
        None => request.if_name == "eth0",
    };
    // Kube-OVN waits for `routed` only on the NIC that carries the default route of an OVN
    // provider: that is the one whose traffic needs the controller's policies in place.
    if default_route && provider_is_ovn(provider) && !pod_network::routed(annotations, provider) {
        return Ok(Readiness::Waiting(WaitingFor::Route));
    }
    let PodNetwork {
        addresses: ips,
        mac,
        cidr: cidrs,
        gateway: gateways,
        logical_switch,
        ..
    } = network;
    let annotated_routes: Routes =
        pod_network::requested_routes(annotations, provider).map_err(unreadable)?;

    let mut addresses = Vec::new();
    for ip in ips.addrs() {
        let prefix = cidrs
            .nets()
            .find(|n| n.contains(&ip))
            .map_or(if ip.is_ipv4() { 32 } else { 128 }, |n| n.prefix_len());
        addresses.push(IpNet::new(ip, prefix).expect("prefix comes from a CIDR of the same family"));
    }

    let mut reported_routes: Vec<WireRoute> = annotated_routes.0.clone();
    reported_routes.extend(request.routes.clone().unwrap_or_default());
    let mut routes: Vec<PodRoute> = reported_routes
        .iter()
        .filter_map(|r| {
            let dst = r.dst.or_else(|| r.gw.map(default_of))?;
            Some(PodRoute { dst, via: r.gw })
        })
        .collect();
    let annotated_gateways: Vec<IpAddr> = gateways.addrs().collect();
    let subnet = subnet_plan(&SubnetInputs {
        subnet: inputs.subnet,
        annotations,
        provider,
        provider_network: inputs.provider_network,
        node_labels: inputs.node_labels,
        default_mtu: inputs.default_mtu,
        gateways: &annotated_gateways,
    })?;
    let gateways: Vec<IpAddr> = if default_route {
        annotated_gateways.clone()
    } else {
        Vec::new()
    };
    for gw in &gateways {
        let default = default_of(*gw);
        // With U2O interconnection the default route goes through the subnet's port on the
        // VPC router (Kube-OVN `configureContainerNic`: `containerGw = u2oInterconnectionIP`).
        let via = subnet
            .u2o_gateways
            .iter()
            .find(|u| u.is_ipv4() == gw.is_ipv4())
            .unwrap_or(gw);
        if !routes.iter().any(|r| r.dst == default) {
            routes.push(PodRoute {
                dst: default,
                via: Some(*via),
            });
        }
    }
    // Kube-OVN reports the routes as installed (`finalRoutes`): through the U2O addresses, which
    // the shim, deriving default routes from the addresses' gateways, would not say.
    if !subnet.u2o_gateways.is_empty() && !gateways.is_empty() {
        reported_routes = routes
            .iter()
            .map(|r| WireRoute {
                dst: Some(r.dst),
                gw: r.via,
            })
            .collect();
    }

    let EarlyPort {
        iface_id,
        host_nic,
        mut external_ids,
        ..
    } = early_port(request);
    let ip_list = ips.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    external_ids.insert("ip".to_owned(), ip_list);
    external_ids.insert("attached-mac".to_owned(), mac.to_string());
    let qos = qos_plan(annotations, provider)?;
    Ok(Readiness::Ready(Box::new(NicPlan {
        iface_id,
        host_nic,
        ifname: request.if_name.clone(),
        mac: mac.0,
        addresses,
        gateways,
        routes,
        reported_routes,
        mtu: subnet.mtu,
        logical_switch,
        external_ids,
        qos,
        gateway_check: subnet.gateway_check,
        wait_patch_port: subnet.wait_patch_port,
        announce: !crate::pod_network::migration_target(annotations, provider),
    })))
}

/// The part of a pod's port known from the request alone, before the controller's
/// annotations: enough for ovn-controller to bind the port once the logical port exists, and
/// for DEL, GC and the QoS task to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlyPort {
    /// Logical switch port name (`<pod>.<namespace>[.<provider>]`), `external_ids:iface-id`.
    pub iface_id: String,
    /// Host end of the veth, also the OVS port and interface name.
    pub host_nic: String,
    /// Name in the pod.
    pub ifname: String,
    /// `Interface.external_ids` without what the annotations give (`ip`, `attached-mac`).
    pub external_ids: BTreeMap<String, String>,
}

/// The port as the request alone describes it.
pub fn early_port(request: &CniRequest) -> EarlyPort {
    let provider = if request.provider.is_empty() {
        "ovn"
    } else {
        request.provider.as_str()
    };
    let iface_id = names::pod_port_name(&request.pod_name, &request.pod_namespace, provider);
    let external_ids = BTreeMap::from([
        ("iface-id".to_owned(), iface_id.clone()),
        ("vendor".to_owned(), "kube-ovn".to_owned()),
        ("pod_name".to_owned(), request.pod_name.clone()),
        ("pod_namespace".to_owned(), request.pod_namespace.clone()),
        ("pod_netns".to_owned(), request.net_ns.clone()),
        // Ours: which network the port belongs to, so CNI GC of one network leaves the
        // others' ports alone.
        ("provider".to_owned(), provider.to_owned()),
    ]);
    EarlyPort {
        iface_id,
        host_nic: host_nic_name(&request.container_id, &request.if_name),
        ifname: request.if_name.clone(),
        external_ids,
    }
}

fn provider_is_ovn(provider: &str) -> bool {
    provider == "ovn" || provider.rsplit('.').next() == Some("ovn")
}

fn default_of(addr: IpAddr) -> IpNet {
    match addr {
        IpAddr::V4(_) => "0.0.0.0/0".parse().expect("literal"),
        IpAddr::V6(_) => "::/0".parse().expect("literal"),
    }
}

/// The daemon's answer to ADD, in Kube-OVN's JSON.
pub fn response(plan: &NicPlan, request: &CniRequest) -> CniResponse {
    let ips = plan
        .addresses
        .iter()
        .map(|net| {
            let gateway = plan
                .gateways
                .iter()
                .find(|g| g.is_ipv4() == net.addr().is_ipv4())
                .copied();
            IpConfig::new(net.addr(), net.trunc(), gateway)
        })
        .collect();
    CniResponse {
        ips: Some(ips),
        mac_address: MacAddr(plan.mac).to_string(),
        routes: (!plan.reported_routes.is_empty()).then(|| plan.reported_routes.clone()),
        mtu: plan.mtu,
        nic_name: plan.ifname.clone(),
        dns: request.dns.clone(),
        error: String::new(),
    }
}

#[cfg(test)]
mod tests;
