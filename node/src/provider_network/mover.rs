//! The only code that changes a provider NIC: runs the planner's [`Step`]s against OVSDB and
//! the kernel, journaling each step's inverse, and on the first failure runs the journal
//! backwards so the NIC is left as it was (Kube-OVN retries from wherever it stopped; plan
//! §3.0 3).

use std::hash::{Hash, Hasher};
use std::time::Duration;

use kube_ovn_dataplane::{AddrRecord, Netlink, Netns, ethtool};

use super::naming::Naming;
use super::plan::{Dev, LinkState, SNAPSHOT_KEY, Snapshot, Step};
use crate::config::Datapath;
use crate::error::DaemonError;
use crate::ovs::Ovs;
use crate::ovs::provider::ProviderBridge;

/// How long ovs-vswitchd gets to open the NIC and make the bridge's tap.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Linux interface names are at most 15 bytes (IFNAMSIZ - 1), labels too.
const IFNAMSIZ: usize = 15;

/// A move or give-back of one NIC.
pub struct Mover<'a> {
    /// The Open_vSwitch database.
    pub ovs: &'a Ovs,
    /// Netlink where the NIC and ovs-vswitchd are.
    pub nl: &'a Netlink,
    /// That namespace (sysctls).
    pub ns: &'a Netns,
    /// The provider network.
    pub pn: &'a str,
    /// The bridge (`br-<pn>`, or the NIC's original name when exchanged).
    pub bridge: &'a str,
    /// The NIC, by its name when the run starts.
    pub nic: &'a str,
    /// `spec.exchangeLinkName`: recorded on the bridge.
    pub exchanged: bool,
    /// The NIC's name after a [`Step::Rename`] of this run (`None` at the start).
    pub renamed: std::sync::Mutex<Option<String>>,
    /// br-int's datapath: on netdev the bridge keeps its own MAC and the NIC gets
    /// `arp_ignore=1` (plan §3.0 1).
    pub datapath: Datapath,
    /// The NIC port's trunks.
    pub trunks: &'a [u16],
    /// What the bridge records on creation.
    pub snapshot: &'a Snapshot,
    /// The NIC's MAC (for the bridge's MAC on the system datapath and the chassis MAC).
    pub nic_mac: Option<[u8; 6]>,
    /// `--mac-learning-fallback`.
    pub mac_learning_fallback: bool,
    /// Test hook: fail at a step, to exercise the rollback and the crash recovery against real
    /// OVS and a real kernel.
    pub fail_at: Option<FailPoint>,
}

/// Where a test makes a move fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPoint {
    /// Index (0-based) of the step that fails instead of running.
    pub step: usize,
    /// `true`: stop there without undoing anything, as a daemon killed at that moment would.
    pub crash: bool,
}

/// A move that failed, and how its undo went.
#[derive(Debug)]
pub struct MoveError {
    /// The step that failed.
    pub step: String,
    /// Why.
    pub cause: DaemonError,
    /// The undo's outcome: the steps that could not be undone, with why.
    pub rolled_back: Result<(), String>,
}

impl std::fmt::Display for MoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.cause)?;
        match &self.rolled_back {
            Ok(()) => f.write_str(" (rolled back)"),
            Err(e) => write!(f, " (rollback incomplete: {e})"),
        }
    }
}

impl Mover<'_> {
    /// Runs `steps` in order; on the first failure undoes the ones done, newest first.
    pub async fn run(&self, steps: &[Step]) -> Result<(), MoveError> {
        let mut journal: Vec<Step> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let hook = self.fail_at.filter(|f| f.step == i);
            if hook.is_some_and(|f| f.crash) {
                return Err(MoveError {
                    step: describe(step),
                    cause: DaemonError::ProviderNetwork("injected crash (test hook)".into()),
                    rolled_back: Err("not attempted: injected crash".into()),
                });
            }
            let outcome = if hook.is_some() {
                Err(DaemonError::ProviderNetwork(
                    "injected failure (test hook)".into(),
                ))
            } else {
                self.apply(step).await
            };
            match outcome {
                Ok(inverse) => journal.extend(inverse),
                Err(cause) => {
                    tracing::warn!(step = ?step, error = %cause, "provider NIC step failed; undoing the steps done");
                    let mut failed = Vec::new();
                    for undo in journal.iter().rev() {
                        if let Err(e) = self.apply(undo).await {
                            failed.push(format!("{}: {e}", describe(undo)));
                        }
                    }
                    return Err(MoveError {
                        step: describe(step),
                        cause,
                        rolled_back: if failed.is_empty() {
                            Ok(())
                        } else {
                            Err(failed.join("; "))
                        },
                    });
                }
            }
        }
        Ok(())
    }

    fn arp_ignore_key(&self) -> String {
        format!("ipv4/conf/{}/arp_ignore", self.nic_name())
    }

    /// The NIC's name now.
    fn nic_name(&self) -> String {
        self.renamed
            .lock()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| self.nic.to_owned())
    }

    /// Renames the NIC `from` → `to` (down, rename, up) and puts back the addresses and
    /// routes going down took, as read just before. A failed rename still brings the link up
    /// and puts them back, so the undo starts from a working NIC.
    async fn rename(&self, from: &str, to: &str) -> Result<(), DaemonError> {
        let link = self.nl.require_link(from).await?;
        let keep = |a: &AddrRecord| !kube_ovn_dataplane::is_link_local(a.net.addr());
        let addrs: Vec<AddrRecord> = self
            .nl
            .addr_records(link.index)
            .await?
            .into_iter()
            .filter(keep)
            .collect();
        let mut routes: Vec<_> = self
            .nl
            .route_records(link.index)
            .await?
            .into_iter()
            .filter(|r| !r.kernel_made() && !kube_ovn_dataplane::is_link_local(r.dst.addr()))
            .collect();
        routes.sort_by_key(kube_ovn_dataplane::RouteRecord::replay_rank);
        // The bridge's internal port holding `to` goes a moment after its port is removed.
        let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
        while self.nl.link(to).await?.is_some() {
            if tokio::time::Instant::now() >= deadline {
                return Err(DaemonError::ProviderNetwork(format!(
                    "cannot rename link {from} to {to}: a link called {to} still exists after {OPEN_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(from, to, "renaming the provider nic (down, rename, up)");
        let renamed = match self.nl.set_down(link.index).await {
            Ok(()) => self.nl.rename_link(link.index, to).await,
            Err(e) => Err(e),
        };
        if renamed.is_ok()
            && let Ok(mut r) = self.renamed.lock()
        {
            *r = Some(to.to_owned());
        }
        self.nl.set_up(link.index).await?;
        // IPv4 addresses survive a link going down (their labels follow the rename); IPv6 ones
        // do not, unless keep_addr_on_down. Routes through the link are gone either way.
        let now = self.nl.addr_records(link.index).await?;
        for a in addrs.iter().filter(|a| !now.iter().any(|n| n.net == a.net)) {
            self.nl.add_addr_record(link.index, a, None, false).await?;
        }
        for r in &routes {
            self.nl.replace_route_record(r, link.index).await?;
        }
        renamed?;
        Ok(())
    }

    /// Applies one step; returns its inverse.
    async fn apply(&self, step: &Step) -> Result<Option<Step>, DaemonError> {
        tracing::debug!(?step, nic = %self.nic_name(), bridge = self.bridge, "provider NIC step");
        match step {
            Step::CreateBridge => self.create_bridge(false).await?,
            Step::RecordBridge => self.create_bridge(true).await?,
            Step::AddPorts => {
                let nic = self.nic_name();
                self.ovs.add_provider_ports(&self.bridge_spec(&nic)?).await?;
                self.ovs.wait_opened(&nic, OPEN_TIMEOUT).await?;
                self.ovs.wait_opened(self.bridge, OPEN_TIMEOUT).await?;
            }
            Step::RemovePorts => self.ovs.remove_provider_ports(self.bridge).await?,
            Step::Rename { from, to } => self.rename(from, to).await?,
            Step::SetTrunks(trunks) => self.ovs.set_port_trunks(&self.nic_name(), trunks).await?,
            Step::SetArpIgnore(value) => {
                let old = ethtool::read_net_sysctl(self.ns, &self.arp_ignore_key()).await?;
                ethtool::write_net_sysctl(self.ns, &self.arp_ignore_key(), value).await?;
                return Ok(step.inverse(old.as_deref()));
            }
            Step::Up(dev) => {
                let index = self.index(*dev).await?;
                self.nl.set_up(index).await?;
            }
            Step::AddAddr(dev, addr) => {
                let index = self.index(*dev).await?;
                let label = self.label(addr, *dev);
                self.nl
                    .add_addr_record(index, addr, label.as_deref(), *dev == Dev::Bridge)
                    .await?;
            }
            Step::DelAddr(dev, addr) => {
                let index = self.index(*dev).await?;
                self.nl.delete_address(index, addr.net).await?;
            }
            Step::Route(dev, route) => {
                let index = self.index(*dev).await?;
                self.nl.replace_route_record(route, index).await?;
            }
            Step::Announce(dev, neighbours) => self.announce(*dev, neighbours).await,
            Step::WriteMapping => {
                let mac = kube_ovn_dataplane::format_mac(&self.local_mac("chassis"));
                self.ovs
                    .set_mappings(self.pn, Some(self.bridge), Some(&mac))
                    .await?;
            }
            Step::RemoveMapping => self.ovs.set_mappings(self.pn, None, None).await?,
            Step::RemoveBridge => {
                self.ovs.remove_provider_bridge(self.bridge).await?;
            }
        }
        Ok(step.inverse(None))
    }

    /// Best effort (a neighbour that does not hear it learns the new MAC when its entry goes
    /// stale): errors are logged, not failures of the move.
    async fn announce(&self, to: Dev, neighbours: &[std::net::IpAddr]) {
        let nic = self.nic_name();
        let to_name = match to {
            Dev::Bridge => self.bridge,
            Dev::Nic => nic.as_str(),
        };
        let Ok(Some(to)) = self.nl.link(to_name).await else {
            return;
        };
        for ip in neighbours {
            if let Err(e) = self.nl.forget_neighbour(to.index, *ip).await {
                tracing::debug!(%ip, error = %e, "cannot forget a neighbour");
            }
        }
        let targets = neighbours.to_vec();
        let sent = self
            .ns
            .run_async(move || {
                for ip in targets {
                    let any: std::net::IpAddr = if ip.is_ipv6() {
                        std::net::Ipv6Addr::UNSPECIFIED.into()
                    } else {
                        std::net::Ipv4Addr::UNSPECIFIED.into()
                    };
                    // The discard port: the datagram only has to make the kernel resolve.
                    let _ = std::net::UdpSocket::bind((any, 0)).and_then(|s| s.send_to(&[0], (ip, 9)));
                }
            })
            .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "cannot announce the move to the neighbours");
        }
        tracing::debug!(link = to_name, neighbours = ?neighbours, "announced to the neighbours");
    }

    /// The bridge with its record and, unless `record_only` (exchanged names: the ports come
    /// after the rename), its ports.
    async fn create_bridge(&self, record_only: bool) -> Result<(), DaemonError> {
        let spec = self.bridge_spec(self.nic)?;
        if record_only {
            return self.ovs.record_provider_bridge(&spec).await;
        }
        self.ovs.create_provider_bridge(&spec).await?;
        self.ovs.wait_opened(self.nic, OPEN_TIMEOUT).await?;
        self.ovs.wait_opened(self.bridge, OPEN_TIMEOUT).await?;
        Ok(())
    }

    /// The bridge as made, with `port` the NIC's port.
    fn bridge_spec<'s>(&'s self, port: &'s str) -> Result<ProviderBridge<'s>, DaemonError> {
        let snapshot = serde_json::to_string(self.snapshot).map_err(|e| {
            DaemonError::ProviderNetwork(format!("serialize the snapshot of nic {}: {e}", self.nic))
        })?;
        // The NIC's original name: a fresh move starts before any rename.
        let mut external_ids = Naming::new(self.pn, self.nic, self.exchanged).external_ids(self.pn);
        external_ids.insert(SNAPSHOT_KEY.to_owned(), snapshot);
        // Netdev: the kernel still receives every frame on the NIC, so the bridge must not
        // share its MAC (the node would take each unicast frame twice). System datapath: as
        // Kube-OVN, the bridge takes the NIC's MAC.
        let mac = match (self.datapath, self.nic_mac) {
            (Datapath::System, Some(mac)) => mac,
            _ => self.local_mac("bridge"),
        };
        Ok(ProviderBridge {
            bridge: self.bridge,
            nic: port,
            datapath_type: self.datapath.as_str(),
            trunks: self.trunks,
            mtu: self.snapshot.mtu,
            hwaddr: kube_ovn_dataplane::format_mac(&mac),
            external_ids,
            mac_learning_fallback: self.mac_learning_fallback,
        })
    }

    async fn index(&self, dev: Dev) -> Result<u32, DaemonError> {
        let nic = self.nic_name();
        let name = match dev {
            Dev::Nic => nic.as_str(),
            Dev::Bridge => self.bridge,
        };
        // The tap appears a moment after ovs-vswitchd reports the port open.
        let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
        loop {
            if let Some(link) = self.nl.link(name).await? {
                return Ok(link.index);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(self.nl.require_link(name).await?.index);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The IPv4 label on the new link: the kernel's default (the link's name) stays the
    /// default; `eth1:0` becomes `br-pn1:0` when that fits, else the default.
    fn label(&self, addr: &AddrRecord, to: Dev) -> Option<String> {
        let nic = self.nic_name();
        let (from, to) = match to {
            Dev::Bridge => (nic.as_str(), self.bridge),
            Dev::Nic => (self.bridge, nic.as_str()),
        };
        let label = addr.label.as_deref()?;
        if addr.net.addr().is_ipv6() || label == from || label == to {
            return None;
        }
        let suffix = label
            .strip_prefix(from)
            .unwrap_or(label.split_once(':').map_or("", |(_, s)| s));
        let renamed = if suffix.starts_with(':') {
            format!("{to}{suffix}")
        } else if suffix.is_empty() || label.starts_with(to) {
            label.to_owned()
        } else {
            format!("{to}:{suffix}")
        };
        (renamed.len() <= IFNAMSIZ && renamed.starts_with(to)).then_some(renamed)
    }

    /// A locally administered unicast MAC fixed by the bridge and the NIC's MAC, so that a
    /// recreated bridge gets the same one.
    fn local_mac(&self, salt: &str) -> [u8; 6] {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, self.bridge, self.nic_mac).hash(&mut h);
        let bits = h.finish().to_be_bytes();
        let mut mac = [bits[0], bits[1], bits[2], bits[3], bits[4], bits[5]];
        mac[0] = (mac[0] & 0xfe) | 0x02;
        mac
    }
}

fn describe(step: &Step) -> String {
    match step {
        Step::AddAddr(dev, a) => format!("add address {} to {dev:?}", a.net),
        Step::DelAddr(dev, a) => format!("delete address {} from {dev:?}", a.net),
        Step::Route(dev, r) => format!("route {r} out of {dev:?}"),
        Step::Rename { from, to } => format!("rename link {from} to {to}"),
        other => format!("{other:?}"),
    }
}

/// The kernel's view of link `name` in `nl`'s namespace, or `None` when there is no such link.
pub async fn read_link(nl: &Netlink, ns: &Netns, name: &str) -> Result<Option<LinkState>, DaemonError> {
    let Some(link) = nl.link(name).await? else {
        return Ok(None);
    };
    let master = match nl.master_of(link.index).await? {
        Some(index) => Some(
            nl.links()
                .await?
                .into_iter()
                .find(|l| l.index == index)
                .map_or_else(|| format!("#{index}"), |l| l.name),
        ),
        None => None,
    };
    Ok(Some(LinkState {
        index: link.index,
        up: link.up,
        mtu: link.mtu,
        addrs: nl.addr_records(link.index).await?,
        routes: nl.route_records(link.index).await?,
        arp_ignore: ethtool::read_net_sysctl(ns, &format!("ipv4/conf/{name}/arp_ignore")).await?,
        master,
        neighbours: nl
            .learnt_neighbours(link.index)
            .await?
            .into_iter()
            .filter(|ip| !kube_ovn_dataplane::is_link_local(*ip))
            .collect(),
    }))
}

/// The NIC's MAC.
pub async fn mac_of(nl: &Netlink, name: &str) -> Result<Option<[u8; 6]>, DaemonError> {
    Ok(nl.link(name).await?.and_then(|l| l.mac))
}
