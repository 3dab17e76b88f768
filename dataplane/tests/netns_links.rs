//! Links, addresses, routes and TX offload in network namespaces this test creates (needs
//! root and iproute2; fails, never skips, without them).

use anyhow::{Context, Result};
use ipnet::IpNet;
use kube_ovn_dataplane::{Netlink, Netns, Route, VethPair, ethtool, parse_mac};
// The test namespaces are testkit's (named, `lo` up, deleted on drop).
use kube_ovn_testkit::Netns as TestNs;

#[tokio::test]
async fn veth_across_namespaces_carries_traffic_and_deletes_cleanly() -> Result<()> {
    let host = TestNs::create("dpth")?;
    let pod = TestNs::create("dptp")?;
    let host_ns = Netns::open(host.path())?;
    let pod_ns = Netns::open(pod.path())?;
    // The request goes out of the test's own namespace; each end must land in its own.
    let here = Netlink::connect(&Netns::current()?)?;
    let mac = parse_mac("0a:00:00:10:00:05").unwrap();
    let pair = VethPair {
        host: "tst_h",
        host_ns: &host_ns,
        peer: "eth0",
        peer_ns: &pod_ns,
        mtu: 1400,
        peer_mac: Some(mac),
    };
    here.add_veth(&pair).await?;
    let again = here.add_veth(&pair).await.expect_err("a second add must fail");
    assert!(again.is_exists(), "{again}");
    assert!(
        here.link("tst_h").await?.is_none(),
        "host end must not be in the test's namespace"
    );

    let in_host = Netlink::connect(&host_ns)?;
    let in_pod = Netlink::connect(&pod_ns)?;
    let h = in_host.require_link("tst_h").await?;
    let p = in_pod.require_link("eth0").await?;
    assert_eq!((h.mtu, p.mtu), (Some(1400), Some(1400)));
    assert_eq!(p.mac, Some(mac));
    assert!(!h.up && !p.up, "created down");
    in_host.configure(h.index, None, None, true).await?;
    in_pod.configure(p.index, None, None, true).await?;
    assert!(in_pod.require_link("eth0").await?.up);

    let host_ip: IpNet = "10.99.0.1/24".parse()?;
    let pod_ip: IpNet = "10.99.0.2/24".parse()?;
    in_host.add_address(h.index, host_ip).await?;
    in_pod.add_address(p.index, pod_ip).await?;
    in_pod.add_address(p.index, pod_ip).await?; // replace: idempotent
    let v4: Vec<IpNet> = in_pod
        .addresses(p.index)
        .await?
        .into_iter()
        .filter(|a| a.addr().is_ipv4())
        .collect();
    assert_eq!(v4, vec![pod_ip]);
    let v6: IpNet = "fd00:99::2/64".parse()?;
    in_pod.add_address(p.index, v6).await?;
    let lo = in_pod.require_link("lo").await?;
    in_pod.configure(lo.index, None, None, true).await?;
    let default = Route {
        dst: "0.0.0.0/0".parse()?,
        gateway: Some("10.99.0.1".parse()?),
        dev: p.index,
        src: None,
        metric: None,
    };
    in_pod.add_route(&default).await?;
    let routes = in_pod.routes(false, Some(p.index)).await?;
    assert!(routes.contains(&default), "{routes:?}");
    assert!(
        pod.exec(&["ip", "route", "show", "default"])?
            .contains("via 10.99.0.1 dev eth0")
    );
    // A source address and a metric go in and read back as given.
    let with_src = Route {
        dst: "10.98.0.0/16".parse()?,
        gateway: Some("10.99.0.1".parse()?),
        dev: p.index,
        src: Some("10.99.0.2".parse()?),
        metric: None,
    };
    let link_v6 = Route {
        dst: "fd00:98::/64".parse()?,
        gateway: None,
        dev: p.index,
        src: None,
        metric: Some(256),
    };
    in_pod.add_route(&with_src).await?;
    in_pod.add_route(&link_v6).await?;
    let v4_routes = in_pod.routes(false, Some(p.index)).await?;
    assert!(v4_routes.contains(&with_src), "{v4_routes:?}");
    assert!(in_pod.routes(true, Some(p.index)).await?.contains(&link_v6));
    let shown = pod.exec(&["ip", "route", "show", "10.98.0.0/16"])?;
    assert!(
        shown.contains("via 10.99.0.1 dev eth0") && shown.contains("src 10.99.0.2"),
        "{shown}"
    );
    let shown = pod.exec(&["ip", "-6", "route", "show", "fd00:98::/64"])?;
    assert!(
        shown.contains("dev eth0") && shown.contains("metric 256"),
        "{shown}"
    );
    // The kernel takes only a source the namespace has.
    let foreign = Route {
        src: Some("192.0.2.9".parse()?),
        ..with_src.clone()
    };
    let refused = in_pod.add_route(&foreign).await.unwrap_err();
    assert!(refused.to_string().contains("src 192.0.2.9"), "{refused}");
    // A route added by hand (protocol `boot`, not ours) still deletes.
    pod.exec(&[
        "ip",
        "route",
        "add",
        "10.97.0.0/16",
        "via",
        "10.99.0.1",
        "dev",
        "eth0",
    ])?;
    let by_hand = in_pod
        .routes(false, Some(p.index))
        .await?
        .into_iter()
        .find(|r| r.dst == "10.97.0.0/16".parse::<IpNet>().unwrap())
        .context("the route added with ip")?;
    assert!(in_pod.delete_route(&by_hand).await?);
    assert!(
        pod.exec(&["ip", "route", "show", "10.97.0.0/16"])?
            .trim()
            .is_empty()
    );
    let local = in_pod.local_addresses().await?;
    assert!(
        local.contains(&"10.99.0.2".parse()?) && local.contains(&"fd00:99::2".parse()?),
        "{local:?}"
    );

    assert!(
        ethtool::tx_checksum_enabled(&pod_ns, "eth0").await?,
        "veths start with TX checksum offload on"
    );
    ethtool::disable_tx_checksum(&pod_ns, "eth0").await?;
    assert!(!ethtool::tx_checksum_enabled(&pod_ns, "eth0").await?);
    assert!(
        pod.exec(&["ethtool", "-k", "eth0"])?
            .contains("tx-checksumming: off")
    );
    assert!(ethtool::write_net_sysctl(&pod_ns, "ipv4/conf/all/forwarding", "1").await?);
    assert_eq!(
        pod.exec(&["cat", "/proc/sys/net/ipv4/conf/all/forwarding"])?
            .trim(),
        "1"
    );
    assert!(!ethtool::write_net_sysctl(&pod_ns, "no/such/key", "1").await?);

    host.exec(&["ping", "-c1", "-W2", "10.99.0.2"])?;
    assert_eq!(
        in_pod.source_toward("10.99.0.1".parse()?).await?,
        Some("10.99.0.2".parse()?)
    );
    assert_eq!(
        in_pod.source_toward("192.0.2.1".parse()?).await?,
        Some("10.99.0.2".parse()?),
        "via the default route"
    );
    assert_eq!(
        in_host.source_toward("192.0.2.1".parse()?).await?,
        None,
        "no route there from the host side"
    );

    assert!(in_pod.delete_route(&default).await?);
    assert!(
        !in_pod.delete_route(&default).await?,
        "a second delete reports it was gone"
    );
    assert!(in_pod.delete_address(p.index, v6).await?);
    assert!(!in_pod.delete_address(p.index, v6).await?);
    assert!(in_host.delete_link("tst_h").await?);
    assert!(!in_host.delete_link("tst_h").await?);
    assert!(
        in_pod.link("eth0").await?.is_none(),
        "deleting one end removes the peer"
    );
    Ok(())
}

#[test]
fn missing_namespace_is_named_and_not_found() {
    let err = Netns::open("/run/netns/definitely-not-here").unwrap_err();
    assert!(err.is_not_found());
    assert!(
        err.to_string().contains("/run/netns/definitely-not-here"),
        "{err}"
    );
}

/// With a single runtime thread, a task awaiting `run_async` leaves that thread free: the
/// closure waits for a message that only another task on the same thread sends. A blocking
/// join in its place would hold the only thread until the closure's own 5 s bound ran out.
#[tokio::test(flavor = "current_thread")]
async fn run_async_enters_the_namespace_and_leaves_the_runtime_thread_free() -> Result<()> {
    let test_ns = TestNs::create("dpta")?;
    let ns = Netns::open(test_ns.path())?;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let waiter = ns.run_async(move || {
        let heard = rx.recv_timeout(std::time::Duration::from_secs(5));
        let inside = std::fs::read_link("/proc/thread-self/ns/net");
        (heard, inside)
    });
    let sender = async move {
        tokio::task::yield_now().await;
        tx.send(())
    };
    let (outcome, sent) = tokio::join!(waiter, sender);
    sent?;
    let (heard, inside) = outcome?;
    assert!(
        heard.is_ok(),
        "the closure never heard from the other task: the runtime thread was blocked"
    );
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(test_ns.path())?);
    assert_eq!(
        inside?.display().to_string(),
        format!("net:[{inode}]"),
        "the closure ran in the namespace it was given"
    );

    // A panic inside comes back to the caller, as with the blocking `run`.
    let panicked = tokio::spawn(async move { ns.run_async(|| panic!("inside the namespace")).await });
    assert!(panicked.await.unwrap_err().is_panic());
    Ok(())
}

/// Clones of one `Netlink` share its socket, and the daemon's tasks each hold one: their dumps
/// (routes, addresses, links, neighbours, rules) may run at the same moment. The kernel runs one
/// dump per netlink socket and answers a second with `EBUSY` (the provider-network task's
/// passes failed so under load), so the dumps must take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_dumps_on_one_socket_all_succeed() -> Result<()> {
    let ns = TestNs::create("dpdump")?;
    let nl = Netlink::connect(&Netns::open(ns.path())?)?;
    let lo = nl.require_link("lo").await?;
    // Enough to answer in more than one netlink message, so a dump takes a while.
    for i in 0..200u32 {
        let net: IpNet = format!("10.98.{}.{}/32", i / 250, i % 250 + 1).parse()?;
        nl.add_address(lo.index, net).await?;
    }
    let mut tasks = Vec::new();
    for i in 0..64 {
        let nl = nl.clone();
        tasks.push(tokio::spawn(async move {
            match i % 4 {
                0 => nl.addr_records(lo.index).await.map(drop),
                1 => nl.route_records(lo.index).await.map(drop),
                2 => nl.links().await.map(drop),
                _ => nl.addresses(lo.index).await.map(drop),
            }
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        task.await
            .context("dump task")?
            .with_context(|| format!("dump {i} of 64 on one socket"))?;
    }
    Ok(())
}
