//! BGP advertisement policy in the lab (`examples/lab/60-bgp-policy.yaml`), on a lab that is up,
//! as a user sees it: the matrix's rows (the community at the ToR, the `Local` Service's next
//! hops and `/clientip`), the same by hand with `birdc`, `ip route` and `curl`, and the route
//! following the endpoint to another node.

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use super::{Lab, WAIT};

const LOCAL_IP: &str = "203.0.113.10";

/// The node of `demo/local`'s pod.
fn endpoint_node(lab: &Lab) -> Result<String> {
    Ok(lab
        .ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "pods",
            "-l",
            "app=local",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ])?
        .trim()
        .to_owned())
}

/// The ToR's kernel route to the Local Service is through `node`'s fabric address only, and the
/// outside host is answered at its `/clientip` with its own address.
fn routed_through(lab: &Lab, node: &str) -> Result<bool> {
    let via = format!("172.30.0.{}", 10 + node.trim_start_matches("node").parse::<u8>()?);
    let route = lab.ok(&["tor", "--", "ip", "route", "show", LOCAL_IP])?;
    let hops: Vec<&str> = route
        .split_whitespace()
        .zip(route.split_whitespace().skip(1))
        .filter(|(w, _)| *w == "via")
        .map(|(_, h)| h)
        .collect();
    if hops != [via.as_str()] {
        return Ok(false);
    }
    let url = format!("http://{LOCAL_IP}/clientip");
    let seen = lab.run(&["outside", "--", "curl", "-s", "-m", "2", &url])?;
    Ok(seen.status.success() && String::from_utf8_lossy(&seen.stdout).starts_with("198.51.100.10:"))
}

/// `report`: up's output, on a BIRD lab with `nodes`.
pub fn the_tagged_local_service_works(lab: &Lab, report: &str, nodes: &[&str]) -> Result<()> {
    for want in [
        format!("svc demo/local at {LOCAL_IP}: communities 65000:100: ok"),
        format!("svc demo/local at {LOCAL_IP}: next hops only the endpoints' nodes "),
        format!("svc demo/local at {LOCAL_IP}:80: ok"),
    ] {
        ensure!(
            report.contains(&want),
            "up's matrix (printed above) lacks {want:?}"
        );
    }
    let all = lab.ok(&["tor", "--", "birdc", "show", "route", "for", LOCAL_IP, "all"])?;
    ensure!(
        all.contains("BGP.community: (65000,100)"),
        "the ToR sees the advertisement's community on {LOCAL_IP}:\n{all}"
    );
    let here = endpoint_node(lab)?;
    ensure!(
        routed_through(lab, &here)?,
        "the ToR routes {LOCAL_IP} through {here} only, and the outside host is seen as itself"
    );
    // The endpoint moves (the Deployment pinned to another node): so does the route.
    let there = *nodes.iter().find(|n| **n != here).context("a second node")?;
    let patch = format!(
        r#"{{"spec":{{"template":{{"spec":{{"nodeSelector":{{"kubernetes.io/hostname":"{there}"}}}}}}}}}}"#
    );
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "patch",
        "deployment",
        "local",
        "-p",
        &patch,
    ])?;
    wait_until(
        &format!("the ToR to route {LOCAL_IP} through {there} only, the outside host answered as itself"),
        WAIT,
        || Ok(endpoint_node(lab)? == there && routed_through(lab, there)?),
    )?;
    Ok(())
}
