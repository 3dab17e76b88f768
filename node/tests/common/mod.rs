//! A cluster in network namespaces for the daemon's tests: a real kube-apiserver (the test
//! process's etcd, its own prefix; no kube-controller-manager, no kubelet: the test plays the
//! kubelet), OVN central, the real controller (in this process), and per
//! node an [`OvsNode`] (ovsdb-server, ovs-vswitchd with the userspace datapath, ovn-controller)
//! with the real `kube-ovn-daemon` binary as a child process; pods are network namespaces
//! attached by running the real `kube-ovn` shim as a runtime does ([`runtime`]).

#![allow(dead_code)]

/// The runtime side of CNI lives in the lab crate (the lab's kubelet stand-in runs plugins with it).
pub use kube_ovn_lab::cni_runtime as runtime;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_ovn_lab::kubernetes::fixture::ApiServer;
use kube_ovn_testkit::{Daemon, Netns, OvnCentral, OvsNode, wait_until, wait_until_async};
use serde_json::{Value, json};

use self::runtime::{Runtime, Sandbox};

pub const WAIT: Duration = Duration::from_mins(1);

pub use kube_ovn_testkit::init_logging;

/// The `kube-ovn` shim, a binary of the `kube-ovn-cni` crate: Cargo builds it beside this crate's
/// binaries when the workspace is tested (`cargo test --workspace`, as scripts/test.sh does).
pub fn shim_binary() -> Result<PathBuf> {
    let shim = std::path::Path::new(env!("CARGO_BIN_EXE_kube-ovn-daemon")).with_file_name("kube-ovn");
    anyhow::ensure!(
        shim.exists(),
        "the CNI shim {} is not built (cargo build -p kube-ovn-cni --bin kube-ovn)",
        shim.display()
    );
    Ok(shim)
}

pub mod egress;
pub mod policy;
pub mod policy_cases;
pub mod underlay;

/// One node: its OVS, its daemon, and the runtime's dirs.
pub struct TestNode {
    pub name: String,
    /// The Node's InternalIPs, present on the node namespace's interfaces as on a real host.
    pub internal_ip: Ipv4Addr,
    pub internal_ipv6: Option<Ipv6Addr>,
    pub ovs: OvsNode,
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
    pub runtime: Runtime,
    pub socket: PathBuf,
    pub metrics_port: u16,
    /// How the daemon was started, to start it again ([`TestNode::restart_daemon`]).
    pub daemon_args: Vec<String>,
    pub daemon_log: PathBuf,
}

/// A pod attached through the shim.
pub struct TestPod {
    pub name: String,
    pub namespace: String,
    pub netns: Netns,
    pub sandbox: Sandbox,
    pub result: Value,
}

impl TestPod {
    /// The pod's first address from the CNI result.
    pub fn ip(&self) -> Ipv4Addr {
        let cidr = self.result["ips"][0]["address"]
            .as_str()
            .expect("an address in the result");
        cidr.split('/').next().unwrap().parse().unwrap()
    }
}

pub struct Cluster {
    pub api: ApiServer,
    pub kube: kube::Client,
    pub ovn: OvnCentral,
    pub nodes: Vec<TestNode>,
    controller: Option<tokio::task::JoinHandle<()>>,
    /// The daemons' kubeconfig (the admin's, or `kube-ovn-cni`'s with [`Options::rbac`]).
    kubeconfig: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(controller) = &self.controller {
            controller.abort();
        }
    }
}

fn free_port() -> u16 {
    kube_ovn_testkit::free_port().expect("a free TCP port on 127.0.0.1")
}

/// Where a node's underlay address is (10.x is taken by pods, 100.64 by join).
pub fn underlay_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 30, 0, u8::try_from(index + 1).unwrap())
}

/// A dual-stack node's IPv6 InternalIP.
pub fn node_ipv6(index: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x172, 0x30, 0, 0, 0, 0, u16::try_from(index + 1).unwrap())
}

/// How to start a [`Cluster`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// How many nodes (two are joined by an underlay).
    pub nodes: usize,
    /// Flags for every daemon.
    pub daemon_flags: Vec<String>,
    /// Extra flags per node, by index (nodes beyond the list get none).
    pub node_flags: Vec<Vec<String>>,
    /// Extra controller flags (`--default-cidr=…,…` for dual stack, say).
    pub controller_flags: Vec<String>,
    /// Give every node an IPv6 InternalIP as well.
    pub dual_stack: bool,
    /// Run as a real cluster's identities: `deploy/base/rbac.yaml` applied, the controller runs
    /// as ServiceAccount `kube-system/kube-ovn-controller` and every daemon as
    /// `kube-system/kube-ovn-cni` (the API server's RBAC authorizer decides); the test's own
    /// client is the administrator (`system:masters`) either way.
    pub rbac: bool,
    /// No controller: the test writes the northbound rows and the pods' annotations itself (the
    /// daemon's side of a feature, tested apart from the controller's). Nodes then get no
    /// join address, so no `ovn0`.
    pub no_controller: bool,
}

impl Cluster {
    /// API server, OVN central, controller, and `nodes` nodes with daemons (joined by an
    /// underlay when more than one). `daemon_flags` go to every daemon.
    pub async fn start(nodes: usize, daemon_flags: &[&str]) -> Result<Self> {
        Self::start_with(Options {
            nodes,
            daemon_flags: daemon_flags.iter().map(|f| (*f).to_owned()).collect(),
            ..Options::default()
        })
        .await
    }

    /// [`start`](Self::start) with every option.
    pub async fn start_with(options: Options) -> Result<Self> {
        init_logging();
        // The API server (our CRDs, the speaker's BgpPeer too: the daemon reads the peers'
        // addresses) and OVN central start side by side.
        let (api, ovn) = tokio::join!(ApiServer::start(), tokio::task::spawn_blocking(OvnCentral::start));
        let (api, ovn) = (api.context("kube-apiserver")?, ovn??);
        let kube = api.client().await?;
        // With RBAC the daemons and the controller authenticate as their ServiceAccounts with
        // tokens from the TokenRequest API, authorized by the roles deploy/base/rbac.yaml
        // grants; else every component is the administrator.
        let (kubeconfig, controller_kube) = if options.rbac {
            let rbac =
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/rbac.yaml"))?;
            kube_ovn_lab::manifests::create_all(&kube, &rbac).await?;
            (
                api.service_account_kubeconfig("kube-system", "kube-ovn-cni")
                    .await?,
                api.service_account_client("kube-system", "kube-ovn-controller")
                    .await?,
            )
        } else {
            (api.admin_kubeconfig(), kube.clone())
        };

        let mut controller_args = vec![
            "kube-ovn-controller".to_owned(),
            format!("--ovn-nb-addr={}", ovn.nb_remote()),
            "--bind-address=127.0.0.1".into(),
            "--pprof-port=0".into(),
            "--leader-elect=false".into(),
        ];
        controller_args.extend(options.controller_flags.iter().cloned());
        let flags = <kube_ovn_controller::config::Flags as clap::Parser>::try_parse_from(controller_args)?;
        let config = flags.validate()?;
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let controller = (!options.no_controller).then(|| {
            tokio::spawn(async move {
                if let Err(e) = kube_ovn_controller::run_with_listener(
                    config,
                    controller_kube,
                    metrics,
                    std::future::pending(),
                )
                .await
                {
                    tracing::error!(error = %e, "controller stopped");
                }
            })
        });
        let mut cluster = Self {
            api,
            kube,
            ovn,
            nodes: Vec::new(),
            controller,
            kubeconfig,
        };
        let mut ovs_nodes = Vec::new();
        for _ in 0..options.nodes {
            ovs_nodes.push(tokio::task::spawn_blocking(|| OvsNode::start("cn")).await??);
        }
        if options.nodes == 2 {
            OvsNode::connect_underlay(&ovs_nodes[0], underlay_ip(0), &ovs_nodes[1], underlay_ip(1), 24)?;
        }
        for (i, ovs) in ovs_nodes.into_iter().enumerate() {
            let mut flags = options.daemon_flags.clone();
            flags.extend(options.node_flags.get(i).cloned().unwrap_or_default());
            let ipv6 = options.dual_stack.then(|| node_ipv6(i));
            let node = cluster
                .start_node(i, ovs, &flags, ipv6, !options.no_controller)
                .await?;
            cluster.nodes.push(node);
        }
        Ok(cluster)
    }

    async fn start_node(
        &self,
        index: usize,
        mut ovs: OvsNode,
        daemon_flags: &[String],
        ipv6: Option<Ipv6Addr>,
        with_join: bool,
    ) -> Result<TestNode> {
        let name = format!("node{index}-{}", ovs.name());
        let internal_ip = underlay_ip(index);
        let mut addresses = vec![json!({"type": "InternalIP", "address": internal_ip.to_string()})];
        // The addresses are the host's own, as kubelet reports them: without an underlay (one
        // node) the IPv4 one goes on `lo`, the IPv6 one always does (the underlay is IPv4).
        if !ovs
            .netns()
            .ip(&["-4", "addr", "show"])?
            .contains(&format!("inet {internal_ip}/"))
        {
            ovs.netns()
                .ip(&["addr", "add", &format!("{internal_ip}/32"), "dev", "lo"])?;
        }
        if let Some(v6) = ipv6 {
            addresses.push(json!({"type": "InternalIP", "address": v6.to_string()}));
            ovs.netns()
                .ip(&["addr", "add", &format!("{v6}/128"), "dev", "lo", "nodad"])?;
        }
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"addresses": addresses}}))?;
        Api::<Node>::all(self.kube.clone())
            .create(&PostParams::default(), &node)
            .await?;
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("run/kube-ovn-daemon.sock");
        let conf_dir = dir.path().join("net.d");
        let bin_dir = dir.path().join("bin");
        let metrics_port = free_port();
        // With one node there is no underlay; the address only has to be valid.
        let encap = underlay_ip(index);
        let mut args: Vec<String> = vec![
            format!("--node-name={name}"),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--ovs-db={}", ovs.db_remote()),
            format!("--ovn-sb-addr={}", self.ovn.sb_remote()),
            format!("--encap-ip={encap}"),
            "--ovs-datapath-type=netdev".into(),
            "--mtu=1400".into(),
            format!("--ovs-netns={}", ovs.netns().path().display()),
            format!("--bind-socket={}", socket.display()),
            "--install-cni-config=true".into(),
            format!("--cni-conf-dir={}", conf_dir.display()),
            format!("--cni-bin-dir={}", bin_dir.display()),
            format!("--cni-bin={}", shim_binary()?.display()),
            format!("--pprof-port={metrics_port}"),
            "--metrics-address=127.0.0.1".into(),
            format!("--system-id-file={}", dir.path().join("no-system-id").display()),
        ];
        args.extend(daemon_flags.iter().cloned());
        let log = dir.path().join("daemon.log");
        let daemon = Daemon::spawn(&name, env!("CARGO_BIN_EXE_kube-ovn-daemon"), &args, &log, &[])?;
        let mut test_node = TestNode {
            name: name.clone(),
            internal_ip,
            internal_ipv6: ipv6,
            ovs: {
                // ovn-controller reads the chassis settings the daemon writes; started after
                // them so its first connection is to the right southbound.
                let socket = socket.clone();
                wait_until(
                    &format!("daemon of {name} to serve"),
                    WAIT,
                    || Ok(socket.exists()),
                )
                .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;
                ovs.start_ovn_controller()?;
                ovs
            },
            daemon,
            runtime: Runtime::new(conf_dir, bin_dir),
            dir,
            socket,
            metrics_port,
            daemon_args: args,
            daemon_log: log,
        };
        test_node.daemon.check_alive()?;
        let api = Api::<Node>::all(self.kube.clone());
        wait_until_async(&format!("node {name}: chassis annotation and ovn0"), WAIT, || {
            let api = api.clone();
            let ovs = &test_node.ovs;
            let name = name.clone();
            async move {
                let n = api.get(&name).await?;
                let annotated = n
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key("ovn.kubernetes.io/chassis");
                Ok(annotated
                    && (!with_join
                        || ovs
                            .netns()
                            .ip(&["addr", "show", "ovn0"])
                            .is_ok_and(|s| s.contains("100.64."))))
            }
        })
        .await
        .with_context(|| test_node.daemon.log_tail(40))?;
        Ok(test_node)
    }

    pub async fn namespace(&self, name: &str) -> Result<()> {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        match Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the Pod object on node `node` (the controller then annotates it).
    pub async fn create_pod(
        &self,
        namespace: &str,
        name: &str,
        node: usize,
        annotations: &[(&str, &str)],
    ) -> Result<()> {
        self.namespace(namespace).await?;
        let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "annotations": ann},
            "spec": {"nodeName": self.nodes[node].name, "containers": [{"name": "c", "image": "x"}]}}))?;
        Api::<Pod>::namespaced(self.kube.clone(), namespace)
            .create(&PostParams::default(), &pod)
            .await?;
        Ok(())
    }

    /// A sandbox (network namespace) for a pod on `node`, not yet attached.
    pub fn sandbox(namespace: &str, name: &str) -> Result<(Netns, Sandbox)> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let netns = Netns::create("cp")?;
        let sandbox = Sandbox {
            container_id: format!(
                "c{:05}{:06x}abcdef0123",
                NEXT.fetch_add(1, Ordering::Relaxed),
                std::process::id()
            ),
            netns: netns.path().display().to_string(),
            ifname: "eth0".into(),
            pod: name.into(),
            namespace: namespace.into(),
        };
        Ok((netns, sandbox))
    }

    /// Creates the pod and attaches it through the shim; returns once ADD succeeded.
    pub async fn pod(
        &self,
        namespace: &str,
        name: &str,
        node: usize,
        annotations: &[(&str, &str)],
    ) -> Result<TestPod> {
        self.create_pod(namespace, name, node, annotations).await?;
        let (netns, sandbox) = Self::sandbox(namespace, name)?;
        let runtime = self.nodes[node].runtime.clone();
        let sb = sandbox.clone();
        let result = tokio::task::spawn_blocking(move || runtime.add(&sb))
            .await?
            .with_context(|| self.nodes[node].daemon.log_tail(30))?;
        Ok(TestPod {
            name: name.into(),
            namespace: namespace.into(),
            netns,
            sandbox,
            result,
        })
    }

    /// Deletes the Pod object as its kubelet finally does: a pod bound to a node only gets a
    /// deletionTimestamp from a plain delete and stays until the kubelet, its containers
    /// stopped, deletes it with grace period 0; these tests have no kubelet and play it.
    pub async fn delete_pod_object(&self, namespace: &str, name: &str) -> Result<()> {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(self.kube.clone(), namespace)
            .delete(name, &now)
            .await?;
        Ok(())
    }

    /// Applies a kubeovn.io object given as JSON.
    pub async fn apply(&self, value: Value) -> Result<()> {
        let kind = value["kind"].as_str().context("kind")?.to_owned();
        let name = value["metadata"]["name"].as_str().context("name")?.to_owned();
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", &kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.kube, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.kube.clone(), &ar);
        api.patch(
            &name,
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(value),
        )
        .await?;
        Ok(())
    }
}

impl TestNode {
    /// Starts the daemon again with the same flags (after a crash: the old process is gone or
    /// is killed first), and waits until it answers on its socket and its metrics port.
    pub fn restart_daemon(&mut self) -> Result<()> {
        self.daemon.kill();
        self.daemon = Daemon::spawn(
            &self.name,
            env!("CARGO_BIN_EXE_kube-ovn-daemon"),
            &self.daemon_args,
            &self.daemon_log,
            &[],
        )?;
        wait_until(
            &format!("restarted daemon of {} to serve", self.name),
            WAIT,
            || Ok(std::os::unix::net::UnixStream::connect(&self.socket).is_ok() && self.metrics().is_ok()),
        )
        .with_context(|| self.daemon.log_tail(30))
    }

    /// Links in the node's namespace whose name ends in `_h` (host ends of pod veths).
    pub fn pod_veths(&self) -> Result<Vec<String>> {
        let out = self.ovs.netns().ip(&["-o", "link", "show"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .filter(|n| n.ends_with("_h"))
            .collect())
    }

    /// OVS ports other than the bridge's own and `ovn0` and tunnels.
    pub fn pod_ports(&self) -> Result<Vec<String>> {
        let out = self.ovs.vsctl(&["--no-wait", "list-ports", "br-int"])?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "ovn0" && !p.starts_with("ovn-"))
            .map(str::to_owned)
            .collect())
    }

    /// Rows of an Open_vSwitch table, one per line.
    pub fn ovs_rows(&self, table: &str) -> Result<usize> {
        let out = self
            .ovs
            .vsctl(&["--no-wait", "--bare", "--columns=_uuid", "list", table])?;
        Ok(out.lines().filter(|l| !l.trim().is_empty()).count())
    }

    /// One column of an interface (`ovs-vsctl get`).
    pub fn iface_column(&self, iface: &str, column: &str) -> Result<String> {
        Ok(self
            .ovs
            .vsctl(&["--no-wait", "get", "interface", iface, column])?
            .trim()
            .trim_matches('"')
            .to_owned())
    }

    pub fn metrics(&self) -> Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }
}

/// Holds the controller back: the northbound ovsdb-server is stopped (SIGSTOP) until this is
/// dropped, so the controller's logical-port write, and with it the pod's annotations, waits.
pub struct NorthboundPaused {
    pid: nix::unistd::Pid,
}

impl NorthboundPaused {
    pub fn new(ovn: &OvnCentral) -> Result<Self> {
        let pid = ovn
            .nb
            .pid()
            .context("the northbound ovsdb-server is not running")?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)?;
        Ok(Self { pid })
    }
}

impl Drop for NorthboundPaused {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
    }
}
