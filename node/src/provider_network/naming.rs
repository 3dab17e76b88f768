//! Which names a provider network's bridge and NIC carry (`spec.exchangeLinkName`), and how the
//! bridge's `external_ids` record them. Pure.
//!
//! Kube-OVN (`pkg/daemon/init.go ovsInitProviderNetwork`, `init_linux.go
//! changeProviderNicName`): without `exchangeLinkName` the NIC `eth1` joins the bridge `br-<pn>`
//! and the node's addresses move onto `br-<pn>`; with it, the NIC is renamed `br-<pn>` and the
//! bridge is called `eth1`, so the node's addresses stay on an interface called `eth1` (the
//! bridge's internal port) — what users with configs, monitoring or kubelet `--node-ip` bound
//! to the interface name want. `ovn-bridge-mappings` then says `<pn>:eth1`, the bridge's
//! `external_ids:exchange-link-name=true`, and the node label `interface` keeps the NIC's
//! original name. The give-back renames the NIC back.

use std::collections::BTreeMap;

use kube_ovn_api::crd::provider_network::provider_bridge_name;

use crate::ovs::provider::PROVIDER_NIC;

/// Bridge `external_ids` key: the provider network the bridge is for.
pub const PROVIDER_KEY: &str = "kube-ovn-rs/provider-network";

/// Bridge `external_ids` key (Kube-OVN's): whether the bridge and the NIC swapped names.
pub const EXCHANGE_KEY: &str = "exchange-link-name";

/// The names of one provider network's bridge and NIC on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    /// The OVS bridge, and its internal port where the node's addresses live: `br-<pn>`, or
    /// the NIC's original name when exchanged.
    pub bridge: String,
    /// The NIC's original name (the `interface` label, `spec.defaultInterface`).
    pub nic: String,
    /// The NIC's name while it is in the bridge (its OVS port): the original name, or
    /// `br-<pn>` when exchanged.
    pub link: String,
    /// `spec.exchangeLinkName`.
    pub exchanged: bool,
}

impl Naming {
    /// The names for NIC `nic` of provider network `pn`.
    pub fn new(pn: &str, nic: &str, exchanged: bool) -> Self {
        let br = provider_bridge_name(pn);
        if exchanged {
            Self {
                bridge: nic.to_owned(),
                nic: nic.to_owned(),
                link: br,
                exchanged,
            }
        } else {
            Self {
                bridge: br,
                nic: nic.to_owned(),
                link: nic.to_owned(),
                exchanged,
            }
        }
    }

    /// The names a bridge of ours records in its `external_ids` (`None`: not ours). A bridge
    /// made before `exchange-link-name` was honoured says `false`.
    pub fn of_bridge(name: &str, external_ids: &BTreeMap<String, String>) -> Option<Self> {
        let nic = external_ids.get(PROVIDER_NIC)?;
        let exchanged = external_ids.get(EXCHANGE_KEY).is_some_and(|v| v == "true");
        let pn = match external_ids.get(PROVIDER_KEY) {
            Some(pn) => pn.clone(),
            // Without the key the name is `br-<pn>` (only an exchanged bridge is named otherwise,
            // and every one of those records it).
            None => name.strip_prefix("br-")?.to_owned(),
        };
        let naming = Self::new(&pn, nic, exchanged);
        (naming.bridge == name).then_some(naming)
    }

    /// What the bridge's `external_ids` say about the names (the snapshot is added by the
    /// mover).
    pub fn external_ids(&self, pn: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("vendor".to_owned(), "kube-ovn".to_owned()),
            (EXCHANGE_KEY.to_owned(), self.exchanged.to_string()),
            (PROVIDER_NIC.to_owned(), self.nic.clone()),
            (PROVIDER_KEY.to_owned(), pn.to_owned()),
        ])
    }
}

/// Why these names cannot be used, if they cannot: with `exchangeLinkName` a NIC already called
/// `br-<pn>` has no name to give the bridge.
pub fn naming_refusal(pn: &str, naming: &Naming) -> Option<String> {
    (naming.exchanged && naming.nic == naming.link).then(|| {
        format!(
            "provider network {pn}: spec.exchangeLinkName: nic {} is already called {}, the name it \
             would be given; unset exchangeLinkName or rename the nic",
            naming.nic, naming.link
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanged_names_swap_and_are_read_back_from_the_bridge() {
        let plain = Naming::new("pn1", "eth1", false);
        assert_eq!((plain.bridge.as_str(), plain.link.as_str()), ("br-pn1", "eth1"));
        let swapped = Naming::new("pn1", "eth1", true);
        assert_eq!(
            (
                swapped.bridge.as_str(),
                swapped.link.as_str(),
                swapped.nic.as_str()
            ),
            ("eth1", "br-pn1", "eth1")
        );
        let ids = swapped.external_ids("pn1");
        assert_eq!(ids[EXCHANGE_KEY], "true");
        assert_eq!(Naming::of_bridge("eth1", &ids), Some(swapped));
        // A record that does not fit the bridge's name is not ours.
        assert_eq!(Naming::of_bridge("eth2", &ids), None);
        let ids = plain.external_ids("pn1");
        assert_eq!(ids[EXCHANGE_KEY], "false");
        assert_eq!(Naming::of_bridge("br-pn1", &ids), Some(plain.clone()));
        let mut old = ids.clone();
        old.remove(PROVIDER_KEY);
        old.remove(EXCHANGE_KEY);
        assert_eq!(Naming::of_bridge("br-pn1", &old), Some(plain));
        assert!(naming_refusal("pn1", &Naming::new("pn1", "br-pn1", true)).is_some());
        assert!(naming_refusal("pn1", &Naming::new("pn1", "br-pn1", false)).is_none());
    }
}
