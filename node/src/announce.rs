//! The repeats of a pod's address announcements. ADD sends the first gratuitous ARP / unsolicited
//! NA of each address itself (`nic`), at once; this task sends the second, [`REPEAT_AFTER`]
//! later, so one lost frame does not leave the fabric with a stale MAC until its entries expire.
//! Kube-OVN's default (`--enable-arp-detect-ip-conflict`) sends two ARP announcements two
//! seconds apart (RFC 5227 §2.3: ANNOUNCE_NUM 2, ANNOUNCE_INTERVAL 2 s), after its conflict
//! probes, inside ADD; here ADD does not wait for the second. Two NAs at that spacing stay
//! within RFC 4861 §7.2.6 (up to MAX_NEIGHBOR_ADVERTISEMENT = 3, at least RetransTimer, 1 s,
//! apart).
//!
//! A repeat goes out only while the pod's OVS port is still the one ADD made (same name,
//! `iface-id` and `attached-mac`): a pod deleted meanwhile, and perhaps re-created elsewhere with
//! its address and another MAC, must not be announced with its old MAC again.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use kube_ovn_dataplane::{Netns, announce};
use kube_ovn_ovsdb::tables::vswitch::Interface;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::ovs::Ovs;
use crate::plan::NicPlan;

/// How long after ADD's announcement the repeat goes out (RFC 5227 ANNOUNCE_INTERVAL).
pub const REPEAT_AFTER: Duration = Duration::from_secs(2);

/// One NIC's addresses to announce again.
pub struct Repeat {
    pub ns: Netns,
    pub ifname: String,
    pub mac: [u8; 6],
    pub addresses: Vec<IpAddr>,
    /// The OVS port ADD made, with the `iface-id` and `attached-mac` it carries.
    pub host_nic: String,
    pub iface_id: String,
    pub attached_mac: String,
    /// The pod, for the logs.
    pub pod: String,
    due: Instant,
}

impl Repeat {
    /// A repeat of `plan`'s addresses out of its NIC in `ns`, due [`REPEAT_AFTER`] from now.
    pub fn new(ns: Netns, plan: &NicPlan, pod: String) -> Self {
        Self {
            ns,
            ifname: plan.ifname.clone(),
            mac: plan.mac,
            addresses: plan.addresses.iter().map(IpNet::addr).collect(),
            host_nic: plan.host_nic.clone(),
            iface_id: plan.iface_id.clone(),
            attached_mac: plan.external_ids.get("attached-mac").cloned().unwrap_or_default(),
            pod,
            due: Instant::now() + REPEAT_AFTER,
        }
    }
}

/// Where ADD queues repeats; cheap to clone.
#[derive(Clone)]
pub struct Announcer {
    tx: mpsc::UnboundedSender<Repeat>,
}

impl Announcer {
    /// Queues `repeat`; dropped when the task is gone (the daemon is stopping).
    pub fn later(&self, repeat: Repeat) {
        let _ = self.tx.send(repeat);
    }
}

/// The queue ADD writes to and the task that reads it.
pub fn channel() -> (Announcer, mpsc::UnboundedReceiver<Repeat>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Announcer { tx }, rx)
}

/// Whether `iface` is still the port ADD made for `repeat` (pure).
fn still_ours(iface: Option<&Interface>, repeat: &Repeat) -> bool {
    iface.is_some_and(|i| {
        i.external_ids.get("iface-id") == Some(&repeat.iface_id)
            && i.external_ids.get("attached-mac") == Some(&repeat.attached_mac)
    })
}

/// The task: sends each repeat when due. Every repeat has the same delay, so the queue stays in
/// due order. Runs until the daemon stops.
pub async fn repeat_task(ovs: Ovs, mut queue: mpsc::UnboundedReceiver<Repeat>) {
    let mut pending: VecDeque<Repeat> = VecDeque::new();
    let mut open = true;
    loop {
        let due = pending.front().map(|r| r.due);
        tokio::select! {
            next = queue.recv(), if open => match next {
                Some(r) => pending.push_back(r),
                None => open = false,
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                if let Some(r) = pending.pop_front() {
                    send(&ovs, r).await;
                }
            }
            () = std::future::pending(), if !open && due.is_none() => {}
        }
    }
}

async fn send(ovs: &Ovs, r: Repeat) {
    if !still_ours(ovs.interface(&r.host_nic).as_ref(), &r) {
        tracing::info!(pod = %r.pod, port = %r.host_nic, "not announcing the addresses again: the port is gone");
        return;
    }
    match announce::announce(&r.ns, &r.ifname, r.mac, &r.addresses, Duration::ZERO).await {
        Ok(announce::Announced { sent, .. }) => {
            tracing::info!(pod = %r.pod, ifname = %r.ifname, sent, "announced the pod's addresses again");
        }
        Err(e) => tracing::info!(pod = %r.pod, error = %e, "could not announce the pod's addresses again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_goes_only_to_the_port_add_made() {
        let r = Repeat {
            ns: Netns::current().unwrap(),
            ifname: "eth0".into(),
            mac: [0x0a, 0, 0, 0x64, 0, 0x0a],
            addresses: vec!["10.100.0.10".parse().unwrap()],
            host_nic: "abc_h".into(),
            iface_id: "sts-0.ul".into(),
            attached_mac: "0a:00:00:64:00:0a".into(),
            pod: "ul/sts-0".into(),
            due: Instant::now(),
        };
        let iface = |id: &str, m: &str| {
            let mut i = Interface::default();
            i.external_ids.insert("iface-id".into(), id.into());
            i.external_ids.insert("attached-mac".into(), m.into());
            i
        };
        assert!(still_ours(Some(&iface("sts-0.ul", "0a:00:00:64:00:0a")), &r));
        assert!(!still_ours(None, &r), "the port is gone (DEL)");
        assert!(
            !still_ours(Some(&iface("sts-0.ul", "0a:00:00:64:00:0b")), &r),
            "another MAC on the port now"
        );
        assert!(!still_ours(Some(&iface("other.ul", "0a:00:00:64:00:0a")), &r));
    }
}
