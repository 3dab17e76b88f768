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

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_ovn_api::annotations::{CidrPair, IpPair, get, keys};
use kube_ovn_api::node::{internal_ip_per_family, internal_ips};
use kube_ovn_dataplane::{Netlink, PolicyRule, TableRoute, ethtool};
use kube_ovn_gateway::{GatewayInput, LastGood, LocalPod, NodeFacts, PlanError, PolicyRouting, plan};

use super::Node;
use super::error::DaemonError;
use super::nft_tables::{Applied, NftTables};
use super::node::OVN0;

/// How long the task waits for the caches' first list before saying so in the log.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// State carried from one pass to the next.
struct Egress {
    tables: NftTables,
    last_good: LastGood,
    /// Messages already published as events (a refused subnet is reported once, not per pass).
    reported: BTreeSet<String>,
    recorder: Recorder,
    sysctls_set: bool,
}

/// Keeps the node's egress NAT and policy routing in step with the cluster.
pub async fn gateway_task(node: Arc<Node>) {
    while !(node.subnets.synced(SYNC_WAIT).await
        && node.nodes.synced(SYNC_WAIT).await
        && node.pods.synced(SYNC_WAIT).await)
    {
        tracing::info!("egress NAT waits for the Subnet, Node and Pod caches to list once");
    }
    let reporter = Reporter {
        controller: "kube-ovn-cni".into(),
        instance: Some(node.config.flags.node_name.clone()),
    };
    let mut state = Egress {
        tables: NftTables::new(node.ovs_ns.clone()),
        last_good: LastGood::default(),
        reported: BTreeSet::new(),
        recorder: Recorder::new(node.kube.clone(), reporter),
        sysctls_set: false,
    };
    let mut subnets = node.subnets.changes();
    let mut nodes = node.nodes.changes();
    let mut pods = node.pods.changes();
    let mut services = node.services.changes();
    let mut tick = tokio::time::interval(node.config.flags.gateway_check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let Err(e) = reconcile(&node, &mut state).await {
            tracing::warn!(error = %e, "egress NAT not applied; will retry");
        }
        tokio::select! {
            _ = subnets.changed() => {}
            _ = nodes.changed() => {}
            _ = pods.changed() => {}
            _ = services.changed() => {}
            _ = tick.tick() => {}
        }
    }
}

/// This node's pods with their subnet and addresses (what a distributed
/// `externalEgressGateway` routes).
fn local_pods(node: &Node) -> Vec<LocalPod> {
    node.pods
        .all()
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.spec.as_ref().and_then(|s| s.host_network) != Some(true))
        .filter_map(|p| {
            let ann = p.metadata.annotations.as_ref();
            let subnet = ann?.get(keys::LOGICAL_SWITCH)?.clone();
            let ips = get::<IpPair>(ann, keys::IP_ADDRESS).ok()??;
            Some(LocalPod {
                key: format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                ),
                subnet,
                ips: ips.addrs().collect(),
            })
        })
        .collect()
}

async fn reconcile(node: &Node, state: &mut Egress) -> Result<(), DaemonError> {
    let name = &node.config.flags.node_name;
    let Some(me) = node.nodes.get(name, None) else {
        return Ok(());
    };
    let labels = me.metadata.labels.clone().unwrap_or_default();
    // The join CIDRs from the Node's annotation; a malformed one is the node task's to report.
    let join_cidrs: Vec<IpNet> = get::<CidrPair>(me.metadata.annotations.as_ref(), keys::CIDR)
        .ok()
        .flatten()
        .map(|c| c.nets().map(|n| n.trunc()).collect())
        .unwrap_or_default();
    let other_node_ips: Vec<IpAddr> = node
        .nodes
        .all()
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(name.as_str()))
        .flat_map(|n| internal_ips(n))
        .collect();
    let subnets = node.subnets.all();
    let pods = local_pods(node);
    let internal = internal_ip_per_family(&me);
    let lb_ingress =
        super::lb_ingress::lb_ingress_ips(&node.services.all(), &node.config.flags.cluster_router);
    let planned = plan(
        &GatewayInput {
            node: NodeFacts {
                name,
                labels: &labels,
                internal_ips: internal,
            },
            subnets: &subnets,
            cluster_router: &node.config.flags.cluster_router,
            join_cidrs: &join_cidrs,
            service_cidrs: &node.config.service_cidrs,
            other_node_ips: &other_node_ips,
            local_pods: &pods,
            lb_ingress: &lb_ingress,
        },
        &state.last_good,
    );
    state.last_good = planned.last_good;
    report(node, state, &planned.errors).await;

    if !state.sysctls_set {
        set_sysctls(node, internal.1.is_some()).await?;
        state.sysctls_set = true;
    }
    match state.tables.apply(&planned.plan.ruleset).await? {
        Applied::Unchanged => {}
        Applied::Elements(sets) => tracing::info!(sets, "egress NAT sets updated"),
        Applied::Replaced => {
            tracing::info!("egress NAT tables applied");
            // Whoever flushed our tables may have reset forwarding too.
            set_sysctls(node, internal.1.is_some()).await?;
        }
    }
    // Now that the tables masquerade them, the node task may route them into ovn0.
    let masqueraded: BTreeSet<IpAddr> = lb_ingress.into_iter().collect();
    node.lb_masqueraded.send_if_modified(|current| {
        let changed = *current != masqueraded;
        *current = masqueraded;
        changed
    });
    apply_routing(&node.ovs_nl, &planned.plan.routing).await
}

/// Warning events on the subnets whose gateway fields were refused, once per message.
async fn report(node: &Node, state: &mut Egress, errors: &[PlanError]) {
    let current: BTreeSet<String> = errors.iter().map(ToString::to_string).collect();
    for error in errors {
        let message = error.to_string();
        if state.reported.contains(&message) {
            continue;
        }
        tracing::warn!(subnet = error.subnet(), field = error.field(), %message, "egress configuration refused; the subnet keeps its previous plan");
        let Some(subnet) = node.subnets.get(error.subnet(), None) else {
            continue;
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "NodeEgressConfigInvalid".into(),
            note: Some(format!("node {}: {message}", node.config.flags.node_name)),
            action: "ApplyEgress".into(),
            secondary: None,
        };
        if let Err(e) = state.recorder.publish(&event, &subnet.object_ref(&())).await {
            tracing::debug!(error = %e, "cannot publish event");
        }
    }
    state.reported = current;
}

/// Forwarding on, and no reverse-path filter on the node's side of the datapath (Kube-OVN's
/// install-cni.sh): replies to NATed traffic and routed ingress come back asymmetrically.
async fn set_sysctls(node: &Node, ipv6: bool) -> Result<(), DaemonError> {
    let ns = &node.ovs_ns;
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
            .map(|r| PolicyRule {
                priority: r.priority,
                src: r.src,
                table: r.table,
            })
            .collect();
        let want_routes: BTreeSet<TableRoute> = routing
            .routes
            .iter()
            .filter(|r| r.gateway.is_ipv6() == v6)
            .map(|r| TableRoute {
                table: r.table,
                gateway: r.gateway,
            })
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
