//! NetworkPolicy benchmark: P policies over N pods (20 namespaces of N/20 pods; every policy
//! selects a tenth of its namespace's pods, allows ingress from pods of the namespaces of one
//! `team` on a named port and a port range, and egress to a CIDR with an `except`).
//!
//! 1. *From start*: the pods are created and routed, the policies created while the controller
//!    is stopped; then the controller process starts, and the time runs until the northbound DB
//!    holds exactly what the planner says the policies need (port groups with their ports, address
//!    sets with their addresses, ACLs).
//! 2. *Namespace relabel*: one namespace changes `team`; the time until every address set holds
//!    what the planner says for the new labels.
//! 3. The ceiling: the same port groups, address sets and ACLs created by `ovn-nbctl` commands
//!    chained with `--` on a fresh NB holding the same ports (split into runs whose arguments stay
//!    under the kernel's limit; their times summed).
//! 4. Rows written (NB, with the policies' `np` ids) against rows planned, and the address sets
//!    Kube-OVN's scheme would add (an `except` set per rule, direction and family).
//!
//! Run: `cargo bench -p kube-ovn-controller --bench np_bench -- 2000 500`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_ovn_controller::reconcile::network_policy::plan::{Families, PolicyRows, World, plan_policy};
use kube_ovn_testkit::OvnCentral;
use serde_json::json;
use support::{Controller, until};

const NAMESPACES: usize = 20;

/// What the northbound DB holds of the policies: port group → ports, address set → addresses,
/// and the number of their ACLs.
#[derive(Debug, Default, PartialEq, Eq)]
struct Held {
    groups: BTreeMap<String, usize>,
    sets: BTreeMap<String, BTreeSet<String>>,
    acls: usize,
}

fn held(ovn: &OvnCentral) -> Held {
    let rows = |table: &str, columns: &str| -> Vec<Vec<String>> {
        let out = ovn
            .nbctl(&[
                "--format=csv",
                "--data=bare",
                "--no-headings",
                &format!("--columns={columns}"),
                "list",
                table,
            ])
            .unwrap();
        out.lines()
            .map(|l| l.split(',').map(|f| f.trim_matches('"').to_owned()).collect())
            .collect()
    };
    let mut h = Held::default();
    for r in rows("Port_Group", "name,ports,external_ids") {
        if r[2].contains("np=") && !r[2].contains("node=") {
            h.groups.insert(r[0].clone(), r[1].split_whitespace().count());
        }
    }
    for r in rows("Address_Set", "name,addresses,external_ids") {
        if r[2].contains("np=") {
            h.sets
                .insert(r[0].clone(), r[1].split_whitespace().map(str::to_owned).collect());
        }
    }
    h.acls = rows("ACL", "external_ids")
        .iter()
        .filter(|r| r[0].contains("np="))
        .count();
    h
}

/// The pods' addresses as the controller annotated them (equal to their ports' here, where no pod
/// forges anything; the controller itself reads the ports).
fn annotated(p: &Pod) -> Vec<std::net::IpAddr> {
    p.annotations()
        .get("ovn.kubernetes.io/ip_address")
        .map(|s| s.split(',').filter_map(|a| a.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn planned(
    policies: &[Arc<NetworkPolicy>],
    pods: &[Arc<Pod>],
    nss: &[Arc<Namespace>],
) -> (Held, Vec<PolicyRows>) {
    let v4 = Families { v4: true, v6: false };
    let rows: Vec<PolicyRows> = policies
        .iter()
        .map(|p| {
            let world = World {
                pods,
                namespaces: nss,
                policies,
                addresses: &annotated,
                families: v4,
            };
            plan_policy(p, &world, false).unwrap()
        })
        .collect();
    let mut h = Held::default();
    for r in &rows {
        h.groups.insert(r.port_group.clone(), r.ports.len());
        for s in &r.address_sets {
            h.sets.insert(s.name.clone(), s.addresses.clone());
        }
        h.acls += r.acls.len();
    }
    (h, rows)
}

fn policy(ns: usize, k: usize) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": format!("np-{k}"), "namespace": format!("ns-{ns}")},
        "spec": {
            "podSelector": {"matchLabels": {"app": format!("a{}", k % 10)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{"namespaceSelector": {"matchLabels": {"team": format!("t{}", k % 5)}},
                          "podSelector": {"matchLabels": {"app": format!("a{}", (k + 1) % 10)}}}],
                "ports": [{"port": "http"}, {"port": 8000, "endPort": 8100}]
            }],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]
        }
    }))
    .unwrap()
}

async fn list<K>(api: &Api<K>) -> Vec<Arc<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(Arc::new)
        .collect()
}

/// The ceiling: the planned rows by chained `ovn-nbctl` runs on a fresh NB that holds the ports.
fn nbctl_ceiling(rows: &[PolicyRows], ports: &BTreeSet<String>) -> Duration {
    let ovn = OvnCentral::start().unwrap();
    let db = format!("--db={}", ovn.nb_remote());
    let mut setup = vec![db.clone(), "ls-add".into(), "bench".into()];
    for p in ports {
        setup.extend(["--".into(), "lsp-add".into(), "bench".into(), p.clone()]);
    }
    let out = Command::new("ovn-nbctl").args(&setup).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut commands: Vec<Vec<String>> = Vec::new();
    for r in rows {
        let mut pg = vec!["pg-add".to_owned(), r.port_group.clone()];
        pg.extend(r.ports.iter().cloned());
        commands.push(pg);
        for s in &r.address_sets {
            let list: Vec<String> = s.addresses.iter().map(|a| format!("\"{a}\"")).collect();
            commands.push(vec![
                "create".into(),
                "Address_Set".into(),
                format!("name={}", s.name),
                format!("addresses=[{}]", list.join(",")),
            ]);
        }
        for a in &r.acls {
            if a.options.contains_key("apply-after-lb") {
                // ovn-nbctl 23.03's acl-add has no --apply-after-lb: the ACL by `create`, then
                // added to the group, in the same run (one command for the splitting below).
                let id = format!("@a{}", commands.len());
                commands.push(vec![
                    format!("--id={id}"),
                    "create".into(),
                    "ACL".into(),
                    format!("direction={}", a.direction),
                    format!("priority={}", a.priority),
                    format!("match=\"{}\"", a.r#match),
                    format!("action={}", a.action),
                    "options:apply-after-lb=true".into(),
                    "--".into(),
                    "add".into(),
                    "Port_Group".into(),
                    r.port_group.clone(),
                    "acls".into(),
                    id,
                ]);
            } else {
                commands.push(vec![
                    "acl-add".into(),
                    r.port_group.clone(),
                    a.direction.clone(),
                    a.priority.to_string(),
                    a.r#match.clone(),
                    a.action.clone(),
                ]);
            }
        }
    }
    let mut total = Duration::ZERO;
    let mut run: Vec<String> = vec![db.clone()];
    let mut size = 0;
    let flush = |run: &mut Vec<String>, total: &mut Duration| {
        if run.len() > 1 {
            let start = Instant::now();
            let out = Command::new("ovn-nbctl").args(&*run).output().unwrap();
            *total += start.elapsed();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        *run = vec![db.clone()];
    };
    for c in commands {
        let len: usize = c.iter().map(|a| a.len() + 1).sum();
        // Well under ARG_MAX (2 MiB on Linux, with the environment).
        if size + len > 1_000_000 {
            flush(&mut run, &mut total);
            size = 0;
        }
        if run.len() > 1 {
            run.push("--".into());
        }
        run.extend(c);
        size += len;
    }
    flush(&mut run, &mut total);
    total
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n_pods, n_policies) = (
        args.first().copied().unwrap_or(2000),
        args.get(1).copied().unwrap_or(500),
    );
    let dir = tempfile::tempdir().unwrap();
    let (api, ovn, controller) = support::start_with_one_node(dir.path()).await;
    let kube = api.kube.clone();
    let ns_api: Api<Namespace> = Api::all(kube.clone());
    for i in 0..NAMESPACES {
        let ns = serde_json::from_value(json!({"metadata": {"name": format!("ns-{i}"),
            "labels": {"team": format!("t{}", i % 5)}}}))
        .unwrap();
        ns_api.create(&PostParams::default(), &ns).await.unwrap();
    }
    futures::stream::iter(0..n_pods)
        .map(|i| {
            let kube = kube.clone();
            async move {
                let ns = format!("ns-{}", i % NAMESPACES);
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("pod-{i}"), "labels": {"app": format!("a{}", (i / NAMESPACES) % 10)}},
                    "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x",
                        "ports": [{"name": "http", "containerPort": 8080}]}]}}))
                .unwrap();
                Api::<Pod>::namespaced(kube, &ns)
                    .create(&PostParams::default(), &pod)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    let pods_api: Api<Pod> = Api::all(kube.clone());
    until("every pod routed", || {
        let api = pods_api.clone();
        async move {
            let pods = list(&api).await;
            pods.iter()
                .filter(|p| {
                    p.annotations()
                        .get("ovn.kubernetes.io/routed")
                        .is_some_and(|v| v == "true")
                })
                .count()
                == n_pods
        }
    })
    .await;
    // Policies made while no controller runs: the start is the whole convergence.
    drop(controller);
    for k in 0..n_policies {
        let ns = k % NAMESPACES;
        Api::<NetworkPolicy>::namespaced(kube.clone(), &format!("ns-{ns}"))
            .create(&PostParams::default(), &policy(ns, k))
            .await
            .unwrap();
    }
    let np_api: Api<NetworkPolicy> = Api::all(kube.clone());
    let (pods, policies) = (list(&pods_api).await, list(&np_api).await);
    let (want, rows) = planned(&policies, &pods, &list(&ns_api).await);
    let start = Instant::now();
    let controller = Controller::start(dir.path(), &api, &ovn, 2);
    until("the policies' rows in NB", || {
        std::future::ready(held(&ovn) == want)
    })
    .await;
    let from_start = start.elapsed();
    eprintln!("from start: {from_start:?}");

    // One namespace changes team: the address sets selecting either team follow.
    let start = Instant::now();
    ns_api
        .patch(
            "ns-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "t4"}}})),
        )
        .await
        .unwrap();
    let (after, _) = planned(&policies, &pods, &list(&ns_api).await);
    until("the address sets after the relabel", || {
        std::future::ready(held(&ovn) == after)
    })
    .await;
    let relabel = start.elapsed();
    eprintln!("namespace relabel: {relabel:?}");
    let transactions = controller
        .metric("kube_ovn_controller_ovsdb_transaction_duration_seconds_count", "")
        .await;
    drop(controller);

    let ports: BTreeSet<String> = rows.iter().flat_map(|r| r.ports.iter().cloned()).collect();
    let rows_for_ceiling = rows.clone();
    let ceiling = tokio::task::spawn_blocking(move || nbctl_ceiling(&rows_for_ceiling, &ports))
        .await
        .unwrap();
    let got = held(&ovn);
    let rules: usize = policies
        .iter()
        .map(|p| {
            let s = p.spec.as_ref().unwrap();
            s.ingress.as_ref().map_or(0, Vec::len) + s.egress.as_ref().map_or(0, Vec::len)
        })
        .sum();
    println!(
        "| pods | policies | from controller start | after a namespace relabel | ovn-nbctl, chained | start / ovn-nbctl | ACLs written / planned | address sets written / planned | Kube-OVN's scheme: address sets | NB transactions |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {n_pods} | {n_policies} | {:.2} s | {:.2} s | {:.2} s | {:.1} | {} / {} | {} / {} | {} | {transactions} |",
        from_start.as_secs_f64(),
        relabel.as_secs_f64(),
        ceiling.as_secs_f64(),
        from_start.as_secs_f64() / ceiling.as_secs_f64(),
        got.acls,
        after.acls,
        got.sets.len(),
        after.sets.len(),
        // Allow and except, per rule, direction and family (IPv4 here).
        2 * rules,
    );
}
