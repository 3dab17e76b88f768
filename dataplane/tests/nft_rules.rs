//! nftables, policy rules and ICMP echo in network namespaces this test creates (needs root,
//! iproute2 and nftables; fails, never skips, without them).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube_ovn_dataplane::nft::{self, ElementUpdate, NftFamily, NftNetlink};
use kube_ovn_dataplane::{Netlink, PolicyRule, TableRoute, ping};
// The test namespaces are testkit's (named, `lo` up, deleted on drop).
use kube_ovn_testkit::Netns as TestNs;
use kube_ovn_testkit::netns::veth_pair;

const SCRIPT: &str = "table ip t1
delete table ip t1
table ip t1 {
	set s {
		type ipv4_addr
		flags interval
		elements = { 10.16.0.0/24, 10.16.1.0/24, 10.16.2.0/24 }
	}
	map m {
		type ipv4_addr : ipv4_addr
		flags interval
		elements = { 10.20.0.0/16 : 172.30.0.50 }
	}
	chain post {
		type nat hook postrouting priority srcnat - 1; policy accept;
		ip saddr @s masquerade fully-random
		snat to ip saddr map @m
	}
}
";

fn set_elements(ns: &TestNs, set: &str) -> Result<String> {
    let kind = if set == "m" { "map" } else { "set" };
    let out = ns.exec(&["nft", "list", kind, "ip", "t1", set])?;
    // nft wraps long element lists: join the lines, collapse the spacing.
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat.find("elements = {").unwrap_or(flat.len());
    let end = flat[start..].find('}').map_or(flat.len(), |e| start + e + 1);
    Ok(flat[start..end].to_owned())
}

#[tokio::test]
async fn tables_are_replaced_whole_elements_change_over_netlink_and_foreign_tables_stay() -> Result<()> {
    let t = TestNs::create("dpna")?;
    let ns = t.handle()?;
    t.exec(&["nft", "add table inet foreign; add chain inet foreign c { type filter hook forward priority 0; }; add rule inet foreign c counter accept"])?;
    let nl = NftNetlink::open(&ns).await?;
    let g0 = nl.generation().await?;
    nft::apply_script(&ns, SCRIPT.into()).await?;
    let first = nft::list_table_json(&ns, NftFamily::Ipv4, "t1")
        .await?
        .context("t1 listed")?;
    assert!(nl.generation().await? != g0, "a commit moves the generation");
    let g1 = nl.generation().await?;
    assert_eq!(nl.generation().await?, g1, "nothing changed, nothing moved");
    // The same script again: the same table, handles aside.
    nft::apply_script(&ns, SCRIPT.into()).await?;
    let strip = |s: &str| regex_lite_strip_handles(s);
    let again = nft::list_table_json(&ns, NftFamily::Ipv4, "t1").await?.unwrap();
    assert_eq!(strip(&again), strip(&first));
    ensure!(
        t.exec(&["nft", "list", "table", "inet", "foreign"])?
            .contains("counter"),
        "the foreign table survives"
    );

    // Elements: remove the middle one of three adjacent prefixes, add one, move a map value.
    let updates = vec![
        ElementUpdate {
            family: NftFamily::Ipv4,
            table: "t1".into(),
            set: "s".into(),
            delete: vec![("10.16.1.0/24".parse()?, None)],
            add: vec![("10.200.0.0/16".parse()?, None), ("192.0.2.7/32".parse()?, None)],
        },
        ElementUpdate {
            family: NftFamily::Ipv4,
            table: "t1".into(),
            set: "m".into(),
            delete: vec![("10.20.0.0/16".parse()?, Some("172.30.0.50".parse()?))],
            add: vec![("10.20.0.0/16".parse()?, Some("172.30.0.51".parse()?))],
        },
    ];
    nl.update_elements(updates).await?;
    assert_eq!(
        set_elements(&t, "s")?,
        "elements = { 10.16.0.0/24, 10.16.2.0/24, 10.200.0.0/16, 192.0.2.7 }"
    );
    assert_eq!(
        set_elements(&t, "m")?,
        "elements = { 10.20.0.0/16 : 172.30.0.51 }"
    );

    // A batch with one impossible change applies nothing.
    let before = nft::list_table_json(&ns, NftFamily::Ipv4, "t1").await?.unwrap();
    let bad = vec![
        ElementUpdate {
            family: NftFamily::Ipv4,
            table: "t1".into(),
            set: "s".into(),
            delete: vec![],
            add: vec![("10.99.0.0/16".parse()?, None)],
        },
        ElementUpdate {
            family: NftFamily::Ipv4,
            table: "t1".into(),
            set: "s".into(),
            delete: vec![("10.77.0.0/16".parse()?, None)],
            add: vec![],
        },
    ];
    let err = nl
        .update_elements(bad)
        .await
        .expect_err("deleting a missing element fails");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(
        strip(&nft::list_table_json(&ns, NftFamily::Ipv4, "t1").await?.unwrap()),
        strip(&before)
    );

    // A refused script names what nft disliked and leaves the table as it was.
    let err = nft::apply_script(
        &ns,
        "table ip t1 {\n\tchain c {\n\t\tip saddr @nosuchset accept\n\t}\n}\n".into(),
    )
    .await
    .expect_err("a rule naming a missing set is refused");
    assert!(err.to_string().contains("nosuchset"), "{err}");
    assert_eq!(
        strip(&nft::list_table_json(&ns, NftFamily::Ipv4, "t1").await?.unwrap()),
        strip(&before)
    );
    assert_eq!(nft::list_table_json(&ns, NftFamily::Ipv6, "t1").await?, None);
    Ok(())
}

/// `"handle": N` out of a JSON listing.
fn regex_lite_strip_handles(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find("\"handle\": ") {
        out.push_str(&rest[..at]);
        rest = rest[at + 10..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn policy_rules_and_table_routes_are_ours_alone_and_ping_uses_the_device() -> Result<()> {
    let a = TestNs::create("dpnr")?;
    let b = TestNs::create("dpns")?;
    veth_pair(a.name(), "va", b.name(), "vb", 1500)?;
    a.exec(&["ip", "addr", "add", "172.31.0.1/24", "dev", "va"])?;
    a.exec(&["ip", "link", "set", "va", "up"])?;
    a.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
    b.exec(&["ip", "addr", "add", "172.31.0.254/24", "dev", "vb"])?;
    b.exec(&["ip", "link", "set", "vb", "up"])?;
    // Someone else's rule, which must survive.
    a.exec(&[
        "ip",
        "rule",
        "add",
        "from",
        "10.99.0.0/16",
        "lookup",
        "99",
        "priority",
        "99",
    ])?;
    let ns = a.handle()?;
    let nl = Netlink::connect_async(&ns).await?;
    let rule = PolicyRule {
        priority: 1000,
        src: "10.22.0.5/32".parse()?,
        table: 1000,
        fwmark: None,
    };
    let route = TableRoute {
        table: 1000,
        gateway: "172.31.0.254".parse()?,
    };
    nl.replace_table_route(&route).await?;
    nl.add_policy_rule(&rule).await?;
    nl.add_policy_rule(&rule).await?;
    assert_eq!(nl.policy_rules(false).await?, vec![rule.clone()]);
    assert_eq!(nl.table_routes(false).await?, vec![route.clone()]);
    let shown = a.exec(&[
        "ip",
        "route",
        "get",
        "198.51.100.1",
        "from",
        "10.22.0.5",
        "iif",
        "va",
    ])?;
    assert!(
        shown.contains("via 172.31.0.254") && shown.contains("table 1000"),
        "{shown}"
    );
    // `from all fwmark 0x400000/0x400000`: the kernel takes it, lists it back as ours, and
    // routes a marked packet by it.
    let marked = PolicyRule {
        priority: 150,
        src: "0.0.0.0/0".parse()?,
        table: 1000,
        fwmark: Some(0x40_0000),
    };
    nl.add_policy_rule(&marked).await?;
    let listed = a.exec(&["ip", "rule"])?;
    assert!(
        listed.contains("150:\tfrom all fwmark 0x400000/0x400000 lookup 1000 proto 150"),
        "{listed}"
    );
    assert_eq!(nl.policy_rules(false).await?, vec![marked.clone(), rule.clone()]);
    let shown = a.exec(&["ip", "route", "get", "198.51.100.1", "mark", "0x400000"])?;
    assert!(shown.contains("via 172.31.0.254"), "{shown}");
    assert!(nl.delete_policy_rule(&marked).await?);
    assert!(nl.delete_policy_rule(&rule).await?);
    assert!(!nl.delete_policy_rule(&rule).await?);
    assert!(nl.delete_table_route(&route).await?);
    assert!(nl.policy_rules(false).await?.is_empty() && nl.table_routes(false).await?.is_empty());
    assert!(
        a.exec(&["ip", "rule"])?.contains("10.99.0.0/16"),
        "the foreign rule stays"
    );

    // Echo out of `va` is answered; out of `lo` toward the same address it is not (bound to
    // the device, it cannot take the other route).
    assert!(ping::ping(&ns, "va", "172.31.0.254".parse()?, 3, Duration::from_millis(500)).await?);
    assert!(!ping::ping(&ns, "lo", "172.31.0.254".parse()?, 1, Duration::from_millis(200)).await?);
    b.exec(&["nft", "add table ip f; add chain ip f i { type filter hook input priority 0; }; add rule ip f i icmp type echo-request drop"])?;
    assert!(!ping::ping(&ns, "va", "172.31.0.254".parse()?, 2, Duration::from_millis(200)).await?);
    assert!(
        ping::ping(
            &ns,
            "nosuchdev",
            "172.31.0.254".parse()?,
            1,
            Duration::from_millis(100)
        )
        .await
        .is_err()
    );
    Ok(())
}
