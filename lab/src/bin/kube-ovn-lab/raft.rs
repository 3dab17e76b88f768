//! `up --install manifests --ovn-central-replicas 3` (or 5): `ovn-central` as an OVN RAFT
//! cluster, set up as an administrator sets up Kube-OVN's (its install.sh with several master
//! nodes): the first nodes labelled kube-ovn/role=master, the `ovn-central` Deployment's
//! replicas and kube-ovn-config's `ovn-central-ips` set to them. `deploy/base` stays as it is:
//! the lab writes a kustomization of its own on top of the overlay it installs. The controller
//! and the node daemons then reach the databases through every member (their `--ovn-db-ips`
//! is that key), `start-ovn-central.sh` creates the clusters on the first address and joins the
//! others to it; `up` waits until both databases have a leader and every member.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use kube_ovn_lab::cluster::topology::{NodePlan, Topology};
use kube_ovn_lab::cluster::wait::{nothing_missing, wait_for};

/// How often each member's kube-ovn-monitor reads the cluster's status in a RAFT lab (its
/// `--ovs.poll-interval`, 30 s by default as Kube-OVN's): a leader change shows in the
/// metrics within seconds rather than half a minute.
const MONITOR_POLL_SECONDS: u32 = 5;

/// `--ovn-central-replicas`: 1, 3 or 5 (a RAFT cluster needs an odd size to keep a majority).
pub fn parse_replicas(text: &str) -> Result<usize, String> {
    match text.trim() {
        "1" => Ok(1),
        "3" => Ok(3),
        "5" => Ok(5),
        other => Err(format!(
            "{other:?}: 1 (one database server), or 3 or 5 (an OVN RAFT cluster)"
        )),
    }
}

/// Whether the lab can hold `replicas` members: one per node (host networking, the same
/// ports), and only the manifests install runs `ovn-central` as pods.
pub fn check(nodes: usize, replicas: usize, manifests: bool) -> Result<(), String> {
    if replicas == 1 {
        return Ok(());
    }
    if !manifests {
        return Err(format!(
            "--ovn-central-replicas {replicas}: only with --install manifests (the process mode runs one OVN NB/SB in the control plane's namespace)"
        ));
    }
    if nodes < replicas {
        return Err(format!(
            "--ovn-central-replicas {replicas} needs at least {replicas} nodes, one member each (--nodes {nodes})"
        ));
    }
    Ok(())
}

/// The nodes that run a member: the first `replicas`.
pub fn members(t: &Topology, replicas: usize) -> &[NodePlan] {
    &t.nodes[..replicas.min(t.nodes.len())]
}

/// The kustomization that installs `base` (a path relative to it) with `replicas` members at
/// `ips`.
pub fn kustomization(base: &str, ips: &[Ipv4Addr], replicas: usize) -> String {
    let ips = ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let mut text = String::new();
    let _ = write!(
        text,
        "# Written by `kube-ovn-lab up --ovn-central-replicas {replicas}`: the overlay below as an OVN RAFT
# cluster of {replicas} members, one per node labelled kube-ovn/role=master.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {base}
patches:
  - patch: |-
      apiVersion: v1
      kind: ConfigMap
      metadata: {{name: kube-ovn-config, namespace: kube-system}}
      data:
        ovn-central-ips: \"{ips}\"
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: ovn-central, namespace: kube-system}}
      spec:
        replicas: {replicas}
        template:
          spec:
            containers:
              - name: kube-ovn-monitor
                env:
                  - {{name: OVS_POLL_INTERVAL, value: \"{MONITOR_POLL_SECONDS}\"}}
"
    );
    text
}

/// `target` as seen from `dir` (both absolute): kustomize takes a directory outside the
/// kustomization's own as a relative path (`../../base`).
pub fn relative(dir: &Path, target: &Path) -> PathBuf {
    let ups = dir
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut path = PathBuf::new();
    for _ in 0..ups {
        path.push("..");
    }
    path.join(target.strip_prefix("/").unwrap_or(target))
}

/// Writes the RAFT kustomization over `manifests` into the lab's directory; its directory, for
/// `kubectl apply -k`.
pub fn write_overlay(t: &Topology, manifests: &Path, replicas: usize) -> anyhow::Result<PathBuf> {
    let dir = t.dir.join("ovn-central-raft");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let manifests =
        std::fs::canonicalize(manifests).with_context(|| format!("--manifests {}", manifests.display()))?;
    let dir_abs = std::fs::canonicalize(&dir)?;
    let ips: Vec<Ipv4Addr> = members(t, replicas).iter().map(|n| n.ip).collect();
    let text = kustomization(&relative(&dir_abs, &manifests).to_string_lossy(), &ips, replicas);
    let file = dir.join("kustomization.yaml");
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    Ok(dir)
}

/// What one member's `cluster/status` says: its role and how many servers it lists.
pub fn role_and_servers(text: &str) -> Option<(String, usize)> {
    let role = text
        .lines()
        .find_map(|l| l.strip_prefix("Role:"))?
        .trim()
        .to_owned();
    let servers = text
        .lines()
        .skip_while(|l| !l.starts_with("Servers:"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter(|l| l.contains(" at "))
        .count();
    Some((role, servers))
}

/// Until the northbound and the southbound cluster each have one leader and every member lists
/// all `replicas` servers (from their control sockets in the members' machines). A summary.
pub async fn wait_leaders(t: &Topology, replicas: usize, timeout: Duration) -> anyhow::Result<String> {
    let members = members(t, replicas).to_vec();
    let summary = std::sync::Mutex::new(String::new());
    wait_for(
        "the OVN RAFT clusters to have a leader and every member",
        timeout,
        Duration::from_millis(500),
        || {
            let (t, members, summary) = (t.clone(), members.clone(), &summary);
            async move {
                let mut waiting = Vec::new();
                let mut leaders = Vec::new();
                for (db, ctl) in [
                    ("OVN_Northbound", "ovnnb_db.ctl"),
                    ("OVN_Southbound", "ovnsb_db.ctl"),
                ] {
                    let mut leader = Vec::new();
                    for node in &members {
                        let ctl = kube_ovn_lab::cluster::machine::host_path(&t, node, "/run/ovn").join(ctl);
                        let out = std::process::Command::new("ovs-appctl")
                            .arg("-t")
                            .arg(&ctl)
                            .args(["cluster/status", db])
                            .output()?;
                        match role_and_servers(&String::from_utf8_lossy(&out.stdout)) {
                            Some((role, servers)) if servers == replicas => {
                                if role == "leader" {
                                    leader.push(node.name.clone());
                                }
                            }
                            Some((role, servers)) => {
                                waiting.push(format!("{db} on {}: {role}, {servers} servers", node.name));
                            }
                            None => waiting.push(format!(
                                "{db} on {}: no cluster/status ({})",
                                node.name,
                                String::from_utf8_lossy(&out.stderr).trim()
                            )),
                        }
                    }
                    if leader.len() == 1 {
                        leaders.push(format!("{db} leader on {}", leader[0]));
                    } else {
                        waiting.push(format!("{db}: leaders {leader:?}"));
                    }
                }
                *summary.lock().map_err(|_| anyhow::anyhow!("poisoned"))? = leaders.join(", ");
                nothing_missing(&waiting).map_err(anyhow::Error::msg)
            }
        },
    )
    .await?;
    let summary = summary.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_one_three_or_five() {
        assert_eq!(parse_replicas("3"), Ok(3));
        assert_eq!(parse_replicas("1"), Ok(1));
        let e = parse_replicas("2").unwrap_err();
        assert!(e.contains("\"2\"") && e.contains("3 or 5"), "{e}");
    }

    #[test]
    fn a_cluster_needs_a_node_per_member_and_the_manifests_install() {
        assert!(check(2, 1, false).is_ok());
        assert!(check(3, 3, true).is_ok());
        let e = check(2, 3, true).unwrap_err();
        assert!(e.contains("at least 3 nodes") && e.contains("--nodes 2"), "{e}");
        assert!(check(3, 3, false).unwrap_err().contains("--install manifests"));
    }

    #[test]
    fn the_kustomization_sets_the_members_and_the_replicas() {
        let text = kustomization(
            "../../work/deploy/overlays/lab",
            &[Ipv4Addr::new(172, 30, 0, 11), Ipv4Addr::new(172, 30, 0, 12)],
            3,
        );
        assert!(text.contains("  - ../../work/deploy/overlays/lab\n"), "{text}");
        assert!(
            text.contains("ovn-central-ips: \"172.30.0.11,172.30.0.12\""),
            "{text}"
        );
        assert!(text.contains("        replicas: 3\n"), "{text}");
        assert!(text.contains("OVS_POLL_INTERVAL"), "{text}");
    }

    #[test]
    fn relative_paths_climb_to_the_root() {
        assert_eq!(
            relative(Path::new("/tmp/lab/r/raft"), Path::new("/work/deploy")),
            PathBuf::from("../../../../work/deploy")
        );
    }

    #[test]
    fn cluster_status_gives_the_role_and_the_servers() {
        let text = "c2b1\nName: OVN_Northbound\nCluster ID: 1\nServer ID: c2b1\nAddress: tcp:172.30.0.11:6643\nStatus: cluster member\nRole: leader\nTerm: 2\nLeader: self\nVote: self\n\nLog: [2, 10]\nServers:\n    c2b1 (c2b1 at tcp:172.30.0.11:6643) (self) next_index=3 match_index=9\n    0a11 (0a11 at tcp:172.30.0.12:6643) next_index=10 match_index=9\n    0b22 (0b22 at tcp:172.30.0.13:6643) next_index=10 match_index=9\n";
        assert_eq!(role_and_servers(text), Some(("leader".to_owned(), 3)));
        assert_eq!(role_and_servers("no such command"), None);
    }
}
