//! `kubectl ko trace {namespace/pod|node//node} <dst ip> [dst mac] icmp|tcp|udp [port]`, as
//! Kube-OVN's plugin does it: the source's annotations (`ovn.kubernetes.io/logical_switch`,
//! `ip_address`, `mac_address`, `cidr`) give its switch, addresses and port (`<pod>.<namespace>`;
//! a node's `port_name`); the destination MAC is the port of the switch holding the destination
//! address, else the switch's router port (`<router>-<switch>`, the router being the pod's
//! `logical_router`, the subnet's VPC or `ovn-cluster`). `ovn-trace` runs in ovn-central against
//! the southbound database, then `ofproto/trace` on br-int in the node's ovs-ovn pod from the
//! pod's OpenFlow port (`external_ids:iface-id=<port>`). Both traces are printed raw, each
//! followed by its verdict: delivered to which port, or dropped where, by which ACL of which
//! NetworkPolicy. The annotations are checked against the port OVN has (`trace/recorded.rs`): where
//! they differ, OVN's record is traced and the difference printed.

use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::kubectl;

pub mod access;
pub mod nb;
mod recorded;
mod request;
mod verdict;

use request::{Packet, Protocol, Request, Source};
use verdict::OvnVerdict;

/// Arguments of `kubectl ko trace`.
#[derive(Debug, clap::Args)]
#[command(override_usage = request::USAGE)]
pub struct TraceArgs {
    /// `{namespace/pod|node//node} <dst ip> [dst mac] icmp|tcp|udp [port]` or `… arp [request|reply]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

mod keys {
    pub const LOGICAL_SWITCH: &str = "ovn.kubernetes.io/logical_switch";
    pub const LOGICAL_ROUTER: &str = "ovn.kubernetes.io/logical_router";
    pub const IP_ADDRESS: &str = "ovn.kubernetes.io/ip_address";
    pub const MAC_ADDRESS: &str = "ovn.kubernetes.io/mac_address";
    pub const CIDR: &str = "ovn.kubernetes.io/cidr";
    pub const PORT_NAME: &str = "ovn.kubernetes.io/port_name";
}

/// The traced packet's source as OVN knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    what: String,
    node: String,
    port: String,
    switch: String,
    src: IpAddr,
    mac: String,
    cidr: String,
    router: Option<String>,
}

/// The source's endpoint from its object (a pod's or a node's JSON). Pure.
fn endpoint(source: &Source, object: &Value, dst: IpAddr) -> anyhow::Result<Endpoint> {
    let ann = |k: &str| access::annotation(object, k);
    let (what, node, port) = match source {
        Source::Pod { namespace, name } => {
            let what = format!("pod {namespace}/{name}");
            if object["spec"]["hostNetwork"] == true {
                bail!("{what} is on the host's network: trace its node instead (node//<node>)");
            }
            let node = object["spec"]["nodeName"].as_str().unwrap_or_default();
            if node.is_empty() {
                bail!("{what} is not scheduled to a node yet (spec.nodeName is empty)");
            }
            (what, node.to_owned(), format!("{name}.{namespace}"))
        }
        Source::Node(name) => {
            let port = ann(keys::PORT_NAME);
            if port.is_empty() {
                bail!("node {name} has no annotation {} yet", keys::PORT_NAME);
            }
            (format!("node {name}"), name.clone(), port.to_owned())
        }
    };
    let need = |k: &str| -> anyhow::Result<String> {
        let v = ann(k);
        if v.is_empty() {
            bail!("{what}: annotation {k} is missing (its address is not ready)");
        }
        Ok(v.to_owned())
    };
    let ips = need(keys::IP_ADDRESS)?;
    let Some(src) = request::source_ip(&ips, dst) else {
        bail!(
            "{what} has no IPv{} address ({} is {ips:?}) to reach {dst}",
            if dst.is_ipv4() { 4 } else { 6 },
            keys::IP_ADDRESS
        );
    };
    let router = Some(ann(keys::LOGICAL_ROUTER))
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    Ok(Endpoint {
        switch: need(keys::LOGICAL_SWITCH)?,
        mac: need(keys::MAC_ADDRESS)?,
        cidr: ann(keys::CIDR).to_owned(),
        what,
        node,
        port,
        src,
        router,
    })
}

/// The northbound database's record of the source's port and the switch holding it.
fn recorded_port(ep: &Endpoint) -> anyhow::Result<recorded::RecordedPort> {
    let text = access::nbctl_json(&[
        "--columns=_uuid,addresses",
        "find",
        "Logical_Switch_Port",
        &format!("name={}", ep.port),
    ])?;
    let Some((uuid, addresses)) = nb::port_record(&text)? else {
        bail!(
            "{}: no logical switch port {} in OVN's northbound database: the controller has not set it up (yet)",
            ep.what,
            ep.port
        );
    };
    let text = access::nbctl_json(&[
        "--columns=name",
        "find",
        "Logical_Switch",
        &format!("ports{{>=}}{uuid}"),
    ])?;
    let switch = nb::switch_name(&text)?
        .with_context(|| format!("{}: no logical switch holds OVN's port {}", ep.what, ep.port))?;
    Ok(recorded::RecordedPort { switch, addresses })
}

/// The destination MAC: given, the switch port holding `dst`, or the switch's router port.
fn destination_mac(req: &Request, ep: &Endpoint) -> anyhow::Result<String> {
    if let Some(mac) = &req.dst_mac {
        return Ok(mac.clone());
    }
    if req.protocol == Protocol::ArpRequest {
        return Ok("ff:ff:ff:ff:ff:ff".into());
    }
    if request::in_cidrs(&ep.cidr, req.dst) {
        let text = access::nbctl_json(&["--columns=addresses", "list", "Logical_Switch_Port"])?;
        if let Some(mac) =
            request::mac_of_address(nb::port_addresses(&text)?.iter().map(String::as_str), req.dst)
        {
            return Ok(mac);
        }
    }
    let router = if let Some(r) = &ep.router {
        r.clone()
    } else {
        let subnet = kubectl::json(&["get", "subnet", &ep.switch])
            .with_context(|| format!("subnet {} (the switch of {})", ep.switch, ep.what))?;
        subnet["spec"]["vpc"]
            .as_str()
            .filter(|v| !v.is_empty())
            .unwrap_or("ovn-cluster")
            .to_owned()
    };
    let lrp = format!("{router}-{}", ep.switch);
    println!(
        "Using the MAC of router port {lrp} as the destination MAC ({} is not a port of {})",
        req.dst, ep.switch
    );
    let text = access::nbctl_json(&[
        "--columns=mac",
        "find",
        "Logical_Router_Port",
        &format!("name={lrp}"),
    ])?;
    nb::router_port_mac(&text)?.with_context(|| {
        format!("no logical router port {lrp}: give the destination MAC address (kubectl ko trace … <dst ip> <dst mac> …)")
    })
}

/// The verdict of ovn-trace in words; for an ACL, the NB ACL and NetworkPolicy behind it.
fn explain(v: &OvnVerdict) -> anyhow::Result<String> {
    Ok(match v {
        OvnVerdict::Delivered(ports) => {
            // `node-<node>` is a node's port (its ovn0): traffic leaving the cluster's overlay
            // through that node's network (Kube-OVN's distributed egress), or to the node itself.
            let named: Vec<String> = ports
                .iter()
                .map(|p| match p.strip_prefix("node-") {
                    Some(n) => format!("{p} (node {n}'s ovn0: out through its network)"),
                    None => p.clone(),
                })
                .collect();
            format!("OVN delivers the packet to {}", named.join(", "))
        }
        OvnVerdict::LeftThrough { port, kind } => {
            format!("OVN sends the packet out of port {port} (type {kind})")
        }
        OvnVerdict::Dropped { flow, why } => format!(
            "OVN drops the packet in stage {} ({why}; flow: {})",
            flow.stage, flow.r#match
        ),
        OvnVerdict::DroppedByAcl { flow, name, action } => {
            let acls = nb::acls(&access::nbctl_json(&[
                "--columns=name,direction,priority,match,action",
                "list",
                "ACL",
            ])?)?;
            let groups = nb::policies_by_group(&access::nbctl_json(&[
                "--columns=name,external_ids",
                "list",
                "Port_Group",
            ])?)?;
            let who = verdict::attribute(flow, name.as_deref(), &acls, &groups);
            // Kube-OVN names a policy's ACLs (after its port group) only when they log; an
            // unnamed one is named by the port group it matches on.
            let label = who
                .acl
                .as_ref()
                .and_then(|a| a.name.clone())
                .or_else(|| name.clone())
                .map(|n| format!("ACL {n}"))
                .or_else(|| {
                    let m = who.acl.as_ref().map_or(&flow.r#match, |a| &a.r#match);
                    verdict::port_groups_in(m)
                        .first()
                        .map(|g| format!("ACL on port group {g}"))
                })
                .unwrap_or_else(|| "an unnamed ACL".into());
            let detail = who.acl.as_ref().map_or_else(
                || format!("logical flow {} at priority {:?}", flow.r#match, flow.priority),
                |a| format!("{} priority {}: {}", a.direction, a.priority, a.r#match),
            );
            let policy = who
                .policy
                .map_or_else(String::new, |p| format!(" of NetworkPolicy {p}"));
            format!(
                "OVN {}s the packet: {label} ({detail}){policy}, in stage {}",
                if action == "reject" { "reject" } else { "drop" },
                flow.stage
            )
        }
        OvnVerdict::Unknown(last) => format!(
            "OVN's trace ends without delivering or dropping the packet (last flow: {})",
            last.as_ref()
                .map_or("none".into(), |f| format!("{} {}", f.stage, f.r#match))
        ),
    })
}

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let req = request::parse(&args.args)?;
    let object = match &req.source {
        Source::Pod { namespace, name } => kubectl::json(&["get", "pod", "-n", namespace, name])?,
        Source::Node(name) => kubectl::json(&["get", "node", name])?,
    };
    let ep = endpoint(&req.source, &object, req.dst)?;
    let (ep, notes) = recorded::corrected(ep.clone(), &recorded_port(&ep)?, req.dst)?;
    for note in notes {
        println!("Note: {note}");
    }
    let packet = Packet {
        inport: ep.port.clone(),
        src_mac: ep.mac.clone(),
        dst_mac: destination_mac(&req, &ep)?,
        src: ep.src,
        dst: req.dst,
        protocol: req.protocol,
    };
    println!(
        "Tracing from {} (port {} on switch {}, node {}): {} {} → {} {}",
        ep.what, ep.port, ep.switch, ep.node, packet.src, packet.src_mac, packet.dst, packet.dst_mac
    );

    let microflow = request::ovn_microflow(&packet);
    let sb = format!("--db={}", access::SB_SOCKET);
    let mut cmd = vec!["ovn-trace", sb.as_str()];
    if !matches!(req.protocol, Protocol::ArpRequest | Protocol::ArpReply) {
        // Conntrack answers "new" at each of the pipeline's ct passes, as Kube-OVN's trace does.
        cmd.extend(["--ct=new"; 4]);
    }
    cmd.extend([ep.switch.as_str(), microflow.as_str()]);
    println!("\n+ {}", cmd.join(" "));
    let ovn_trace = access::central(&cmd)?;
    println!("{ovn_trace}");
    let ovn_verdict = verdict::ovn_verdict(&ovn_trace);
    let mut ovn = explain(&ovn_verdict)?;
    if ovn_verdict == OvnVerdict::Delivered(vec![ep.port.clone()]) {
        // Back to where it came from: OVN answered it (ARP, ICMP echo to a router port, …).
        ovn.push_str(" (OVN answered it: the reply goes back to the source)");
    }
    println!("--------\n{ovn}\n--------");

    let ofport = access::ovs(
        &ep.node,
        &[
            "ovs-vsctl",
            "--data=bare",
            "--no-heading",
            "--columns=ofport",
            "find",
            "Interface",
            &format!("external_ids:iface-id={}", ep.port),
        ],
    )?;
    let ofport: u32 = ofport.trim().parse().with_context(|| {
        format!(
            "node {}: no OVS interface with external_ids:iface-id={} (ovs-vsctl gave {:?})",
            ep.node,
            ep.port,
            ofport.trim()
        )
    })?;
    let flow = request::ofproto_flow(&packet, ofport);
    let cmd = [
        "ovs-appctl",
        "-t",
        access::VSWITCHD_CTL,
        "ofproto/trace",
        "br-int",
        flow.as_str(),
    ];
    println!("\n+ {}", cmd.join(" "));
    let ovs_trace = access::ovs(&ep.node, &cmd)?;
    println!("{ovs_trace}");
    let mut ovs = verdict::ovs_verdict(&ovs_trace, &ep.node);
    if ovn.contains("in stage ls_out_") && ovs.contains("through a tunnel") {
        // OVN runs a switch's egress pipeline (to-lport ACLs) on the destination's chassis.
        ovs.push_str("; the egress stages, and so the drop, run on the destination's node");
    }
    println!("--------\n{ovs}\n--------");
    println!("\nVerdict:\n  {ovn}\n  {ovs}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"annotations": {
                "ovn.kubernetes.io/logical_switch": "ovn-default",
                "ovn.kubernetes.io/ip_address": "10.16.0.10,fd00:10:16::a",
                "ovn.kubernetes.io/mac_address": "00:00:00:00:00:0a",
                "ovn.kubernetes.io/cidr": "10.16.0.0/16,fd00:10:16::/112"
            }},
            "spec": {"nodeName": "node1"}
        })
    }

    fn source() -> Source {
        Source::Pod {
            namespace: "demo".into(),
            name: "a".into(),
        }
    }

    #[test]
    fn a_pods_endpoint_comes_from_its_annotations() {
        let ep = endpoint(&source(), &pod(), "10.17.0.5".parse().unwrap()).unwrap();
        assert_eq!(ep.port, "a.demo");
        assert_eq!(ep.node, "node1");
        assert_eq!(ep.switch, "ovn-default");
        assert_eq!(ep.src, "10.16.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(ep.router, None);
        let ep6 = endpoint(&source(), &pod(), "fd00::1".parse().unwrap()).unwrap();
        assert_eq!(ep6.src, "fd00:10:16::a".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn what_is_missing_is_named() {
        let mut p = pod();
        p["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("ovn.kubernetes.io/mac_address");
        let e = endpoint(&source(), &p, "10.17.0.5".parse().unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("pod demo/a: annotation ovn.kubernetes.io/mac_address is missing"),
            "{e}"
        );
        let mut p = pod();
        p["spec"]["hostNetwork"] = json!(true);
        let e = endpoint(&source(), &p, "10.17.0.5".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("host's network"), "{e}");
        let node = json!({"metadata": {"annotations": {"ovn.kubernetes.io/ip_address": "100.64.0.2"}}});
        let e = endpoint(&Source::Node("n1".into()), &node, "10.16.0.5".parse().unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("node n1 has no annotation ovn.kubernetes.io/port_name"),
            "{e}"
        );
        let e = endpoint(
            &source(),
            &json!({"metadata": {"annotations": {
            "ovn.kubernetes.io/ip_address": "10.16.0.10"}}, "spec": {"nodeName": "n"}}),
            "fd00::1".parse().unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("has no IPv6 address"), "{e}");
    }
}
