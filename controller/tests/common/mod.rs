//! A whole control plane for one test: a real kube-apiserver of its own (on the test process's
//! shared etcd, our CRDs served: `kube_ovn_lab::kubernetes::fixture`), real OVN central (NB, SB,
//! ovn-northd), and the controller running against both.

#![allow(dead_code)] // each test binary uses a different subset

pub mod gate;
pub mod process;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::crd::condition::ConditionStatus;
use kube_ovn_controller::config::Flags;
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use kube_ovn_testkit::{OvnCentral, wait_until_async};
use serde_json::json;
use tokio::task::JoinHandle;

pub const WAIT: Duration = Duration::from_mins(1);

pub use kube_ovn_testkit::init_logging;

pub struct Env {
    pub server: ApiServer,
    /// The administrator's client configuration (the server's own CA, a client certificate in
    /// `system:masters`), from which every client of the test is built.
    pub config: kube::Config,
    /// The test's own client, as the administrator.
    pub kube: kube::Client,
    pub ovn: OvnCentral,
    pub controller: Option<JoinHandle<()>>,
    /// Where the running controller serves `/metrics` and the health endpoints.
    pub metrics_addr: Option<SocketAddr>,
    pub extra_flags: Vec<String>,
    /// Every request the controllers started by [`Env::spawn_controller`] sent, as
    /// `METHOD path?query`, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

/// A controller task and the address of its metrics and health endpoints.
pub struct Controller {
    pub task: JoinHandle<()>,
    pub metrics_addr: SocketAddr,
}

impl Env {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(flags: &[&str]) -> Self {
        let mut env = Self::start_idle(flags).await;
        env.start_controller();
        env
    }

    /// A kube-apiserver (with our CRDs) and OVN central, but no controller: the test starts its
    /// own.
    pub async fn start_idle(flags: &[&str]) -> Self {
        Self::start_idle_with(ApiServerOptions::with_crds(), flags).await
    }

    /// [`Env::start_idle`] with the API server started with `options` (e.g. without its watch
    /// cache, or with kube-controller-manager).
    pub async fn start_idle_with(options: ApiServerOptions, flags: &[&str]) -> Self {
        init_logging();
        // The two start side by side: each takes a few seconds.
        let (server, ovn) = tokio::join!(
            ApiServer::start_with(options),
            tokio::task::spawn_blocking(OvnCentral::start)
        );
        let server = server.expect("kube-apiserver");
        let ovn = ovn.unwrap().expect("OVN central");
        let config = server
            .admin_config()
            .await
            .expect("the admin's client configuration");
        let kube = kube::Client::try_from(config.clone()).expect("the admin's client");
        Self {
            server,
            config,
            kube,
            ovn,
            controller: None,
            metrics_addr: None,
            extra_flags: flags.iter().map(|s| (*s).to_owned()).collect(),
            requests: Arc::default(),
        }
    }

    pub fn flags(&self) -> Flags {
        self.flags_with(&[])
    }

    /// The harness's flags, then the environment's extra flags, then `extra`.
    pub fn flags_with(&self, extra: &[&str]) -> Flags {
        let mut args = vec![
            "kube-ovn-controller".to_owned(),
            format!("--ovn-nb-addr={}", self.ovn.nb_remote()),
            format!("--ovn-sb-addr={}", self.ovn.sb_remote()),
            "--bind-address=127.0.0.1".into(),
            "--pprof-port=0".into(),
            "--leader-elect=false".into(),
        ];
        // A flag given by the test replaces the default above.
        args.retain(|a| {
            let flag = a.split('=').next().unwrap_or_default();
            !self.extra_flags.iter().any(|e| e.split('=').next() == Some(flag))
        });
        args.extend(self.extra_flags.iter().cloned());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Flags::try_parse_from(args).unwrap()
    }

    /// A client of the API server, as the administrator, that records every request in
    /// [`Env::requests`] (a tower layer in front of the real client's stack).
    pub fn recording_client(&self) -> kube::Client {
        self.client_with(&gate::Steer::recording(self.requests.clone()))
    }

    /// An administrator's client with `layer` in front of its stack.
    pub fn client_with(&self, layer: &gate::Steer) -> kube::Client {
        kube::client::ClientBuilder::try_from(self.config.clone())
            .expect("a client of the test's API server")
            .with_layer(layer)
            .build()
    }

    /// The recorded requests that satisfy `f`.
    pub fn requests_where(&self, f: impl Fn(&str) -> bool) -> Vec<String> {
        let log = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        log.iter().filter(|r| f(r)).cloned().collect()
    }

    /// Starts a controller in this process with extra flags, its metrics endpoint on a port of
    /// its own; its requests are recorded.
    pub fn spawn_controller(&self, extra: &[&str]) -> Controller {
        self.spawn_controller_on(self.recording_client(), extra)
    }

    /// [`Env::spawn_controller`] with the controller's requests going through `kube` (e.g. a
    /// [`gate::Traffic`] client).
    pub fn spawn_controller_on(&self, kube: kube::Client, extra: &[&str]) -> Controller {
        let config = self.flags_with(extra).validate().unwrap();
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let metrics_addr = std_listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        let task = tokio::spawn(async move {
            let run = kube_ovn_controller::run_with_listener(config, kube, listener, std::future::pending());
            if let Err(e) = run.await {
                tracing::error!(error = %e, "controller stopped");
            }
        });
        Controller { task, metrics_addr }
    }

    /// Starts (or restarts) the controller in this process.
    pub fn start_controller(&mut self) {
        let c = self.spawn_controller(&[]);
        self.metrics_addr = Some(c.metrics_addr);
        self.controller = Some(c.task);
    }

    /// Kills the controller as a crash would: no cleanup runs.
    pub async fn kill_controller(&mut self) {
        if let Some(h) = self.controller.take() {
            h.abort();
            let _ = tokio::time::timeout(WAIT, h)
                .await
                .expect("the aborted controller's task to end");
        }
    }

    pub async fn namespace(&self, name: &str) {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("namespace {name}: {e}"),
        }
    }

    /// Creates a node and waits until the controller has given it its join address.
    pub async fn node(&self, name: &str, internal_ip: &str) -> Node {
        self.node_with_ips(name, &[internal_ip]).await
    }

    /// [`Env::node`] with several InternalIPs (one per family for a dual-stack node).
    pub async fn node_with_ips(&self, name: &str, internal_ips: &[&str]) -> Node {
        let addresses: Vec<serde_json::Value> = internal_ips
            .iter()
            .map(|a| json!({"type": "InternalIP", "address": a}))
            .collect();
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"addresses": addresses}}))
        .unwrap();
        let api = Api::<Node>::all(self.kube.clone());
        api.create(&PostParams::default(), &node).await.unwrap();
        wait_until_async(&format!("node {name} to be allocated"), WAIT, || {
            let api = api.clone();
            async move {
                Ok(api
                    .get(name)
                    .await?
                    .annotations()
                    .get("ovn.kubernetes.io/allocated")
                    .is_some_and(|v| v == "true"))
            }
        })
        .await
        .unwrap();
        api.get(name).await.unwrap()
    }

    pub async fn pod(&self, ns: &str, name: &str, node: &str, annotations: &[(&str, &str)]) -> Pod {
        self.namespace(ns).await;
        let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": ns, "annotations": ann},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap();
        Api::<Pod>::namespaced(self.kube.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    pub async fn apply_yaml(&self, value: serde_json::Value) {
        let kind = value["kind"].as_str().unwrap().to_owned();
        let name = value["metadata"]["name"].as_str().unwrap().to_owned();
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", &kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.kube, &gvk).await.unwrap();
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.kube.clone(), &ar);
        api.patch(
            &name,
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(value),
        )
        .await
        .unwrap();
    }

    /// Waits until the subnet's status says it is ready.
    pub async fn subnet_ready(&self, name: &str) -> Subnet {
        let api: Api<Subnet> = Api::all(self.kube.clone());
        wait_until_async(&format!("subnet {name} to be ready"), WAIT, || {
            let api = api.clone();
            async move {
                let s = api.get(name).await?;
                Ok(s.status.and_then(|st| st.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
                }))
            }
        })
        .await
        .unwrap();
        api.get(name).await.unwrap()
    }

    /// Waits until the pod's annotations say `routed=true`, and returns it.
    pub async fn routed(&self, ns: &str, name: &str) -> Pod {
        let api: Api<Pod> = Api::namespaced(self.kube.clone(), ns);
        wait_until_async(&format!("pod {ns}/{name} to be routed"), WAIT, || {
            let api = api.clone();
            async move {
                let p = api.get(name).await?;
                Ok(p.annotations()
                    .get("ovn.kubernetes.io/routed")
                    .is_some_and(|v| v == "true"))
            }
        })
        .await
        .unwrap();
        api.get(name).await.unwrap()
    }
}

pub fn ann<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod.annotations()
        .get(&format!("ovn.kubernetes.io/{key}"))
        .map_or("", String::as_str)
}

/// An ICMP echo from `src` to `dst` as ovn-trace takes it, entering through `src`'s port.
pub fn icmp(src: &Pod, dst_mac: &str, dst_ip: &str) -> String {
    let port = format!("{}.{}", src.name_any(), src.namespace().unwrap());
    format!(
        "inport==\"{port}\" && eth.src=={} && eth.dst=={dst_mac} && ip4.src=={} && ip4.dst=={dst_ip} && ip.ttl==64 && icmp4.type==8",
        ann(src, "mac_address"),
        ann(src, "ip_address")
    )
}

/// Addresses in a status range string such as `10.99.0.2-10.99.0.9,10.99.0.12`.
pub fn range_addresses(ranges: &str) -> anyhow::Result<std::collections::BTreeSet<std::net::IpAddr>> {
    let mut out = std::collections::BTreeSet::new();
    for part in ranges.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        match (a.parse()?, b.parse()?) {
            (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => {
                out.extend((u32::from(a)..=u32::from(b)).map(|x| std::net::IpAddr::V4(x.into())));
            }
            (a, b) if a == b => {
                out.insert(a);
            }
            _ => anyhow::bail!("range {part}: only IPv4 ranges are expanded"),
        }
    }
    Ok(out)
}

/// What is left of a pod NIC `key` (`<pod>.<ns>`) in the cluster: its northbound port, the port
/// groups holding that port, and its IP CR.
pub async fn remains_in_cluster(env: &Env, key: &str) -> anyhow::Result<Vec<String>> {
    use kube_ovn_api::crd::Ip;
    let mut left = Vec::new();
    let uuid = env.ovn.nbctl(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "Logical_Switch_Port",
        &format!("name=\"{key}\""),
    ])?;
    let uuid = uuid.trim();
    if !uuid.is_empty() {
        left.push(format!("northbound port {key}"));
        let groups = env.ovn.nbctl(&[
            "--bare",
            "--columns=name",
            "find",
            "Port_Group",
            &format!("ports{{>=}}{uuid}"),
        ])?;
        left.extend(
            groups
                .split_whitespace()
                .map(|g| format!("membership of port group {g}")),
        );
    }
    if Api::<Ip>::all(env.kube.clone()).get_opt(key).await?.is_some() {
        left.push(format!("IP CR {key}"));
    }
    Ok(left)
}

/// [`remains_in_cluster`], and the address `ip` if IPAM still holds it in `subnet` (as the
/// running controller reports it in the subnet's `status.v4usingIPrange`). Empty once all of
/// the NIC is released.
pub async fn remains_of(env: &Env, key: &str, subnet: &str, ip: &str) -> anyhow::Result<Vec<String>> {
    let mut left = remains_in_cluster(env, key).await?;
    let status = Api::<Subnet>::all(env.kube.clone())
        .get(subnet)
        .await?
        .status
        .unwrap_or_default();
    let using = range_addresses(status.v4_using_ip_range.as_deref().unwrap_or_default())?;
    if using.contains(&ip.parse()?) {
        left.push(format!(
            "address {ip} held in IPAM of {subnet} (status.v4usingIPrange)"
        ));
    }
    Ok(left)
}
