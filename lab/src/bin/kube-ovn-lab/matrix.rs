//! The matrix measured: targets from the API, expectations from `cluster::matrix`, and every
//! probe sent for real from the pod's (or the outside host's) own namespace, all at once.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::ListParams;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::Subnet;
use kube_ovn_lab::cluster::matrix::{
    self, Attachment, Check, EipTarget, Expect, Kind, Outcome, Report, ServiceTarget, Target,
};
use kube_ovn_lab::cluster::topology::{OUTSIDE_PORT, Topology};
use kube_ovn_lab::cluster::wait::{nothing_missing, wait_for};

use super::probe;

/// The image whose containers serve netexec.
const NETEXEC_IMAGE: &str = "kube-ovn-lab/netexec";
/// How long a probe that should be answered may take (a first packet through OVN can wait for
/// flows and ARP), and one that should not.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
const BLOCKED_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause after a try that failed at once.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The pods with a netexec server, with what the matrix needs to know of them.
pub async fn targets(t: &Topology, client: &kube::Client) -> anyhow::Result<(Vec<Target>, Vec<PathBuf>)> {
    let subnets: BTreeMap<String, Subnet> = Api::<Subnet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Subnets")?
        .items
        .into_iter()
        .filter_map(|s| Some((s.metadata.name.clone()?, s)))
        .collect();
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Pods")?;
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Namespaces")?
        .items
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
        .collect();
    let install = kube_ovn_lab::cluster::state::LabState::load(&t.state_file())?
        .map(|s| s.install)
        .unwrap_or_default();
    let mut targets = Vec::new();
    let mut netns = Vec::new();
    for pod in pods.items {
        let (Some(namespace), Some(name)) = (pod.metadata.namespace.clone(), pod.metadata.name.clone())
        else {
            continue;
        };
        let Some(spec) = &pod.spec else { continue };
        let Some(port) = spec
            .containers
            .iter()
            .filter(|c| {
                c.image
                    .as_deref()
                    .is_some_and(|i| i.split(':').next() == Some(NETEXEC_IMAGE))
            })
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .and_then(|p| u16::try_from(p.container_port).ok())
        else {
            continue;
        };
        let ann = pod.metadata.annotations.clone().unwrap_or_default();
        // Kube-OVN's `ip_address`: one address, or a dual-stack pod's IPv4 and IPv6 ones.
        let addresses: Vec<IpAddr> = ann
            .get(keys::IP_ADDRESS)
            .into_iter()
            .flat_map(|v| v.split(','))
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        let Some(&ip) = addresses.first() else {
            continue;
        };
        let ip6 = addresses
            .iter()
            .copied()
            .find(IpAddr::is_ipv6)
            .filter(|_| ip.is_ipv4());
        let subnet_name = ann.get(keys::LOGICAL_SWITCH).cloned().unwrap_or_default();
        let subnet = subnets.get(&subnet_name);
        let announced = |a: &Option<BTreeMap<String, String>>| {
            a.as_ref()
                .and_then(|a| a.get(keys::BGP))
                .is_some_and(|v| matches!(v.as_str(), "true" | "cluster" | "local"))
        };
        let node = spec.node_name.clone().unwrap_or_default();
        let egress_ips = subnet.map(|s| egress_ips(t, s, &node)).unwrap_or_default();
        let named_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .filter_map(|p| Some((p.name.clone()?, u16::try_from(p.container_port).ok()?)))
            .collect();
        targets.push(Target {
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            namespace_labels: namespace_labels.get(&namespace).cloned().unwrap_or_default(),
            named_ports,
            egress_ips,
            egress_eip: None,
            namespace: namespace.clone(),
            name: name.clone(),
            node,
            ip,
            ip6,
            port,
            vpc: subnet
                .and_then(|s| s.spec.vpc.clone())
                .unwrap_or_else(|| matrix::DEFAULT_VPC.to_owned()),
            announced: announced(&pod.metadata.annotations)
                || subnet.is_some_and(|s| announced(&s.metadata.annotations)),
            nat_outgoing: subnet.and_then(|s| s.spec.nat_outgoing).unwrap_or(false),
            // Kube-OVN's underlay: a subnet on a Vlan.
            attachment: match subnet {
                Some(s) if s.spec.vlan.as_deref().is_some_and(|v| !v.is_empty()) => Attachment::Underlay {
                    u2o: s.spec.u2o_interconnection.unwrap_or(false),
                },
                _ => Attachment::Overlay,
            },
            subnet: subnet_name,
        });
        netns.push(super::verbs::pod_netns(t, install, &namespace, &name).await?);
    }
    Ok((targets, netns))
}

/// What the backends see of traffic from outside: the nodes masquerade it to their join
/// addresses (the controller's `ovn.kubernetes.io/ip_address` on each Node).
async fn join_addresses(client: &kube::Client) -> anyhow::Result<Vec<IpAddr>> {
    Ok(Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Nodes")?
        .items
        .iter()
        .filter_map(|n| n.metadata.annotations.as_ref()?.get(keys::IP_ADDRESS))
        .flat_map(|ips| ips.split(','))
        .filter_map(|ip| ip.trim().parse().ok())
        .collect())
}

/// The addresses a NATed pod of `subnet` on `node` may leave with: with a centralized gateway,
/// each active gateway's (several with ECMP): its `node:ip` address from `gatewayNode`, else the
/// node's own; with a distributed one, `node`'s. The lab's nodes have one address each.
fn egress_ips(t: &Topology, subnet: &Subnet, node: &str) -> Vec<IpAddr> {
    let node_ip = |name: &str| t.node(name).map(|n| IpAddr::V4(n.ip));
    if subnet.spec.gateway_type.as_deref() != Some("centralized") {
        return node_ip(node).into_iter().collect();
    }
    let pinned: BTreeMap<&str, IpAddr> = subnet
        .spec
        .gateway_node
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter_map(|entry| {
            let (name, ip) = entry.trim().split_once(':')?;
            Some((name.trim(), ip.trim().parse().ok()?))
        })
        .collect();
    let active = subnet
        .status
        .as_ref()
        .and_then(|s| s.activate_gateway.as_deref())
        .unwrap_or_default();
    active
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .filter_map(|name| pinned.get(name).copied().or_else(|| node_ip(name)))
        .collect()
}

/// Waits until the ToR's kernel routes every announced pod address toward a node (BGP has
/// converged), then probes everything.
pub async fn measure(t: &Topology, client: &kube::Client, timeout: Duration) -> anyhow::Result<Report> {
    wait_for(
        "every Service's endpoints to be its Running pods, and its VIPs written (the controller's ovn.kubernetes.io/vpc annotation)",
        timeout,
        Duration::from_millis(100),
        || super::matrix_services::services_settled(t, client),
    )
    .await?;
    let (mut targets, pod_netns) = targets(t, client).await?;
    let (nat, announced_eips) = super::matrix_nat::rules(client).await?;
    for target in &mut targets {
        target.egress_eip = nat.egress(target);
    }
    let eips = nat.eip_targets(&targets);
    // Services of netexec servers only: the probes speak netexec's HTTP (kube-system's
    // ovn-nb/ovn-sb, with `up --install manifests`, front OVSDB).
    let mut services = super::matrix_services::services(t, client, &join_addresses(client).await?).await?;
    services.retain(|s| {
        s.backends
            .iter()
            .all(|b| targets.iter().any(|x| x.namespace == s.namespace && x.name == *b))
    });
    let announced: Vec<IpAddr> = targets
        .iter()
        .filter(|x| x.announced && x.vpc == matrix::DEFAULT_VPC)
        .flat_map(|x| std::iter::once(x.ip).chain(x.ip6))
        .chain(
            services
                .iter()
                .filter(|s| s.vpc == matrix::DEFAULT_VPC && !s.backends.is_empty())
                .filter_map(|s| s.outside_ip),
        )
        .chain(announced_eips)
        .collect();
    let tor = t.tor_netns();
    wait_for_routes(
        "the ToR to route every announced pod, Service and EIP address to a node (IPv6 ones over the IPv6 sessions)",
        timeout,
        announced.iter().map(|ip| (tor.clone(), *ip)).collect(),
        |ip| {
            if ip.is_ipv4() {
                " via 172.30.0."
            } else {
                " via fd00:172:30::"
            }
        },
    )
    .await?;
    // A Service's outside address enters OVN through each node's ovn0 on the Service's ports:
    // the node daemon marks them in its nft table and routes marked packets into ovn0 (it follows
    // the Service on its own schedule); before it, the node sends the packet back to the ToR.
    let service_ips: Vec<(String, IpAddr)> = t
        .nodes
        .iter()
        .flat_map(|n| {
            services
                .iter()
                .filter(|s| s.vpc == matrix::DEFAULT_VPC && !s.backends.is_empty())
                // A `Local` Service comes in only where it has endpoints.
                .filter(|s| !s.local || s.local_next_hops.contains(&IpAddr::V4(n.ip)))
                .filter_map(|s| Some((n.netns.clone(), s.outside_ip?)))
        })
        .collect();
    wait_for(
        "every node to send every Service's outside address into ovn0 (its ports marked, marked packets routed)",
        timeout,
        Duration::from_millis(100),
        || {
            let service_ips = service_ips.clone();
            async move {
                let missing: Vec<String> = service_ips
                    .iter()
                    .filter(|(ns, ip)| !ingress_ready(ns, *ip))
                    .map(|(ns, ip)| format!("{ip}'s ports into ovn0 in {ns}"))
                    .collect();
                nothing_missing(&missing)
            }
        },
    )
    .await?;
    let outside_ns = Path::new("/run/netns").join(t.outside_netns());
    let mut tasks = Vec::new();
    let policies = Api::<NetworkPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing NetworkPolicies")?
        .items;
    for check in matrix::plan(&targets, &services, &eips, &policies) {
        if super::matrix_tor::is_tor_check(&check) {
            let (t, svc) = (t.clone(), check.to.map(|k| services[k].clone()));
            tasks.push(tokio::task::spawn_blocking(move || {
                let answer = svc
                    .ok_or_else(|| "no Service".to_owned())
                    .and_then(|svc| super::matrix_tor::probe(&t, &check, &svc));
                Outcome { check, answer }
            }));
            continue;
        }
        let (from, to) = endpoints(&check, &targets, &services, &eips, &pod_netns, &outside_ns);
        tasks.push(tokio::task::spawn_blocking(move || {
            let answer = probe_once(&check, &from, to);
            Outcome { check, answer }
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await?);
    }
    Ok(Report {
        targets,
        services,
        eips,
        policies: policies.len(),
        outcomes,
    })
}

/// Whether the node in `ns` marks `ip`'s Service ports (its nft table's ingress chain names the
/// address) and routes marked packets into `ovn0`.
fn ingress_ready(ns: &str, ip: IpAddr) -> bool {
    let family = if ip.is_ipv4() { "ip" } else { "ip6" };
    let marks = kube_ovn_lab::cluster::net::exec(
        ns,
        "nft",
        &["list", "chain", family, "kube-ovn", "OVN-LB-INGRESS"],
    )
    .is_ok_and(|chain| chain.contains(&format!("daddr {ip} ")));
    let mark = format!("{:#x}", kube_ovn_gateway::ingress::LB_INGRESS_MARK);
    marks
        && kube_ovn_lab::cluster::net::ip(ns, &["route", "get", &ip.to_string(), "mark", &mark])
            .is_ok_and(|r| r.contains(" dev ovn0"))
}

/// Waits until `ip route get <address>` in each (namespace, address) pair answers with
/// `shows(address)`.
async fn wait_for_routes(
    what: &str,
    timeout: Duration,
    routes: Vec<(String, IpAddr)>,
    shows: fn(IpAddr) -> &'static str,
) -> anyhow::Result<()> {
    wait_for(what, timeout, Duration::from_millis(100), || {
        let routes = routes.clone();
        async move {
            let missing: Vec<String> = routes
                .iter()
                .filter(|(ns, ip)| {
                    !kube_ovn_lab::cluster::net::ip(ns, &["route", "get", &ip.to_string()])
                        .is_ok_and(|r| r.contains(shows(*ip)))
                })
                .map(|(ns, ip)| format!("a route to {ip} in {ns}"))
                .collect();
            nothing_missing(&missing)
        }
    })
    .await?;
    Ok(())
}

fn endpoints(
    check: &Check,
    targets: &[Target],
    services: &[ServiceTarget],
    eips: &[EipTarget],
    pod_netns: &[PathBuf],
    outside_ns: &Path,
) -> (PathBuf, SocketAddr) {
    let from = check
        .from
        .map_or_else(|| outside_ns.to_owned(), |i| pod_netns[i].clone());
    let to = match (check.kind, check.to) {
        (Kind::PodToOutside6, _) => SocketAddr::new(Topology::outside_ip6().into(), OUTSIDE_PORT),
        (_, None) => SocketAddr::new(Topology::outside_ip().into(), OUTSIDE_PORT),
        (Kind::OutsideToPod6, Some(j)) => {
            SocketAddr::new(targets[j].ip6.unwrap_or(targets[j].ip), targets[j].port)
        }
        (Kind::PodToService, Some(k)) => SocketAddr::new(services[k].ip, services[k].port),
        (Kind::OutsideToService, Some(k)) => {
            SocketAddr::new(services[k].outside_ip.unwrap_or(services[k].ip), services[k].port)
        }
        (Kind::OutsideToEip, Some(k)) => SocketAddr::new(eips[k].ip, eips[k].port),
        (_, Some(j)) => SocketAddr::new(targets[j].ip, targets[j].port),
    };
    (from, to)
}

/// A probe that should be answered gets three tries and at least [`ANSWER_TIMEOUT`] in all (the
/// first packets of a flow can be lost while OVN installs flows, and an ICMP error fails a try at
/// once); one that should not gets one short try.
fn probe_once(check: &Check, from: &Path, to: SocketAddr) -> Result<String, String> {
    // (tries at least, each try's timeout, time to keep trying at least)
    let (tries, timeout, budget) = match check.expect {
        Expect::Blocked => (1, BLOCKED_TIMEOUT, Duration::ZERO),
        _ => (3, ANSWER_TIMEOUT, ANSWER_TIMEOUT),
    };
    let start = std::time::Instant::now();
    let mut attempt = 0;
    loop {
        let tried = std::time::Instant::now();
        let last = probe::http_get(from, to, check.path, timeout).map_err(|e| e.to_string());
        attempt += 1;
        let answered = last.as_ref().is_ok_and(|a| matrix::judge(&check.expect, Some(a)));
        if answered || (attempt >= tries && start.elapsed() >= budget) {
            return last;
        }
        if tried.elapsed() < timeout {
            // It failed before its timeout (refused, unreachable): pause before the next try.
            std::thread::sleep(RETRY_PAUSE);
        }
    }
}

/// `kube-ovn-lab matrix`: measure again and print.
pub fn run_verb(name: &str, run_dir: &Path) -> anyhow::Result<std::process::ExitCode> {
    let t = super::verbs::topology_of(name, run_dir)?;
    let cp = kube_ovn_dataplane::Netns::open(Path::new("/run/netns").join(t.cp_netns()))?;
    let report = cp.run(|| -> anyhow::Result<Report> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&t.admin_kubeconfig())).await?;
            measure(&t, &client, Duration::from_secs(30)).await
        })
    })??;
    println!("{}", report.render());
    Ok(if report.healthy() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
