//! A hostile tenant in the lab (DESIGN.md "Tests", tier 6). The tenant writes only what a tenant's
//! RBAC lets it write — Pods, Services and NetworkPolicies in its own namespaces, with any
//! annotations — and tries each attack of the tenancy issue: another VPC's subnet, another
//! namespace's IP pool, a forged or multicast address announced over BGP, another Service's
//! ClusterIP as its VIP, `externalIPs` naming the API server, a node and the ToR, and a
//! NetworkPolicy whose Kube-OVN name collides with another namespace's. The platform's objects
//! (namespaces, the IP pool) are written first, as the platform team would.
//!
//! Each attack is judged by what a user can observe: the pod gets no address and no port, the ToR
//! learns nothing it should not (checked once a later honest announcement has arrived, so an
//! absence is not a race), the victim Service still answers, the nodes keep their routes and the
//! BGP sessions stay up, the victim stays isolated, and each refusal is a Warning event naming the
//! object's field. Needs root and the packages of `scripts/install-deps.sh`; fails, never skips.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::lab::Lab;
use kube_ovn_lab::cluster::topology::Topology;
use kube_ovn_testkit::wait_until;
use serde_json::Value;

const WAIT: Duration = Duration::from_mins(1);

/// The platform's objects: the tenant namespaces, the victim of the policy collision, and an IP
/// pool that belongs to `demo`.
const PLATFORM: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: attacker}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-x}
---
apiVersion: v1
kind: Namespace
metadata: {name: bt-team-x}
---
apiVersion: kubeovn.io/v1
kind: IPPool
metadata: {name: demo-pool}
spec:
  subnet: ovn-default
  ips: [10.16.250.0/28]
  namespaces: [demo]
";

fn pod(ns: &str, name: &str, annotations: &[(&str, &str)]) -> String {
    let mut listed = String::new();
    for (k, v) in annotations {
        writeln!(listed, "    {k}: {v:?}").expect("writing to a String");
    }
    let annotations = listed;
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {name}}}\n  annotations:\n{annotations}\
         spec:\n  containers:\n  - name: netexec\n    image: kube-ovn-lab/netexec\n    ports: [{{containerPort: 8080}}]\n"
    )
}

fn apply(lab: &Lab, file: &str, yaml: &str) -> Result<()> {
    let path = lab.dir.path().join(file);
    std::fs::write(&path, yaml)?;
    lab.apply(&path)?;
    Ok(())
}

fn json(lab: &Lab, args: &[&str]) -> Result<Value> {
    let mut all = vec!["kubectl"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    Ok(serde_json::from_str(&lab.ok(&all)?)?)
}

/// The messages of the Warning events about `kind ns/name`, as `kubectl get events` (core/v1)
/// shows them: our components publish `events.k8s.io/v1` Events (`regarding`, `note`), which
/// the API server also serves as core/v1 (`involvedObject`, `message`), as an operator reads them.
fn warnings(lab: &Lab, ns: &str, kind: &str, name: &str) -> Result<Vec<String>> {
    let events = json(lab, &["-n", ns, "get", "events"])?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "Warning")
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect())
}

/// Waits for a Warning event about `kind ns/name` whose message names `field`.
fn await_warning(lab: &Lab, ns: &str, kind: &str, name: &str, field: &str) -> Result<String> {
    let mut found = String::new();
    wait_until(
        &format!("a Warning event on {kind} {ns}/{name} naming {field}"),
        WAIT,
        || {
            let all = warnings(lab, ns, kind, name)?;
            match all.into_iter().find(|m| m.contains(field)) {
                Some(m) => {
                    found = m;
                    Ok(true)
                }
                None => Ok(false),
            }
        },
    )?;
    Ok(found)
}

fn annotation(lab: &Lab, ns: &str, pod: &str, key: &str) -> Result<Option<String>> {
    let p = json(lab, &["-n", ns, "get", "pod", pod])?;
    Ok(p["metadata"]["annotations"][key].as_str().map(str::to_owned))
}

/// Waits for the controller to give `ns/pod` an address; the address.
fn await_address(lab: &Lab, ns: &str, pod: &str) -> Result<String> {
    let mut ip = String::new();
    wait_until(&format!("{ns}/{pod} to get an address"), WAIT, || {
        ip = annotation(lab, ns, pod, "ovn.kubernetes.io/ip_address")?.unwrap_or_default();
        Ok(!ip.is_empty())
    })?;
    Ok(ip)
}

fn tor_routes(lab: &Lab) -> Result<String> {
    lab.ok(&["tor", "--", "birdc", "show", "route"])
}

/// Whether a TCP connection from `from` (`ns/pod`) to `ip:port` is answered within a second.
fn connects(lab: &Lab, from: &str, ip: &str, port: u16) -> Result<bool> {
    let connect = format!("echo > /dev/tcp/{ip}/{port}");
    Ok(lab
        .run(&["exec", from, "--", "timeout", "1", "bash", "-c", &connect])?
        .status
        .success())
}

fn service_answers(lab: &Lab, from: &str, ip: &str) -> Result<bool> {
    let url = format!("http://{ip}/hostname");
    let out = lab.run(&["exec", from, "--", "curl", "-s", "-m", "2", &url])?;
    Ok(out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("hello-"))
}

/// The route a node takes to `ip`, as `ip route get` says it.
fn node_route(lab: &Lab, node: &str, ip: &str) -> Result<String> {
    lab.ok(&["node", node, "--", "ip", "route", "get", ip])
}

#[test]
fn a_hostile_tenant_reaches_nothing_it_should_not() -> Result<()> {
    let lab = Lab::new("h");
    let out = lab.up(&[])?;
    println!("{out}");
    common::lab::matrix_is_green(&out).context("before the attacks")?;
    apply(&lab, "platform.yaml", PLATFORM)?;

    // 1. Another VPC's subnet, and another namespace's IP pool: no address, no port, a Warning
    //    naming the annotation.
    let attacks = [
        pod(
            "attacker",
            "into-vpc1",
            &[("ovn.kubernetes.io/logical_switch", "vpc1-net")],
        ),
        pod(
            "attacker",
            "into-pool",
            &[("ovn.kubernetes.io/ip_pool", "demo-pool")],
        ),
    ]
    .join("---\n");
    apply(&lab, "tenancy.yaml", &attacks)?;
    for (name, key) in [
        ("into-vpc1", "ovn.kubernetes.io/logical_switch"),
        ("into-pool", "ovn.kubernetes.io/ip_pool"),
    ] {
        let said = await_warning(&lab, "attacker", "Pod", name, key)?;
        println!("attacker/{name}: {said}");
        ensure!(
            annotation(&lab, "attacker", name, "ovn.kubernetes.io/allocated")?.is_none(),
            "attacker/{name} was allocated an address"
        );
        let port = lab.ok(&[
            "cp",
            "--",
            "ovn-nbctl",
            "--bare",
            "--columns=name",
            "find",
            "logical_switch_port",
            &format!("name={name}.attacker"),
        ])?;
        ensure!(
            port.trim().is_empty(),
            "attacker/{name} has a logical switch port"
        );
    }

    // 2. Addresses announced to the datacenter: a forged outside address and a multicast one
    //    with `bgp: "true"`, then an honest pod. Once the honest pod's /32 is at the ToR, the
    //    speakers have computed a route set that had the forged pods in it.
    let forged = [
        pod(
            "attacker",
            "forged",
            &[
                ("ovn.kubernetes.io/bgp", "true"),
                ("ovn.kubernetes.io/ip_address", "8.8.8.8"),
                ("ovn.kubernetes.io/allocated", "true"),
                ("ovn.kubernetes.io/logical_switch", "ovn-default"),
                ("ovn.kubernetes.io/mac_address", "00:00:00:08:08:08"),
            ],
        ),
        pod(
            "attacker",
            "mcast",
            &[
                ("ovn.kubernetes.io/bgp", "true"),
                ("ovn.kubernetes.io/ip_address", "239.1.1.1"),
            ],
        ),
    ]
    .join("---\n");
    apply(&lab, "forged.yaml", &forged)?;
    await_warning(&lab, "attacker", "Pod", "forged", "ip_address")?;
    await_warning(&lab, "attacker", "Pod", "mcast", "ip_address")?;
    apply(
        &lab,
        "honest.yaml",
        &pod("attacker", "honest", &[("ovn.kubernetes.io/bgp", "true")]),
    )?;
    let honest_ip = await_address(&lab, "attacker", "honest")?;
    wait_until("the ToR to learn attacker/honest's /32", WAIT, || {
        Ok(tor_routes(&lab)?.contains(&format!("{honest_ip}/32")))
    })?;
    let routes = tor_routes(&lab)?;
    for bad in ["8.8.8.8/32", "239.1.1.1/32"] {
        ensure!(!routes.contains(bad), "the ToR learned {bad}:\n{routes}");
    }

    // 3. Another Service's address: a selectorless Service claiming demo/hello's ClusterIP as
    //    its VIP. hello keeps answering, before and after the claimant is deleted.
    let hello_ip = lab
        .ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "svc",
            "hello",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])?
        .trim()
        .to_owned();
    wait_until("demo/hello to answer at its ClusterIP", WAIT, || {
        service_answers(&lab, "demo/web-1", &hello_ip)
    })?;
    let steal = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: steal\n  namespace: attacker\n  annotations:\n    \
         ovn.kubernetes.io/switch_lb_vip: {hello_ip:?}\nspec:\n  ports: [{{port: 80, targetPort: 8080}}]\n"
    );
    apply(&lab, "steal.yaml", &steal)?;
    await_warning(&lab, "attacker", "Service", "steal", "switch_lb_vip")?;
    ensure!(
        service_answers(&lab, "demo/web-1", &hello_ip)?,
        "demo/hello stopped answering while attacker/steal claims its ClusterIP"
    );
    lab.ok(&["kubectl", "-n", "attacker", "delete", "svc", "steal"])?;
    ensure!(
        service_answers(&lab, "demo/web-1", &hello_ip)?,
        "demo/hello stopped answering once attacker/steal was deleted"
    );

    // 4. externalIPs naming the API server, a node and the ToR (outside the allowed CIDRs), and
    //    one inside them (the lab allows 192.0.2.0/24): only that one is announced, and the
    //    nodes keep their routes to the others.
    let nodes = json(&lab, &["get", "nodes"])?;
    let node_ips: Vec<String> = nodes["items"]
        .as_array()
        .context("nodes")?
        .iter()
        .flat_map(|n| n["status"]["addresses"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["type"] == "InternalIP")
        .filter_map(|a| a["address"].as_str().map(str::to_owned))
        .collect();
    ensure!(!node_ips.is_empty(), "no node addresses in {nodes}");
    let api = Topology::api_addr().ip().to_string();
    let tor = Topology::tor_ip().to_string();
    let protected = [api.as_str(), node_ips[0].as_str(), tor.as_str()];
    let before: Vec<String> = protected
        .iter()
        .map(|ip| node_route(&lab, "node1", ip))
        .collect::<Result<_>>()?;
    let external = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: ext\n  namespace: attacker\n  annotations:\n    \
         ovn.kubernetes.io/bgp: \"true\"\nspec:\n  selector: {{app: honest}}\n  ports: [{{port: 8080}}]\n  \
         externalIPs: [{}, {}, {}, 192.0.2.10]\n",
        protected[0], protected[1], protected[2]
    );
    apply(&lab, "external.yaml", &external)?;
    await_warning(&lab, "attacker", "Service", "ext", "spec.externalIPs")?;
    wait_until("the ToR to learn the allowed external IP", WAIT, || {
        Ok(tor_routes(&lab)?.contains("192.0.2.10/32"))
    })?;
    let routes = tor_routes(&lab)?;
    for ip in protected {
        ensure!(
            !routes.contains(&format!("{ip}/32")),
            "the ToR learned {ip}/32:\n{routes}"
        );
    }
    for (ip, was) in protected.iter().zip(&before) {
        let now = node_route(&lab, "node1", ip)?;
        ensure!(!now.contains("ovn0"), "node1 routes {ip} into ovn0: {now}");
        ensure!(&now == was, "node1's route to {ip} changed: {was:?} → {now:?}");
    }
    let protocols = lab.ok(&["tor", "--", "birdc", "show", "protocols"])?;
    let sessions = protocols
        .lines()
        .filter(|l| l.contains("BGP"))
        .collect::<Vec<_>>();
    ensure!(
        !sessions.is_empty() && sessions.iter().all(|l| l.contains("Established")),
        "the ToR's sessions:\n{protocols}"
    );
    lab.ok(&["kubectl", "get", "nodes"])?;

    // 5. A NetworkPolicy whose Kube-OVN port-group name collides with another namespace's:
    //    `allow-bt` in `team-x` and `allow` in `bt-team-x` are both `allow.bt.team.x`.
    apply(&lab, "victim.yaml", &pod("bt-team-x", "victim", &[]))?;
    let victim_ip = await_address(&lab, "bt-team-x", "victim")?;
    wait_until("bt-team-x/victim to answer attacker/honest", WAIT, || {
        connects(&lab, "attacker/honest", &victim_ip, 8080)
    })?;
    apply(
        &lab,
        "deny.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: allow, namespace: bt-team-x}\n\
         spec: {podSelector: {}, policyTypes: [Ingress]}\n",
    )?;
    wait_until("the victim's default deny to take hold", WAIT, || {
        Ok(!connects(&lab, "attacker/honest", &victim_ip, 8080)?)
    })?;
    apply(
        &lab,
        "collide.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: allow-bt, namespace: team-x}\n\
         spec: {podSelector: {}, policyTypes: [Ingress], ingress: [{}]}\n",
    )?;
    let group_of = |key: &str| {
        lab.ok(&[
            "cp",
            "--",
            "ovn-nbctl",
            "--bare",
            "--columns=name",
            "find",
            "port_group",
            &format!("external_ids:np=\"{key}\""),
        ])
        .map(|s| s.trim().to_owned())
    };
    wait_until("team-x/allow-bt's port group to exist", WAIT, || {
        Ok(!group_of("team-x/allow-bt")?.is_empty())
    })?;
    ensure!(
        group_of("team-x/allow-bt")? != group_of("bt-team-x/allow")?,
        "the two policies share a port group"
    );
    ensure!(
        !connects(&lab, "attacker/honest", &victim_ip, 8080)?,
        "team-x/allow-bt opened bt-team-x/victim"
    );
    lab.ok(&["kubectl", "-n", "team-x", "delete", "networkpolicy", "allow-bt"])?;
    wait_until("team-x/allow-bt's port group to go", WAIT, || {
        Ok(group_of("team-x/allow-bt")?.is_empty())
    })?;
    ensure!(
        !group_of("bt-team-x/allow")?.is_empty(),
        "deleting team-x/allow-bt deleted bt-team-x/allow's port group"
    );
    ensure!(
        !connects(&lab, "attacker/honest", &victim_ip, 8080)?,
        "deleting team-x/allow-bt opened bt-team-x/victim"
    );

    let state = lab.state()?;
    lab.down_and_check_clean(&state)
}
