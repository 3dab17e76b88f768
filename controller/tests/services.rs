//! Services on OVN load balancers, against a real northbound database and ovn-northd (no
//! chassis; traffic is in `node/tests/services.rs`): the VPCs' six load balancers and their
//! switches, VIPs from Services and EndpointSlices as the test writes them (as
//! kube-controller-manager would), ovn-trace as the oracle for the balancing, bad input, and a
//! restarted controller writing nothing.

mod common;
mod netkit;

use common::{Env, ann};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_testkit::wait_until_async;
use netkit::{lrp_mac, nb_get, nb_until, port, vpc_until};
use serde_json::{Value, json};

const PLAIN: &str = "cluster-tcp-loadbalancer";
const SESSION: &str = "cluster-tcp-session-loadbalancer";

async fn put<K>(env: &Env, ns: &str, value: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(value).unwrap();
    let api: Api<K> = Api::namespaced(env.kube.clone(), ns);
    let name = obj.name_any();
    if api.get_opt(&name).await.unwrap().is_some() {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&obj))
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
}

/// A Service with one TCP port `port` → `8080`, at `ip`.
fn service(ns: &str, name: &str, ip: &str, port: u16, extra: &Value) -> Value {
    let mut spec = json!({"clusterIP": ip, "clusterIPs": [ip],
        "ports": [{"name": "http", "port": port, "targetPort": 8080}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// The EndpointSlice kube-controller-manager would write for `pods` (`ready` each).
fn slice(svc: &str, pods: &[(&Pod, bool)]) -> Value {
    let ns = pods
        .first()
        .map(|(p, _)| p.namespace().unwrap())
        .unwrap_or_default();
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(p, ready)| {
            json!({"addresses": [ann(p, "ip_address")], "conditions": {"ready": ready},
                "targetRef": {"kind": "Pod", "name": p.name_any(), "namespace": ns}})
        })
        .collect();
    json!({"metadata": {"name": format!("{svc}-abc"), "namespace": ns,
            "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

/// The names of the load balancers attached to a switch (`ls-lb-list` shows only those with VIPs).
fn attached(env: &Env, switch: &str) -> Vec<String> {
    let uuids = nb_get(env, "Logical_Switch", switch, "load_balancer");
    let mut names: Vec<String> = uuids
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .filter(|u| !u.is_empty())
        .map(|u| nb_get(env, "Load_Balancer", u, "name"))
        .collect();
    names.sort();
    names
}

async fn attached_until(env: &Env, switch: &str, count: usize) -> Vec<String> {
    let last = std::sync::Mutex::new(Vec::new());
    let waited = wait_until_async(&format!("{count} LBs on {switch}"), common::WAIT, || {
        let now = attached(env, switch);
        let ok = now.len() == count;
        *last.lock().unwrap() = now;
        async move { Ok(ok) }
    })
    .await;
    let now = last.into_inner().unwrap();
    assert!(waited.is_ok(), "{waited:?}: {now:?}");
    now
}

fn vips(env: &Env, lb: &str) -> String {
    nb_get(env, "Load_Balancer", lb, "vips")
}

async fn vips_until(env: &Env, lb: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    nb_until(env, &["get", "Load_Balancer", lb, "vips"], what, ok).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_follow_their_endpoints_in_the_vpcs_load_balancers() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod("web", "a", "node1", &[]).await;
    env.pod("web", "b", "node1", &[]).await;
    let (a, b) = (env.routed("web", "a").await, env.routed("web", "b").await);
    let (ip_a, ip_b) = (ann(&a, "ip_address"), ann(&b, "ip_address"));

    // The six load balancers, Kube-OVN's options, on ovn-default and on join (where LoadBalancer
    // IPs from outside enter through the nodes' ovn0); their names in the default VPC's status.
    let lbs = attached_until(&env, "ovn-default", 6).await;
    for name in [
        PLAIN,
        SESSION,
        "cluster-udp-loadbalancer",
        "cluster-sctp-session-loadbalancer",
    ] {
        assert!(lbs.iter().any(|l| l == name), "{name} in {lbs:?}");
    }
    assert_eq!(attached_until(&env, "join", 6).await.len(), 6);
    assert_eq!(
        nb_get(&env, "Load_Balancer", SESSION, "selection_fields"),
        "[ip_src]"
    );
    assert_eq!(
        nb_get(&env, "Load_Balancer", SESSION, "options:affinity_timeout"),
        "10800"
    );
    assert_eq!(
        nb_get(
            &env,
            "Load_Balancer",
            "cluster-udp-loadbalancer",
            "options:ct_flush"
        ),
        "true"
    );
    // Plain ones hash the connection in one pass (not OVS's dp_hash; `ovn::lb::lb_row` says why).
    assert_eq!(
        nb_get(&env, "Load_Balancer", PLAIN, "selection_fields"),
        "[ip_dst, ip_src, tp_dst, tp_src]"
    );
    let vpc = vpc_until(&env, "ovn-cluster", "LB names in status", |v| {
        v.status
            .as_ref()
            .and_then(|s| s.tcp_session_load_balancer.as_deref())
            == Some(SESSION)
    })
    .await;
    assert_eq!(vpc.status.unwrap().tcp_load_balancer.as_deref(), Some(PLAIN));

    // Both ready endpoints back the VIP; the Service learns its VPC.
    put::<Service>(&env, "web", service("web", "web", "10.96.0.10", 80, &json!({}))).await;
    put::<EndpointSlice>(&env, "web", slice("web", &[(&a, true), (&b, true)])).await;
    let both = format!("\"10.96.0.10:80\"=\"{}\"", {
        let mut v = [format!("{ip_a}:8080"), format!("{ip_b}:8080")];
        v.sort();
        v.join(",")
    });
    vips_until(&env, PLAIN, "both backends", |o| o.contains(&both)).await;
    let svcs: Api<Service> = Api::namespaced(env.kube.clone(), "web");
    wait_until_async("the Service's vpc annotation", common::WAIT, || {
        let svcs = svcs.clone();
        async move {
            Ok(svcs.get("web").await?.annotations().get("ovn.kubernetes.io/vpc")
                == Some(&"ovn-cluster".to_owned()))
        }
    })
    .await
    .unwrap();

    // ovn-trace: a's first packet to the VIP goes through the load balancer to b (the backend
    // ovn-trace is told conntrack picks).
    let flow = format!(
        "inport==\"{}\" && eth.src=={} && eth.dst=={} && ip4.src=={ip_a} && ip4.dst==10.96.0.10 && ip.ttl==64 && tcp && tcp.dst==80",
        port(&a),
        ann(&a, "mac_address"),
        lrp_mac(&env, "ovn-cluster-ovn-default")
    );
    let lb_dst = format!("--lb-dst={ip_b}:8080");
    let trace = env
        .ovn
        .trace_with("ovn-default", &flow, &["--ct=new", &lb_dst])
        .unwrap();
    assert!(
        trace.text.contains("ct_lb_mark") && trace.outputs == [port(&b)],
        "{}",
        trace.text
    );

    // An endpoint turning unready leaves; a port change moves the key; ClientIP moves the VIP
    // to the session LB.
    put::<EndpointSlice>(&env, "web", slice("web", &[(&a, true), (&b, false)])).await;
    let one = format!("\"10.96.0.10:80\"=\"{ip_a}:8080\"");
    vips_until(&env, PLAIN, "b gone", |o| o.contains(&one)).await;
    put::<Service>(&env, "web", service("web", "web", "10.96.0.10", 81, &json!({}))).await;
    vips_until(&env, PLAIN, "port 81 instead of 80", |o| {
        o.contains("10.96.0.10:81") && !o.contains("10.96.0.10:80")
    })
    .await;
    put::<Service>(
        &env,
        "web",
        service(
            "web",
            "web",
            "10.96.0.10",
            81,
            &json!({"sessionAffinity": "ClientIP"}),
        ),
    )
    .await;
    vips_until(&env, SESSION, "the VIP in the session LB", |o| {
        o.contains("10.96.0.10:81")
    })
    .await;
    assert!(!vips(&env, PLAIN).contains("10.96.0.10"), "{}", vips(&env, PLAIN));

    // No ready endpoint: no VIP (not a stale backend). Then the Service goes, and so do its VIPs.
    put::<EndpointSlice>(&env, "web", slice("web", &[(&a, false), (&b, false)])).await;
    vips_until(&env, SESSION, "no VIP without endpoints", |o| {
        !o.contains("10.96.0.10")
    })
    .await;
    put::<EndpointSlice>(&env, "web", slice("web", &[(&a, true), (&b, true)])).await;
    vips_until(&env, SESSION, "back", |o| o.contains("10.96.0.10:81")).await;
    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    vips_until(&env, SESSION, "the deleted Service's VIP gone", |o| {
        !o.contains("10.96.0.10")
    })
    .await;

    // enableLb off detaches the switch's load balancers; on attaches them again.
    let subnets: Api<kube_ovn_api::crd::Subnet> = Api::all(env.kube.clone());
    for (on, count) in [(false, 0), (true, 6)] {
        subnets
            .patch(
                "ovn-default",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"enableLb": on}})),
            )
            .await
            .unwrap();
        attached_until(&env, "ovn-default", count).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_vpcs_service_and_bad_input_and_a_restart_that_writes_nothing() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "vpc1"},
        "spec": {"namespaces": ["nsv"]}}),
    )
    .await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "s1"},
        "spec": {"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}}),
    )
    .await;
    env.subnet_ready("s1").await;
    env.pod("nsv", "c", "node1", &[]).await;
    let c = env.routed("nsv", "c").await;
    put::<Service>(&env, "nsv", service("nsv", "v", "10.96.0.30", 80, &json!({}))).await;
    put::<EndpointSlice>(&env, "nsv", slice("v", &[(&c, true)])).await;
    let want = format!("\"10.96.0.30:80\"=\"{}:8080\"", ann(&c, "ip_address"));
    vips_until(&env, "vpc-vpc1-tcp-load", "the VIP in vpc1's LB", |o| {
        o.contains(&want)
    })
    .await;
    assert!(!vips(&env, PLAIN).contains("10.96.0.30"));
    let on_s1 = attached(&env, "s1");
    assert_eq!(
        on_s1,
        [
            "tcp-load",
            "tcp-sess-load",
            "udp-load",
            "udp-sess-load",
            "sctp-load",
            "sctp-sess-load"
        ]
        .map(|s| format!("vpc-vpc1-{s}"))
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let vpc = vpc_until(&env, "vpc1", "LB names in status", |v| {
        v.status
            .as_ref()
            .and_then(|s| s.udp_session_load_balancer.as_deref())
            == Some("vpc-vpc1-udp-sess-load")
    })
    .await;
    assert_eq!(
        vpc.status.unwrap().tcp_load_balancer.as_deref(),
        Some("vpc-vpc1-tcp-load")
    );
    let svc = Api::<Service>::namespaced(env.kube.clone(), "nsv")
        .get("v")
        .await
        .unwrap();
    assert_eq!(svc.annotations()["ovn.kubernetes.io/vpc"], "vpc1");

    // Bad input. A malformed address in a slice never reaches the controller: the API server's
    // validation refuses it, naming the field (the controller's own check, for input that got
    // through, is unit-tested in service::plan::tests). A port naming no container port is valid
    // to the API server and the controller's to refuse: an event naming the object and field.
    // The good endpoint and the other Service still work.
    let good = slice("bad", &[(&c, true)]);
    let mut bad = good.clone();
    bad["endpoints"]
        .as_array_mut()
        .unwrap()
        .push(json!({"addresses": ["10.1.0.999"]}));
    put::<Service>(&env, "nsv", service("nsv", "bad", "10.96.0.31", 80, &json!({}))).await;
    let refused = Api::<EndpointSlice>::namespaced(env.kube.clone(), "nsv")
        .create(&PostParams::default(), &serde_json::from_value(bad).unwrap())
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s))
            if s.code == 422 && s.message.contains("endpoints[1].addresses[0]")),
        "{refused:?}"
    );
    put::<EndpointSlice>(&env, "nsv", good).await;
    let mut named = service("nsv", "named", "10.96.0.32", 80, &json!({}));
    named["spec"]["ports"][0]["targetPort"] = json!("metrics");
    put::<Service>(&env, "nsv", named).await;
    let mut portless = slice("named", &[(&c, true)]);
    portless["ports"] = json!([]);
    put::<EndpointSlice>(&env, "nsv", portless).await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.kube.clone(), "nsv");
    let notes = wait_until_async("the warning", common::WAIT, || {
        let events = events.clone();
        async move {
            let notes: Vec<String> = events
                .list(&kube::api::ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            Ok(notes.iter().any(|n| {
                n.contains("service nsv/named: spec.ports[0]: targetPort \"metrics\" names no container port of pod c")
            }))
        }
    })
    .await;
    assert!(notes.is_ok(), "{notes:?}");
    let bad_want = format!("\"10.96.0.31:80\"=\"{}:8080\"", ann(&c, "ip_address"));
    vips_until(
        &env,
        "vpc-vpc1-tcp-load",
        "the good endpoint of the refused slice",
        |o| o.contains(&bad_want) && o.contains(&want) && !o.contains("10.96.0.32"),
    )
    .await;

    // A restart with nothing changed: every Service reconciled again, no northbound write (the
    // first controller's count shows the metric is the one that counts writes).
    let first = netkit::metrics(env.metrics_addr.unwrap().port()).await.unwrap();
    let txns = |m: &str| {
        netkit::metric(
            m,
            "kube_ovn_controller_ovsdb_transaction_duration_seconds_count",
            &[],
        )
    };
    assert!(txns(&first) > 0.0, "{first}");
    env.kill_controller().await;
    env.start_controller();
    let port = env.metrics_addr.unwrap().port();
    wait_until_async(
        "the Services reconciled after the restart",
        common::WAIT,
        || async move {
            let m = netkit::metrics(port).await?;
            Ok(netkit::reconciles(&m, "Service") >= 3.0 && netkit::reconciles(&m, "Subnet") >= 3.0)
        },
    )
    .await
    .unwrap();
    let m = netkit::metrics(port).await.unwrap();
    let writes = txns(&m);
    assert!(writes == 0.0, "northbound writes after a restart: {writes}\n{m}");
}

/// The notes of the Warning events in `ns`.
async fn warnings(env: &Env, ns: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.kube.clone(), ns);
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

async fn warning_until(env: &Env, ns: &str, parts: &[&str]) {
    let found = wait_until_async(
        &format!("a Warning event in {ns} saying {parts:?}"),
        common::WAIT,
        || async {
            Ok(warnings(env, ns)
                .await
                .iter()
                .any(|n| parts.iter().all(|p| n.contains(p))))
        },
    )
    .await;
    assert!(found.is_ok(), "{found:?}: {:?}", warnings(env, ns).await);
}

/// A selectorless Service's EndpointSlice (written by its author, as a tenant may) to `ip`.
fn manual_slice(ns: &str, svc: &str, ip: &str) -> Value {
    json!({"metadata": {"name": format!("{svc}-abc"), "namespace": ns,
            "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip]}]})
}

/// Issue 21: a tenant's Service claiming `web/hello`'s ClusterIP through `switch_lb_vip` is
/// refused (a Warning naming the field and the owner) and `hello` keeps its backend, also after
/// the claimant is deleted; a `switch_lb_vip` outside every subnet is refused; one inside the
/// default subnet is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_another_services_address_is_refused_and_the_owner_keeps_its_vip() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.pod("web", "a", "node1", &[]).await;
    env.pod("tenant", "b", "node1", &[]).await;
    let (a, b) = (env.routed("web", "a").await, env.routed("tenant", "b").await);
    let (ip_a, ip_b) = (ann(&a, "ip_address").to_owned(), ann(&b, "ip_address").to_owned());
    put::<Service>(&env, "web", service("web", "hello", "10.96.0.10", 80, &json!({}))).await;
    put::<EndpointSlice>(&env, "web", slice("hello", &[(&a, true)])).await;
    let hello = format!("\"10.96.0.10:80\"=\"{ip_a}:8080\"");
    vips_until(&env, PLAIN, "hello's VIP", |o| o.contains(&hello)).await;

    // The thief: selectorless, its own ClusterIP, switch_lb_vip = hello's, backends = b.
    let mut thief = service("tenant", "thief", "10.96.0.50", 80, &json!({}));
    thief["metadata"]["annotations"] = json!({"ovn.kubernetes.io/switch_lb_vip": "10.96.0.10"});
    put::<EndpointSlice>(&env, "tenant", manual_slice("tenant", "thief", &ip_b)).await;
    put::<Service>(&env, "tenant", thief).await;
    warning_until(
        &env,
        "tenant",
        &[
            "service tenant/thief: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]",
            "10.96.0.10 is the ClusterIP of service web/hello",
        ],
    )
    .await;
    // Out of range: an address in no subnet. In range: a free address of ovn-default.
    let mut outside = service("tenant", "outside", "10.96.0.51", 80, &json!({}));
    outside["metadata"]["annotations"] = json!({"ovn.kubernetes.io/switch_lb_vip": "172.31.0.5"});
    put::<EndpointSlice>(&env, "tenant", manual_slice("tenant", "outside", &ip_b)).await;
    put::<Service>(&env, "tenant", outside).await;
    let mut inside = service("tenant", "inside", "10.96.0.52", 80, &json!({}));
    inside["metadata"]["annotations"] = json!({"ovn.kubernetes.io/switch_lb_vip": "10.16.255.200"});
    put::<EndpointSlice>(&env, "tenant", manual_slice("tenant", "inside", &ip_b)).await;
    put::<Service>(&env, "tenant", inside).await;
    warning_until(
        &env,
        "tenant",
        &[
            "service tenant/outside: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]",
            "172.31.0.5 is inside no subnet",
        ],
    )
    .await;
    let inside_vip = format!("\"10.16.255.200:80\"=\"{ip_b}:8080\"");
    let now = vips_until(&env, PLAIN, "the in-range VIP", |o| o.contains(&inside_vip)).await;
    assert!(now.contains(&hello), "hello's VIP unchanged: {now}");
    assert!(!now.contains("172.31.0.5"), "{now}");

    // ovn-trace: b's connection to hello's ClusterIP still goes to a (were b the backend, the
    // trace would pick it: --lb-dst names an address the VIP does not have).
    let flow = format!(
        "inport==\"{}\" && eth.src=={} && eth.dst=={} && ip4.src=={ip_b} && ip4.dst==10.96.0.10 && ip.ttl==64 && tcp && tcp.dst==80",
        port(&b),
        ann(&b, "mac_address"),
        lrp_mac(&env, "ovn-cluster-ovn-default")
    );
    let lb_dst = format!("--lb-dst={ip_a}:8080");
    let trace = env
        .ovn
        .trace_with("ovn-default", &flow, &["--ct=new", &lb_dst])
        .unwrap();
    assert!(trace.outputs == [port(&a)], "{}", trace.text);

    // The thief deleted: hello is as it was. A marker Service deleted after it shows that the
    // sweep after the thief's deletion has run.
    put::<Service>(
        &env,
        "tenant",
        service("tenant", "marker", "10.96.0.60", 80, &json!({})),
    )
    .await;
    put::<EndpointSlice>(&env, "tenant", manual_slice("tenant", "marker", &ip_b)).await;
    vips_until(&env, PLAIN, "the marker's VIP", |o| o.contains("10.96.0.60:80")).await;
    let svcs: Api<Service> = Api::namespaced(env.kube.clone(), "tenant");
    svcs.delete("thief", &DeleteParams::default()).await.unwrap();
    svcs.delete("marker", &DeleteParams::default()).await.unwrap();
    let now = vips_until(&env, PLAIN, "the marker's VIP gone", |o| {
        !o.contains("10.96.0.60")
    })
    .await;
    assert!(now.contains(&hello), "hello's VIP after the thief went: {now}");

    // Two claims of one free address: the older wins (same second: tenant/first before
    // tenant/second); when it goes, the other gets the address.
    for (name, ip, backend) in [("first", "10.96.0.61", &ip_a), ("second", "10.96.0.62", &ip_b)] {
        let mut s = service("tenant", name, ip, 80, &json!({}));
        s["metadata"]["annotations"] = json!({"ovn.kubernetes.io/switch_lb_vip": "10.16.255.201"});
        put::<EndpointSlice>(&env, "tenant", manual_slice("tenant", name, backend)).await;
        put::<Service>(&env, "tenant", s).await;
    }
    warning_until(
        &env,
        "tenant",
        &[
            "service tenant/second",
            "10.16.255.201 is already claimed by the older service tenant/first",
        ],
    )
    .await;
    let first = format!("\"10.16.255.201:80\"=\"{ip_a}:8080\"");
    vips_until(&env, PLAIN, "the first claimant's VIP", |o| o.contains(&first)).await;
    svcs.delete("first", &DeleteParams::default()).await.unwrap();
    let second = format!("\"10.16.255.201:80\"=\"{ip_b}:8080\"");
    vips_until(&env, PLAIN, "the address passed to the second claimant", |o| {
        o.contains(&second)
    })
    .await;
}

/// `spec.externalIPs` get VIPs only inside `--service-external-ip-cidrs`; the others are refused
/// with a Warning naming `spec.externalIPs[i]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_ips_get_vips_only_inside_the_allowed_cidrs() {
    let env = Env::start_with(&["--service-external-ip-cidrs=192.0.2.0/24"]).await;
    env.node("node1", "172.18.0.2").await;
    env.pod("web", "a", "node1", &[]).await;
    let a = env.routed("web", "a").await;
    let ext = json!({"externalIPs": ["192.0.2.10", "198.51.100.10"]});
    put::<Service>(&env, "web", service("web", "ext", "10.96.0.70", 80, &ext)).await;
    put::<EndpointSlice>(&env, "web", slice("ext", &[(&a, true)])).await;
    warning_until(
        &env,
        "web",
        &["service web/ext: spec.externalIPs[1]", "198.51.100.10 is outside"],
    )
    .await;
    let now = vips_until(&env, PLAIN, "the allowed external IP's VIP", |o| {
        o.contains("192.0.2.10:80") && o.contains("10.96.0.70:80")
    })
    .await;
    assert!(!now.contains("198.51.100.10"), "{now}");
}
