//! Two gateway nodes and a ToR, for the centralized-gateway test and bench: node `na` in its
//! namespace at 198.51.100.2 and node `nb` at 198.51.102.2, each on its own link to the ToR
//! (198.51.100.1 on the ToR's eth1, 198.51.102.1 on its eth2); BIRD on the ToR with one session
//! per node (protocols `node_a`, `node_b`); each node's `kube-ovn-speaker` binary against the
//! real kube-apiserver; and Subnets written as our controller writes them (spec defaulted, `Ready`,
//! `status.activateGateway`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube_ovn_testkit::{Netns, wait_until};
use serde_json::json;

use super::birdctl::BirdCtl;
use super::k8s::{Cluster, Speaker, speaker_on};
use super::peers::Bird;
use super::{NODE_AS, TOR_AS, WAIT, require_root};

pub const A_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub const B_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 102, 2);

pub struct TwoGateways {
    pub a: Netns,
    pub b: Netns,
    pub tor: Netns,
    pub bird: Bird,
    pub cluster: Cluster,
    /// The speakers of `na` and `nb`.
    pub speakers: [Speaker; 2],
    _dir: tempfile::TempDir,
}

/// A link from `node`'s eth0 (`node_cidr`) to the ToR's `tor_dev` (`tor_cidr`).
fn link(node: &Netns, tor: &Netns, tor_dev: &str, node_cidr: &str, tor_cidr: &str) -> Result<()> {
    node.ip(&[
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        tor_dev,
        "netns",
        tor.name(),
    ])?;
    node.ip(&["link", "set", "eth0", "up"])?;
    tor.ip(&["link", "set", tor_dev, "up"])?;
    node.ip(&["addr", "add", node_cidr, "dev", "eth0"])?;
    tor.ip(&["addr", "add", tor_cidr, "dev", tor_dev])?;
    Ok(())
}

fn bird_config(log: &std::path::Path) -> String {
    let mut text = format!(
        "log \"{}\" all;\nrouter id 198.51.100.1;\nprotocol device {{ scan time 10; }}\n",
        log.display()
    );
    for (name, node) in [("node_a", A_V4), ("node_b", B_V4)] {
        let _ = write!(
            text,
            "protocol bgp {name} {{\n  local as {TOR_AS};\n  neighbor {node} as {NODE_AS};\n  \
             passive on;\n  hold time 30;\n  connect delay time 1;\n  error wait time 1, 5;\n  \
             ipv4 {{ import all; export none; }};\n}}\n"
        );
    }
    text
}

impl TwoGateways {
    pub async fn start() -> Result<Self> {
        require_root();
        let a = Netns::create("gwa")?;
        let b = Netns::create("gwb")?;
        let tor = Netns::create("gwt")?;
        link(&a, &tor, "eth1", "198.51.100.2/24", "198.51.100.1/24")?;
        link(&b, &tor, "eth2", "198.51.102.2/24", "198.51.102.1/24")?;
        let bird_dir = tempfile::Builder::new().prefix("bird-").tempdir()?;
        let text = bird_config(&bird_dir.path().join("bird.log"));
        let bird = Bird::launch(&tor, bird_dir, &text)?;
        let cluster = Cluster::start().await?;
        let dir = tempfile::tempdir()?;
        let mut speakers = Vec::new();
        for (node, ns, id, tor_addr) in [("na", &a, A_V4, "198.51.100.1"), ("nb", &b, B_V4, "198.51.102.1")] {
            let own = dir.path().join(node);
            std::fs::create_dir_all(&own)?;
            let peers = [
                format!("--neighbor-as={TOR_AS}"),
                format!("--neighbor-address={tor_addr}"),
            ];
            let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
            speakers.push(speaker_on(&cluster.kubeconfig, ns, node, id, &own, &peers)?);
        }
        let speakers: [Speaker; 2] = speakers.try_into().map_err(|_| anyhow::anyhow!("two speakers"))?;
        let lab = TwoGateways {
            a,
            b,
            tor,
            bird,
            cluster,
            speakers,
            _dir: dir,
        };
        wait_until("BIRD to establish both sessions", WAIT, || {
            let out = lab.bird.birdc(&["show", "protocols"])?;
            Ok(out.lines().filter(|l| l.contains("Established")).count() == 2)
        })
        .with_context(|| lab.logs())?;
        Ok(lab)
    }

    /// Both speakers' last log lines and BIRD's.
    pub fn logs(&self) -> String {
        format!(
            "na:\n{}\nnb:\n{}\nBIRD:\n{}",
            self.speakers[0].log_tail(10),
            self.speakers[1].log_tail(10),
            self.bird.log_tail()
        )
    }

    async fn subnets(&self) -> Result<Api<DynamicObject>> {
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
        let (ar, _) = kube::discovery::pinned_kind(&self.cluster.kube, &gvk).await?;
        Ok(Api::all_with(self.cluster.kube.clone(), &ar))
    }

    /// A Ready subnet as the controller leaves it: `spec` (with the annotation `bgp`), and
    /// `status.activateGateway` = `active`.
    pub async fn subnet(&self, name: &str, bgp: &str, spec: serde_json::Value, active: &str) -> Result<()> {
        let api = self.subnets().await?;
        let obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "annotations": {"ovn.kubernetes.io/bgp": bgp}}, "spec": spec});
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(obj))
            .await?;
        let status = json!({"status": {"activateGateway": active,
            "conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// Writes `status.activateGateway`, as the controller does on failover.
    pub async fn set_active(&self, name: &str, active: &str) -> Result<()> {
        let status = json!({"status": {"activateGateway": active}});
        self.subnets()
            .await?
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// The ToR's sessions that hold a route for `prefix`.
    pub fn learned_from(&self, prefix: &str) -> BTreeSet<String> {
        // birdc exits 1 on "Network not found".
        let out = self.bird.birdc(&["show", "route", prefix]).unwrap_or_default();
        routes(&out).into_iter().map(|(p, _)| p).collect()
    }

    /// Waits until exactly the sessions `from` hold a route for `prefix`.
    pub fn wait_learned(&self, prefix: &str, from: &[&str]) -> Result<()> {
        let want: BTreeSet<String> = from.iter().map(|s| (*s).to_owned()).collect();
        wait_until(
            &format!("the ToR to learn {prefix} from {from:?} only"),
            WAIT,
            || Ok(self.learned_from(prefix) == want),
        )
        .with_context(|| format!("now: {:?}\n{}", self.learned_from(prefix), self.logs()))
    }

    pub fn ctl(&self) -> Result<BirdCtl> {
        BirdCtl::connect(&self.bird.dir.path().join("bird.ctl"))
    }
}

/// The routes in a `show route` reply: (session, whether it is the best path).
pub fn routes(reply: &str) -> Vec<(String, bool)> {
    reply
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("unicast [")? + "unicast [".len()..];
            let protocol = rest.split_whitespace().next()?;
            Some((protocol.to_owned(), rest.contains("] * ")))
        })
        .collect()
}

/// A failover as the ToR saw it: from the status write to `to` being the best path, and to the
/// old gateway's route being gone.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    pub best: Duration,
    pub withdrawn: Duration,
}

/// Polls BIRD's control socket (every 0.5 ms) from `since` until `prefix`'s best path is from
/// session `to` and session `from` holds no route for it.
pub fn watch_failover(
    ctl: &mut BirdCtl,
    prefix: &str,
    from: &str,
    to: &str,
    since: Instant,
) -> Result<Failover> {
    let (mut best, mut withdrawn) = (None, None);
    while since.elapsed() < WAIT {
        let reply = ctl.ask(&format!("show route {prefix}"))?;
        let now = since.elapsed();
        let r = routes(&reply);
        if best.is_none() && r.iter().any(|(p, b)| p == to && *b) {
            best = Some(now);
        }
        if withdrawn.is_none() && !r.iter().any(|(p, _)| p == from) {
            withdrawn = Some(now);
        }
        if let (Some(best), Some(withdrawn)) = (best, withdrawn) {
            return Ok(Failover { best, withdrawn });
        }
        // The control socket has no "tell me when"; the step bounds the timing error.
        std::thread::sleep(Duration::from_micros(500));
    }
    bail!(
        "{prefix}: no failover from {from} to {to} within {WAIT:?} (best at {best:?}, withdrawn at {withdrawn:?})"
    )
}
