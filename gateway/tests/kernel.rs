//! The planner's output against the kernel (root, nftables): every golden ruleset, IPv6 table
//! included, is accepted by nft, lists back with the planned elements, and element updates of
//! both families reach the same state a rebuild would.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use kube_ovn_api::crd::Subnet;
use kube_ovn_dataplane::nft::{self, ElementUpdate, NftFamily, NftNetlink};
use kube_ovn_gateway::listing::parse_listing;
use kube_ovn_gateway::{Family, GatewayInput, LastGood, NodeFacts, Ruleset, TABLE, plan};
use kube_ovn_testkit::Netns;

fn family(f: Family) -> NftFamily {
    match f {
        Family::V4 => NftFamily::Ipv4,
        Family::V6 => NftFamily::Ipv6,
    }
}

/// The kernel holds exactly `ruleset` (elements compared; the shapes of two listings compared
/// by the caller).
async fn holds(ns: &kube_ovn_dataplane::Netns, ruleset: &Ruleset) -> Result<BTreeMap<Family, String>> {
    let mut shapes = BTreeMap::new();
    for (f, table) in &ruleset.tables {
        let json = nft::list_table_json(ns, family(*f), TABLE)
            .await?
            .context("our table")?;
        let listing = parse_listing(&json)?;
        ensure!(
            listing.elements_match(table),
            "{f:?}: listed {:?}",
            listing.elements
        );
        shapes.insert(*f, listing.shape);
    }
    Ok(shapes)
}

#[tokio::test]
async fn golden_rulesets_apply_and_element_updates_equal_a_rebuild() -> Result<()> {
    let netns = Netns::create("gwk")?;
    let ns = kube_ovn_dataplane::Netns::open(netns.path())?;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for golden in ["node1.nft", "node2.nft"] {
        let script = std::fs::read_to_string(dir.join(golden))?;
        nft::apply_script(&ns, script.clone())
            .await
            .with_context(|| golden.to_owned())?;
        let first = netns.exec(&["nft", "list", "ruleset"])?;
        nft::apply_script(&ns, script).await?;
        assert_eq!(
            netns.exec(&["nft", "list", "ruleset"])?,
            first,
            "{golden}: re-applied identically"
        );
        assert!(first.contains("table ip6 kube-ovn"), "{golden}");
    }

    // A dual-stack cluster before and after a change of subnets in both families.
    let subnet = |name: &str, cidr: &str| -> Arc<Subnet> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name, "uid": "0"},
                "spec": {"cidrBlock": cidr, "natOutgoing": true},
                "status": {"conditions": [{"type": "Validated", "status": "True"}]},
            }))
            .expect("a subnet"),
        )
    };
    let labels = BTreeMap::new();
    let ruleset = |subnets: &[Arc<Subnet>]| {
        plan(
            &GatewayInput {
                node: NodeFacts {
                    name: "n1",
                    labels: &labels,
                    internal_ips: (None, None),
                },
                subnets,
                cluster_router: "ovn-cluster",
                join_cidrs: &[],
                service_cidrs: &[
                    "10.96.0.0/12".parse().unwrap(),
                    "fd00:10:96::/108".parse().unwrap(),
                ],
                other_node_ips: &[],
                local_pods: &[],
                lb_ingress: &[],
                lb_local: &[],
                join_gateways: &[],
            },
            &LastGood::default(),
        )
        .plan
        .ruleset
    };
    let before = ruleset(&[
        subnet("a", "10.16.0.0/16,fd00:16::/64"),
        subnet("b", "10.17.0.0/16,fd00:17::/64"),
    ]);
    let after = ruleset(&[
        subnet("a", "10.16.0.0/16,fd00:16::/64"),
        subnet("c", "10.18.0.0/16,fd00:18::/64"),
    ]);
    nft::apply_script(&ns, before.script()).await?;
    let shapes = holds(&ns, &before).await?;
    let updates: Vec<ElementUpdate> = after
        .updates_from(&before)
        .context("only elements change")?
        .into_iter()
        .map(|u| ElementUpdate {
            family: family(u.family),
            table: TABLE.into(),
            set: u.set,
            delete: u.delete,
            add: u.add,
        })
        .collect();
    ensure!(
        updates.iter().any(|u| u.family == NftFamily::Ipv6),
        "an IPv6 update too"
    );
    NftNetlink::open(&ns).await?.update_elements(updates).await?;
    assert_eq!(
        holds(&ns, &after).await?,
        shapes,
        "same chains and rules, new elements"
    );
    // A rebuild from the new plan lists the same.
    nft::apply_script(&ns, after.script()).await?;
    assert_eq!(holds(&ns, &after).await?, shapes);
    Ok(())
}
