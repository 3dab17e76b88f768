//! The node's egress, as Kube-OVN's daemon does it in `runGateway`: NAT for subnets with
//! `natOutgoing` (every node masquerades its own pods' traffic; the active gateway node of a
//! centralized subnet also SNATs to its `node:ip`), and policy routing for
//! `externalEgressGateway`. Planned by `kube_ovn_gateway` from the watched Subnets, Nodes and
//! pods; the nft tables are applied by [`NftTables`], rules and routes through netlink.
//!
//! Level-triggered: every change of a Subnet, a Node or a pod on this node plans again and
//! applies what differs; every `--gateway-check-interval` the kernel is compared with what was
//! applied and restored if someone flushed or edited it. Nothing is applied before the caches
//! have listed once: a daemon restarting with empty caches would otherwise strip every NAT rule
//! for a moment. Input the planner refuses is a Warning event on the Subnet (once per distinct
//! message) and leaves that subnet's previous plan in force.
//!
//! The task also plans ingress to the Services' ports on LoadBalancer IPs (`crate::lb_ingress`):
//! an address the guard refuses is a Warning event on the Service, once per Service, field and
//! reason. A Service with `externalTrafficPolicy: Local` is DNATed to this node's own ready
//! endpoints, keeping the client's address (`kube_ovn_gateway::ingress_local`). A distributed `externalEgressGateway` routes this node's pods by the addresses the
//! controller recorded in their IP CRs, never a node's (`pods`); a forged address is a Warning
//! event on the pod, once per pod and message.

mod pods;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node as K8sNode, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_ovn_api::annotations::{CidrPair, get, keys};
use kube_ovn_api::bgp_peer::BgpPeer;
use kube_ovn_api::crd::{Ip, Subnet};
use kube_ovn_api::node::{internal_ip_per_family, internal_ips};
use kube_ovn_dataplane::{Netlink, Netns, PolicyRule, TableRoute, ethtool};
use kube_ovn_gateway::{GatewayInput, LastGood, NodeFacts, PlanError, PolicyRouting, plan};
use kube_ovn_support::Watched;

use crate::config::Config;
use crate::error::DaemonError;
use crate::join::{OVN0, join_address};
use crate::lb_ingress::{
    Endpoints, Protected, ProtectedInputs, api_server_endpoints, lb_ingress, node_addresses,
};
use crate::nft_tables::{Applied, NftTables};

/// How long the task waits for the caches' first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// The flags egress reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--node-name`.
    pub node_name: String,
    /// `--cluster-router`: the default VPC.
    pub cluster_router: String,
    /// `--node-switch`: the join subnet.
    pub node_switch: String,
    /// `--service-cluster-ip-range`, parsed.
    pub service_cidrs: Vec<IpNet>,
    /// `--neighbor-address`, parsed: BGP peers, never routed into `ovn0`.
    pub bgp_neighbors: Vec<IpAddr>,
    /// `--service-external-ip-cidrs`.
    pub service_external_ip_cidrs: kube_ovn_api::external_ips::ExternalIpCidrs,
    /// `--kubeconfig`: the API server it names is never routed into `ovn0`.
    pub kubeconfig: Option<PathBuf>,
    /// `--gateway-check-interval`.
    pub gateway_check_interval: Duration,
}

impl Settings {
    /// From the validated flags.
    pub fn new(config: &Config) -> Self {
        let flags = &config.flags;
        Self {
            node_name: flags.node_name.clone(),
            cluster_router: flags.cluster_router.clone(),
            node_switch: flags.node_switch.clone(),
            service_cidrs: config.service_cidrs.clone(),
            bgp_neighbors: config.bgp_neighbors.clone(),
            service_external_ip_cidrs: flags.service_external_ip_cidrs.clone(),
            kubeconfig: flags.kubeconfig.clone(),
            gateway_check_interval: flags.gateway_check_interval,
        }
    }
}

/// The egress task: what it is given. Its inputs are these caches' changes (and those of the
/// caches it starts itself, [`Caches`]) and its check interval; its outputs are the nft tables,
/// the policy rules and table routes, the sysctls and Warning events.
pub struct Gateway {
    pub settings: Settings,
    /// For the Warning events.
    pub kube: kube::Client,
    /// Where ovs-vswitchd runs (the tables, rules and sysctls are there), and netlink in it.
    pub ovs_ns: Netns,
    pub ovs_nl: Netlink,
    pub subnets: Watched<Subnet>,
    pub nodes: Watched<K8sNode>,
    /// Pods on this node.
    pub pods: Watched<Pod>,
    pub services: Watched<Service>,
}

/// State carried from one pass to the next.
struct Egress {
    tables: NftTables,
    last_good: LastGood,
    /// Messages already published as events (a refused subnet is reported once, not per pass).
    reported: BTreeSet<String>,
    /// Refusals of ingress addresses and forged pod addresses already published as events.
    refusals: BTreeSet<String>,
    /// Who the events say reported them.
    reporter: Reporter,
    sysctls_set: bool,
    /// The caches only this task reads.
    caches: Caches,
    /// The addresses the daemon's own kubeconfig (or in-cluster config) connects to.
    kubeconfig_api: Vec<IpAddr>,
}

/// What the egress and ingress plans read besides the caches [`Gateway`] is given: the controller's IP CRs
/// (pod addresses), the BGP peers and the API server's endpoints (addresses never routed into
/// `ovn0`).
struct Caches {
    ips: Watched<Ip>,
    peers: Watched<BgpPeer>,
    /// Every EndpointSlice: the API server's (the `kubernetes` Service's, in `default`) and
    /// the endpoints of `externalTrafficPolicy: Local` Services.
    slices: Watched<EndpointSlice>,
}

impl Caches {
    fn start(kube: &kube::Client) -> Self {
        Self {
            ips: Watched::start(Api::all(kube.clone()), None, None),
            peers: Watched::start(Api::all(kube.clone()), None, None),
            slices: Watched::start(Api::all(kube.clone()), None, None),
        }
    }
}

/// The addresses the API server is reached at through the daemon's own configuration: the
/// kubeconfig's server (or the in-cluster one), resolved when it is a name. Empty, with a log
/// line, when it cannot be read.
async fn kubeconfig_api_addresses(kubeconfig: Option<&std::path::Path>) -> Vec<IpAddr> {
    let config = match kubeconfig {
        Some(path) => match kube::config::Kubeconfig::read_from(path) {
            Ok(kc) => kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        None => kube::Config::infer().await.map_err(|e| e.to_string()),
    };
    let url = match config {
        Ok(config) => config.cluster_url,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the API server's address from the kube config; it is protected only through the kubernetes Service's endpoints");
            return Vec::new();
        }
    };
    let host = url.host().unwrap_or_default().trim_matches(['[', ']']).to_owned();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![ip];
    }
    let port = url.port_u16().unwrap_or(443);
    match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(addrs) => addrs.map(|a| a.ip()).collect(),
        Err(e) => {
            tracing::warn!(%host, error = %e, "cannot resolve the API server's name");
            Vec::new()
        }
    }
}

impl Gateway {
    /// Keeps the node's egress NAT and policy routing in step with the cluster.
    pub async fn run(self) {
        gateway_task(self).await;
    }
}

async fn gateway_task(gw: Gateway) {
    let caches = Caches::start(&gw.kube);
    while !(gw.subnets.synced(SYNC_WAIT).await
        && gw.nodes.synced(SYNC_WAIT).await
        && gw.pods.synced(SYNC_WAIT).await
        && gw.services.synced(SYNC_WAIT).await
        && caches.ips.synced(SYNC_WAIT).await
        && caches.peers.synced(SYNC_WAIT).await
        && caches.slices.synced(SYNC_WAIT).await)
    {
        tracing::info!(
            "egress NAT waits for the Subnet, Node, Pod, Service, IP, BgpPeer and EndpointSlice caches to list once"
        );
    }
    let kubeconfig_api = kubeconfig_api_addresses(gw.settings.kubeconfig.as_deref()).await;
    let reporter = Reporter {
        controller: "kube-ovn-cni".into(),
        instance: Some(gw.settings.node_name.clone()),
    };
    let mut state = Egress {
        tables: NftTables::new(gw.ovs_ns.clone()),
        last_good: LastGood::default(),
        reported: BTreeSet::new(),
        refusals: BTreeSet::new(),
        reporter,
        sysctls_set: false,
        caches,
        kubeconfig_api,
    };
    let mut subnets = gw.subnets.changes();
    let mut nodes = gw.nodes.changes();
    let mut pods = gw.pods.changes();
    let mut services = gw.services.changes();
    let mut ips = state.caches.ips.changes();
    let mut peers = state.caches.peers.changes();
    let mut slices = state.caches.slices.changes();
    let mut tick = tokio::time::interval(gw.settings.gateway_check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let Err(e) = reconcile(&gw, &mut state).await {
            tracing::warn!(error = %e, "egress NAT not applied; will retry");
        }
        tokio::select! {
            _ = subnets.changed() => {}
            _ = nodes.changed() => {}
            _ = pods.changed() => {}
            _ = services.changed() => {}
            _ = ips.changed() => {}
            _ = peers.changed() => {}
            _ = slices.changed() => {}
            _ = tick.tick() => {}
        }
    }
}

async fn reconcile(gw: &Gateway, state: &mut Egress) -> Result<(), DaemonError> {
    let name = &gw.settings.node_name;
    let Some(me) = gw.nodes.get(name, None) else {
        return Ok(());
    };
    let labels = me.metadata.labels.clone().unwrap_or_default();
    // The join CIDRs from the Node's annotation; a malformed one is the node task's to report.
    let join_cidrs: Vec<IpNet> = get::<CidrPair>(me.metadata.annotations.as_ref(), keys::CIDR)
        .ok()
        .flatten()
        .map(|c| c.nets().map(|n| n.trunc()).collect())
        .unwrap_or_default();
    let all_nodes = gw.nodes.all();
    let other_node_ips: Vec<IpAddr> = all_nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(name.as_str()))
        .flat_map(|n| internal_ips(n))
        .collect();
    let subnets = gw.subnets.all();
    let services = gw.services.all();
    let addresses_of_nodes: BTreeMap<IpAddr, String> = all_nodes
        .iter()
        .flat_map(|n| {
            let owner = n.metadata.name.clone().unwrap_or_default();
            node_addresses(n).map(move |ip| (ip, owner.clone()))
        })
        .collect();
    let (pods, forged) = pods::local_pods(&gw.pods.all(), &state.caches.ips.all(), &addresses_of_nodes);
    let internal = internal_ip_per_family(&me);
    let join_gateways = join_address(&me)
        .ok()
        .flatten()
        .map(|j| j.gateways)
        .unwrap_or_default();
    let all_slices = state.caches.slices.all();
    let mut api_server = api_server_endpoints(&all_slices);
    api_server.extend(&state.kubeconfig_api);
    let protected = Protected::new(&ProtectedInputs {
        nodes: &all_nodes,
        peers: &state.caches.peers.all(),
        neighbors: &gw.settings.bgp_neighbors,
        subnets: &subnets,
        node_switch: &gw.settings.node_switch,
        join_cidrs: &join_cidrs,
        services: &services,
        service_cidrs: &gw.settings.service_cidrs,
        api_server: &api_server,
    });
    let ingress = lb_ingress(
        &services,
        &gw.settings.cluster_router,
        &gw.settings.service_external_ip_cidrs,
        &protected,
        Endpoints {
            slices: &all_slices,
            local_pod_ips: &pods.iter().flat_map(|p| p.ips.iter().copied()).collect(),
        },
    );
    report_refusals(gw, state, &ingress.refused, &forged).await;
    let planned = plan(
        &GatewayInput {
            node: NodeFacts {
                name,
                labels: &labels,
                internal_ips: internal,
            },
            subnets: &subnets,
            cluster_router: &gw.settings.cluster_router,
            join_cidrs: &join_cidrs,
            service_cidrs: &gw.settings.service_cidrs,
            other_node_ips: &other_node_ips,
            local_pods: &pods,
            lb_ingress: &ingress.ports,
            lb_local: &ingress.local,
            join_gateways: &join_gateways,
        },
        &state.last_good,
    );
    state.last_good = planned.last_good;
    report(gw, state, &planned.errors).await;

    if !state.sysctls_set {
        set_sysctls(&gw.ovs_ns, internal.1.is_some()).await?;
        state.sysctls_set = true;
    }
    match state.tables.apply(&planned.plan.ruleset).await? {
        Applied::Unchanged => {}
        Applied::Elements(sets) => tracing::info!(sets, "egress NAT sets updated"),
        Applied::Replaced => {
            tracing::info!("egress NAT tables applied");
            // Whoever flushed our tables may have reset forwarding too.
            set_sysctls(&gw.ovs_ns, internal.1.is_some()).await?;
        }
    }
    // The marks are in place (and masqueraded) before the rule that routes them into ovn0.
    apply_routing(&gw.ovs_nl, &planned.plan.routing).await
}

/// Warning events on the subnets whose gateway fields were refused, once per message.
async fn report(gw: &Gateway, state: &mut Egress, errors: &[PlanError]) {
    let current: BTreeSet<String> = errors.iter().map(ToString::to_string).collect();
    for error in errors {
        let message = error.to_string();
        if state.reported.contains(&message) {
            continue;
        }
        tracing::warn!(subnet = error.subnet(), field = error.field(), %message, "egress configuration refused; the subnet keeps its previous plan");
        let Some(subnet) = gw.subnets.get(error.subnet(), None) else {
            continue;
        };
        let note = format!("node {}: {message}", gw.settings.node_name);
        warn(
            &gw.kube,
            &state.reporter,
            subnet.object_ref(&()),
            error.field(),
            "NodeEgressConfigInvalid",
            "ApplyEgress",
            note,
        )
        .await;
    }
    state.reported = current;
}

/// A Warning event on the `field` of `object`. Each is a new Event: kube's `Recorder` folds
/// events of one object, reason and action into one series and keeps the first note, so two
/// refused fields of one Service would show as one. The callers publish each message once.
async fn warn(
    kube: &kube::Client,
    reporter: &Reporter,
    mut object: ObjectReference,
    field: &str,
    reason: &str,
    action: &str,
    note: String,
) {
    object.field_path = Some(field.to_owned());
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    let recorder = Recorder::new(kube.clone(), reporter.clone());
    if let Err(e) = recorder.publish(&event, &object).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// Warning events for refused ingress addresses (on the Service) and forged pod addresses (on
/// the pod), each once while it lasts; a refusal that goes away and comes back is reported again.
async fn report_refusals(
    gw: &Gateway,
    state: &mut Egress,
    refused: &[crate::lb_ingress::Refusal],
    forged: &[pods::Forged],
) {
    let me = &gw.settings.node_name;
    // One shape for both kinds: (what is refused, the object it is on, how it is reported).
    let services = refused.iter().map(|r| Reported {
        key: r.to_string(),
        object: gw
            .services
            .get(&r.name, Some(&r.namespace))
            .map(|s| s.object_ref(&())),
        id: format!("Service {}/{}", r.namespace, r.name),
        field: &r.field,
        value: &r.value,
        why: &r.reason,
        reason: "ServiceAddressRefused",
        action: "RouteIngress",
        consequence: "not routed into ovn0",
    });
    let pods = forged.iter().map(|f| Reported {
        key: f.to_string(),
        object: gw
            .pods
            .get(&f.name, Some(&f.namespace))
            .map(|p| p.object_ref(&())),
        id: format!("Pod {}/{}", f.namespace, f.name),
        field: &f.field,
        value: &f.value,
        why: &f.reason,
        reason: "PodAddressRefused",
        action: "ApplyEgress",
        consequence: "no egress rule is built from it",
    });
    let mut current = BTreeSet::new();
    for r in services.chain(pods).collect::<Vec<_>>() {
        let new = !state.refusals.contains(&r.key);
        current.insert(r.key);
        if !new {
            continue;
        }
        tracing::warn!(object = %r.id, field = %r.field, value = %r.value, reason = %r.why, "address refused: {}", r.consequence);
        let Some(object) = r.object else {
            continue;
        };
        let note = format!(
            "node {me}: {}: {:?} {}; {}",
            r.field, r.value, r.why, r.consequence
        );
        warn(
            &gw.kube,
            &state.reporter,
            object,
            r.field,
            r.reason,
            r.action,
            note,
        )
        .await;
    }
    state.refusals = current;
}

/// A refusal as [`report_refusals`] reports it.
struct Reported<'a> {
    /// What is refused, whole: reported once while it lasts.
    key: String,
    /// The object the event goes on, if the cache still has it.
    object: Option<ObjectReference>,
    /// `Kind ns/name`, for the log.
    id: String,
    field: &'a str,
    value: &'a str,
    why: &'a str,
    reason: &'static str,
    action: &'static str,
    consequence: &'static str,
}

/// Forwarding on, and no reverse-path filter on the node's side of the datapath (Kube-OVN's
/// install-cni.sh): replies to NATed traffic and routed ingress come back asymmetrically.
async fn set_sysctls(ns: &Netns, ipv6: bool) -> Result<(), DaemonError> {
    let mut settings = vec![
        ("ipv4/ip_forward", "1"),
        ("ipv4/conf/all/rp_filter", "0"),
        ("ipv4/conf/default/rp_filter", "0"),
    ];
    let ovn0_key = format!("ipv4/conf/{OVN0}/rp_filter");
    settings.push((&ovn0_key, "0"));
    if ipv6 {
        settings.push(("ipv6/conf/all/forwarding", "1"));
    }
    for (key, value) in settings {
        // A key that does not exist (ovn0 not made yet, IPv6 compiled out) is skipped.
        ethtool::write_net_sysctl(ns, key, value).await?;
    }
    Ok(())
}

/// Makes our `ip rule`s and table routes (protocol 150) those of `routing`.
async fn apply_routing(nl: &Netlink, routing: &PolicyRouting) -> Result<(), DaemonError> {
    for v6 in [false, true] {
        let want_rules: BTreeSet<PolicyRule> = routing
            .rules
            .iter()
            .filter(|r| r.src.addr().is_ipv6() == v6)
            .cloned()
            .collect();
        let want_routes: BTreeSet<TableRoute> = routing
            .routes
            .iter()
            .filter(|r| r.gateway.is_ipv6() == v6)
            .cloned()
            .collect();
        let have_rules: BTreeSet<PolicyRule> = nl.policy_rules(v6).await?.into_iter().collect();
        let have_routes: BTreeSet<TableRoute> = nl.table_routes(v6).await?.into_iter().collect();
        for rule in have_rules.difference(&want_rules) {
            tracing::info!(?rule, "removing a policy rule no subnet wants");
            nl.delete_policy_rule(rule).await?;
        }
        for route in want_routes.difference(&have_routes) {
            tracing::info!(?route, "adding an external egress route");
            nl.replace_table_route(route).await?;
        }
        // A table whose gateway changed was replaced above; what is left over goes.
        let tables: BTreeSet<u32> = want_routes.iter().map(|r| r.table).collect();
        for route in have_routes.difference(&want_routes) {
            if !tables.contains(&route.table) {
                tracing::info!(?route, "removing an external egress route");
                nl.delete_table_route(route).await?;
            }
        }
        for rule in want_rules.difference(&have_rules) {
            tracing::info!(?rule, "adding a policy rule");
            nl.add_policy_rule(rule).await?;
        }
    }
    Ok(())
}
