//! Links over rtnetlink: veth pairs whose ends are born in two namespaces, lookups, up, MTU,
//! MAC, delete.

use std::sync::Arc;

use futures::TryStreamExt;
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth};

use crate::error::{Error, Result};
use crate::netns::Netns;

/// What `rtnetlink::new_connection` gives: the connection to drive, the handle, and the
/// (unused) multicast receiver.
type Opened = (
    rtnetlink::proto::Connection<rtnetlink::packet_route::RouteNetlinkMessage>,
    Handle,
    futures::channel::mpsc::UnboundedReceiver<(
        rtnetlink::packet_core::NetlinkMessage<rtnetlink::packet_route::RouteNetlinkMessage>,
        rtnetlink::sys::SocketAddr,
    )>,
);

/// Opens the socket in the calling thread's namespace, registered with `runtime`'s reactor.
fn open_socket(runtime: &tokio::runtime::Handle) -> std::io::Result<Opened> {
    let _entered = runtime.enter();
    rtnetlink::new_connection()
}

/// A netlink route socket bound to one namespace.
#[derive(Clone)]
pub struct Netlink {
    pub(crate) handle: Handle,
    pub(crate) ns: String,
    /// Held for each dump. The kernel runs one dump per netlink socket at a time and answers
    /// another with `EBUSY` (`netlink_dump_start`); clones share the socket, and the daemon's
    /// tasks each hold a clone.
    dumping: Arc<tokio::sync::Mutex<()>>,
}

/// What the kernel says about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// Interface index in its namespace.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Hardware address.
    pub mac: Option<[u8; 6]>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Administratively up.
    pub up: bool,
}

/// A veth pair to create with one request: `host` in `host_ns`, `peer` in `peer_ns`.
#[derive(Debug, Clone)]
pub struct VethPair<'a> {
    /// Name of the end that stays where ovs-vswitchd runs.
    pub host: &'a str,
    /// Namespace of the host end.
    pub host_ns: &'a Netns,
    /// Name of the end in the pod (usually `eth0`, so no rename is needed later).
    pub peer: &'a str,
    /// Namespace of the peer end.
    pub peer_ns: &'a Netns,
    /// MTU of both ends.
    pub mtu: u32,
    /// MAC of the peer end: it must equal the logical switch port's, or OVN's port security
    /// drops the pod's traffic. `None` lets the kernel pick one, for a caller that sets the
    /// right one later, before the end is brought up.
    pub peer_mac: Option<[u8; 6]>,
}

impl Netlink {
    /// Opens a socket in `ns` (on a short-lived thread that entered it) and drives it on the
    /// current tokio runtime. Must be called from within a runtime; blocks the calling thread
    /// while the socket opens, so async code on a request path uses
    /// [`connect_async`](Self::connect_async).
    pub fn connect(ns: &Netns) -> Result<Self> {
        let runtime = tokio::runtime::Handle::current();
        let handle = runtime.clone();
        let opened = ns.run(move || open_socket(&handle))?;
        Self::drive(ns, &runtime, opened)
    }

    /// [`connect`](Self::connect) without blocking a runtime worker: the task awaits the
    /// thread that opens the socket.
    pub async fn connect_async(ns: &Netns) -> Result<Self> {
        let runtime = tokio::runtime::Handle::current();
        let handle = runtime.clone();
        let opened = ns.run_async(move || open_socket(&handle)).await?;
        Self::drive(ns, &runtime, opened)
    }

    fn drive(ns: &Netns, runtime: &tokio::runtime::Handle, opened: std::io::Result<Opened>) -> Result<Self> {
        let (connection, handle, _) = opened.map_err(|source| Error::Io {
            op: format!("open a netlink socket in {}", ns.label()),
            source,
        })?;
        runtime.spawn(connection);
        Ok(Self {
            handle,
            ns: ns.label(),
            dumping: Arc::default(),
        })
    }

    /// This socket's turn to dump (see `dumping`): held until the dump's last message is read.
    pub(crate) async fn dump_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.dumping.lock().await
    }

    /// The namespace, for messages.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// A delete's outcome: `Ok(true)` done, `Ok(false)` when there was nothing to delete.
    pub(crate) fn deleted(
        &self,
        op: impl Into<String>,
        result: std::result::Result<(), rtnetlink::Error>,
    ) -> Result<bool> {
        match result.map_err(self.fail(op)) {
            Ok(()) => Ok(true),
            Err(err) if err.is_not_found() => Ok(false),
            Err(err) => Err(err),
        }
    }

    pub(crate) fn fail(&self, op: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> Error + '_ {
        let op = op.into();
        move |source| Error::Netlink {
            op,
            ns: self.ns.clone(),
            source,
        }
    }

    /// Creates the pair in one request (no window in which a half-made pair sits in the wrong
    /// namespace), both ends down: a veth cannot be opened before its peer exists (the kernel
    /// answers `ENOTCONN`), so the caller brings each end up from its own namespace.
    /// `EEXIST` comes back as an error the caller can test with [`Error::is_exists`].
    pub async fn add_veth(&self, pair: &VethPair<'_>) -> Result<()> {
        let mut peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name(pair.peer)
            .mtu(pair.mtu)
            .setns_by_fd(pair.peer_ns.raw_fd());
        if let Some(mac) = pair.peer_mac {
            peer = peer.address(mac.to_vec());
        }
        let peer = peer.build();
        let message = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(pair.host)
            .mtu(pair.mtu)
            .txqueuelen(1000)
            .setns_by_fd(pair.host_ns.raw_fd())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        self.handle
            .link()
            .add(message)
            .execute()
            .await
            .map_err(self.fail(format!(
                "add veth {} (peer {} in {})",
                pair.host,
                pair.peer,
                pair.peer_ns.label()
            )))
    }

    /// The link called `name`, or `None`.
    pub async fn link(&self, name: &str) -> Result<Option<LinkInfo>> {
        let _turn = self.dump_turn().await;
        let found = self
            .handle
            .link()
            .get()
            .match_name(name.to_owned())
            .execute()
            .try_next()
            .await;
        match found {
            Ok(Some(message)) => Ok(Some(link_info(&message))),
            Ok(None) => Ok(None),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("get link {name}"),
                    ns: self.ns.clone(),
                    source,
                };
                if err.is_not_found() { Ok(None) } else { Err(err) }
            }
        }
    }

    /// The link called `name`, or [`Error::LinkMissing`].
    pub async fn require_link(&self, name: &str) -> Result<LinkInfo> {
        self.link(name).await?.ok_or_else(|| Error::LinkMissing {
            name: name.to_owned(),
            ns: self.ns.clone(),
        })
    }

    /// Every link in the namespace.
    pub async fn links(&self) -> Result<Vec<LinkInfo>> {
        let _turn = self.dump_turn().await;
        let messages: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(self.fail("list links"))?;
        Ok(messages.iter().map(link_info).collect())
    }

    /// Sets what is given on link `index`: MAC, MTU, and up.
    pub async fn configure(
        &self,
        index: u32,
        mac: Option<[u8; 6]>,
        mtu: Option<u32>,
        up: bool,
    ) -> Result<()> {
        let mut builder = LinkUnspec::new_with_index(index);
        if let Some(mac) = mac {
            builder = builder.address(mac.to_vec());
        }
        if let Some(mtu) = mtu {
            builder = builder.mtu(mtu);
        }
        if up {
            builder = builder.up();
        }
        self.handle
            .link()
            .set(builder.build())
            .execute()
            .await
            .map_err(self.fail(format!("configure link #{index}")))
    }

    /// Brings link `index` up.
    pub async fn set_up(&self, index: u32) -> Result<()> {
        self.configure(index, None, None, true).await
    }

    /// Takes link `index` down.
    pub async fn set_down(&self, index: u32) -> Result<()> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).down().build())
            .execute()
            .await
            .map_err(self.fail(format!("set link #{index} down")))
    }

    /// Renames link `index` to `name`. The link must be down: Linux refuses to rename a
    /// running one (EBUSY).
    pub async fn rename_link(&self, index: u32, name: &str) -> Result<()> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).name(name.to_owned()).build())
            .execute()
            .await
            .map_err(self.fail(format!("rename link #{index} to {name}")))
    }

    /// The index of the link `index` is enslaved to (`IFLA_MASTER`: a Linux bridge, bond or
    /// VRF), or `None`. An OVS netdev bridge's port has none: ovs-vswitchd reads it through a
    /// packet socket, so OVS membership is a question for the Open_vSwitch database.
    pub async fn master_of(&self, index: u32) -> Result<Option<u32>> {
        let _turn = self.dump_turn().await;
        let found = self
            .handle
            .link()
            .get()
            .match_index(index)
            .execute()
            .try_next()
            .await;
        match found {
            Ok(Some(message)) => Ok(message.attributes.iter().find_map(|a| match a {
                LinkAttribute::Controller(master) if *master != 0 => Some(*master),
                _ => None,
            })),
            Ok(None) => Ok(None),
            Err(source) => Err(Error::Netlink {
                op: format!("get link #{index}"),
                ns: self.ns.clone(),
                source,
            }),
        }
    }

    /// Deletes link `name`; `Ok(false)` when it was not there. Deleting one end of a veth
    /// removes the other.
    pub async fn delete_link(&self, name: &str) -> Result<bool> {
        let Some(link) = self.link(name).await? else {
            return Ok(false);
        };
        match self.handle.link().del(link.index).execute().await {
            Ok(()) => Ok(true),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("delete link {name}"),
                    ns: self.ns.clone(),
                    source,
                };
                if err.is_not_found() { Ok(false) } else { Err(err) }
            }
        }
    }
}

fn link_info(message: &LinkMessage) -> LinkInfo {
    let mut info = LinkInfo {
        index: message.header.index,
        name: String::new(),
        mac: None,
        mtu: None,
        up: message.header.flags.contains(LinkFlags::Up),
    };
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => info.name.clone_from(name),
            LinkAttribute::Address(mac) => info.mac = mac.as_slice().try_into().ok(),
            LinkAttribute::Mtu(mtu) => info.mtu = Some(*mtu),
            _ => {}
        }
    }
    info
}
