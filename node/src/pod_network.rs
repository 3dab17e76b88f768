//! What a pod's subnet decides about its NIC beyond the addresses, as Kube-OVN's `handleAdd`
//! decides it (`pkg/daemon/handler.go`, `ovs_linux.go configureContainerNic`), with no I/O:
//! the MTU (subnet `mtu`, else the provider network's node label for a plain underlay subnet,
//! else `--mtu`), the gateway check (mode, whether its failure fails ADD, what is checked),
//! the localnet patch port ADD waits for, and the U2O interconnection IP that replaces the
//! gateway as the default route's next hop. Read by the planner (`plan`).
//!
//! Every decision comes from the Subnet, its Vlan and the node's labels, never from what the
//! pod's annotations say about its network (DESIGN.md, "Trust"): Kube-OVN reads the MTU label of
//! the provider network the pod's `provider_network` annotation names, which a tenant can write;
//! here the provider network is the one of the subnet's Vlan.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::Subnet;

/// KubeVirt's annotation on a pod that is the target of a live migration: Kube-OVN skips the
/// gateway check for it (the VM's addresses are still on the source).
pub const KUBEVIRT_MIGRATION_JOB: &str = "kubevirt.io/migrationJobName";

/// How the gateway is probed (Kube-OVN's `gatewayCheckModeArping` / `gatewayCheckModePing`).
/// Kube-OVN's `waitNetworkReady` resolves an IPv4 gateway with ARP and pings an IPv6 one in
/// both modes; the mode names which kind of subnet asked, for the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayCheckMode {
    /// Underlay subnet without `logicalGateway`: the gateway is the physical router.
    Arping,
    /// Every other OVN subnet: the gateway is OVN's router (or the U2O port).
    Ping,
}

impl GatewayCheckMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Arping => "arping",
            Self::Ping => "ping",
        }
    }
}

/// The gateway check of one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayCheck {
    pub mode: GatewayCheckMode,
    /// False with `disableGatewayCheck: true`: one probe, its result ignored (Kube-OVN's
    /// `…NotConcerned` modes).
    pub concerned: bool,
    /// In order: the U2O interconnection IPs, then the gateways.
    pub targets: Vec<IpAddr>,
}

/// Why the subnet's settings cannot give a NIC now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubnetPlanError {
    /// The node's provider-network MTU label is not a positive integer (Kube-OVN's
    /// "invalid provider network MTU"; its ProviderNetwork task writes the label).
    #[error("node label {label}: invalid provider network MTU {value:?}: must be a positive integer")]
    ProviderNetworkMtu { label: String, value: String },
    /// `u2oInterconnection` is on and the controller has not yet allocated the IP (Kube-OVN's
    /// message).
    #[error("failed to generate u2o ip on subnet {0}")]
    U2oIpMissing(String),
    /// A `status.u2oInterconnectionIP` that is not a list of addresses.
    #[error(
        "subnet {subnet}: status.u2oInterconnectionIP {value:?} is not a comma-separated list of IP addresses"
    )]
    U2oIpInvalid { subnet: String, value: String },
    /// A plain underlay subnet whose Vlan the daemon does not know (yet): its provider network,
    /// whose NIC's MTU the pod takes, is unknown, and `--mtu` may be larger than that NIC's.
    #[error(
        "subnet {subnet}: spec.vlan: vlan {vlan} (its provider network's MTU) is not known to this daemon yet"
    )]
    VlanUnknown { subnet: String, vlan: String },
}

/// What the subnet decides for one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetPlan {
    pub mtu: u32,
    /// `None`: no check (KubeVirt live migration, an activation strategy).
    pub gateway_check: Option<GatewayCheck>,
    /// The OVS interface ovn-controller makes when the node's bridge mapping serves this
    /// subnet's localnet port (`patch-localnet.<subnet>-to-br-int`): ADD waits for it on an
    /// underlay subnet without `logicalGateway`, so the pod's first frames are not dropped.
    pub wait_patch_port: Option<String>,
    /// The default route's next hops instead of the gateways: the subnet's U2O IPs.
    pub u2o_gateways: Vec<IpAddr>,
}

/// Everything the subnet part of a plan reads.
#[derive(Debug, Clone, Copy)]
pub struct SubnetInputs<'a> {
    /// The NIC's subnet from the cache; `None` when it is not there (then only `--mtu`).
    pub subnet: Option<&'a Subnet>,
    /// The pod's annotations.
    pub annotations: Option<&'a BTreeMap<String, String>>,
    /// The NIC's provider (`ovn`, `<nad>.<ns>.ovn`).
    pub provider: &'a str,
    /// The ProviderNetwork of the subnet's Vlan (`Vlan.spec.provider`), when the daemon's
    /// Vlan cache has it.
    pub provider_network: Option<&'a str>,
    /// This node's labels.
    pub node_labels: Option<&'a BTreeMap<String, String>>,
    /// `--mtu` (or its derived default).
    pub default_mtu: u32,
    /// The gateways from the pod's annotation.
    pub gateways: &'a [IpAddr],
}

/// Whether the pod is a KubeVirt live migration's target, or an activation strategy leaves its
/// NIC to someone else (OVN activates the port when the VM announces itself, RARP): its
/// addresses are still in use elsewhere, so ADD neither checks its gateway (as Kube-OVN) nor
/// announces them (the VM does when it resumes here).
pub fn migration_target(annotations: Option<&BTreeMap<String, String>>, provider: &str) -> bool {
    let key = keys::ACTIVATION_STRATEGY.replacen("ovn.", &format!("{provider}."), 1);
    annotations.is_some_and(|a| {
        a.get(KUBEVIRT_MIGRATION_JOB).is_some_and(|v| !v.is_empty())
            || a.get(&key).is_some_and(|v| !v.is_empty())
    })
}

fn flag(value: Option<bool>) -> bool {
    value.unwrap_or(false)
}

/// The subnet's decisions for one NIC (Kube-OVN `handleAdd`).
pub fn subnet_plan(inputs: &SubnetInputs<'_>) -> Result<SubnetPlan, SubnetPlanError> {
    let Some(subnet) = inputs.subnet else {
        return Ok(SubnetPlan {
            mtu: inputs.default_mtu,
            gateway_check: None,
            wait_patch_port: None,
            u2o_gateways: Vec::new(),
        });
    };
    let spec = &subnet.spec;
    let name = subnet.metadata.name.clone().unwrap_or_default();
    let underlay = spec.vlan.as_deref().is_some_and(|v| !v.is_empty());
    let logical_gateway = flag(spec.logical_gateway);
    let u2o = flag(spec.u2o_interconnection);
    let u2o_gateways = if u2o {
        let value = subnet
            .status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SubnetPlanError::U2oIpMissing(name.clone()))?;
        value
            .split(',')
            .map(|ip| ip.trim().parse::<IpAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SubnetPlanError::U2oIpInvalid {
                subnet: name.clone(),
                value: value.to_owned(),
            })?
    } else {
        Vec::new()
    };

    let mode = if underlay && !logical_gateway {
        GatewayCheckMode::Arping
    } else {
        GatewayCheckMode::Ping
    };
    // Kube-OVN skips the check for a live migration's target and when an activation strategy
    // leaves the NIC to someone else.
    let skip = migration_target(inputs.annotations, inputs.provider);
    let gateway_check = (!skip).then(|| GatewayCheck {
        mode,
        concerned: !flag(spec.disable_gateway_check),
        targets: u2o_gateways.iter().chain(inputs.gateways).copied().collect(),
    });

    let mtu = if let Some(mtu) = spec.mtu.filter(|m| *m > 0) {
        mtu
    } else if underlay && !logical_gateway && !u2o {
        // Retried rather than guessed: the controller allocates no address on a subnet whose
        // Vlan does not exist, so this is the daemon's Vlan cache not having it yet.
        let pn = inputs.provider_network.filter(|p| !p.is_empty()).ok_or_else(|| {
            SubnetPlanError::VlanUnknown {
                subnet: name.clone(),
                vlan: spec.vlan.clone().unwrap_or_default(),
            }
        })?;
        provider_network_mtu(pn, inputs)?
    } else {
        inputs.default_mtu
    };

    let wait_patch_port = (underlay && !logical_gateway).then(|| keys::localnet_patch_port(&name));
    Ok(SubnetPlan {
        mtu,
        gateway_check,
        wait_patch_port,
        u2o_gateways,
    })
}

/// The provider NIC's MTU as the node's `<pn>.provider-network.kubernetes.io/mtu` label says.
fn provider_network_mtu(pn: &str, inputs: &SubnetInputs<'_>) -> Result<u32, SubnetPlanError> {
    let label = keys::provider_network_label(pn, "mtu");
    match inputs.node_labels.and_then(|l| l.get(&label)) {
        // No label yet: the provider network is not ready on this node; Kube-OVN then leaves
        // the MTU unset, we use --mtu.
        None => Ok(inputs.default_mtu),
        Some(value) => {
            value
                .parse::<u32>()
                .ok()
                .filter(|m| *m > 0)
                .ok_or_else(|| SubnetPlanError::ProviderNetworkMtu {
                    label,
                    value: value.clone(),
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)] // json! literals at every call
    fn subnet(spec: serde_json::Value, status: serde_json::Value) -> Subnet {
        serde_json::from_value(
            serde_json::json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": "ul"}, "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    const GW: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(10, 100, 0, 1))];

    fn plan(
        s: &Subnet,
        ann: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<SubnetPlan, SubnetPlanError> {
        subnet_plan(&SubnetInputs {
            subnet: Some(s),
            annotations: Some(ann),
            provider: "ovn",
            // The provider network of the subnet's Vlan (v100 → pn1).
            provider_network: Some("pn1"),
            node_labels: Some(labels),
            default_mtu: 1400,
            gateways: &GW,
        })
    }

    #[test]
    fn plain_underlay_arpings_the_router_waits_for_the_patch_port_and_takes_the_label_mtu() {
        let s = subnet(serde_json::json!({"vlan": "v100"}), serde_json::json!({}));
        let ann = map(&[("ovn.kubernetes.io/provider_network", "pn1")]);
        let labels = map(&[("pn1.provider-network.kubernetes.io/mtu", "1372")]);
        let p = plan(&s, &ann, &labels).unwrap();
        assert_eq!(p.mtu, 1372);
        assert_eq!(
            p.gateway_check,
            Some(GatewayCheck {
                mode: GatewayCheckMode::Arping,
                concerned: true,
                targets: GW.to_vec()
            })
        );
        assert_eq!(p.wait_patch_port.as_deref(), Some("patch-localnet.ul-to-br-int"));
        assert!(p.u2o_gateways.is_empty());
        // No label yet: --mtu. A bad label: Kube-OVN's error, naming the label.
        assert_eq!(plan(&s, &ann, &map(&[])).unwrap().mtu, 1400);
        for bad in ["0", "-1", "big"] {
            let labels = map(&[("pn1.provider-network.kubernetes.io/mtu", bad)]);
            let err = plan(&s, &ann, &labels).unwrap_err();
            assert!(
                err.to_string().contains("pn1.provider-network.kubernetes.io/mtu"),
                "{err}"
            );
        }
        // The subnet's own MTU wins.
        let s = subnet(
            serde_json::json!({"vlan": "v100", "mtu": 1300}),
            serde_json::json!({}),
        );
        assert_eq!(plan(&s, &ann, &labels).unwrap().mtu, 1300);
    }

    #[test]
    fn disable_gateway_check_probes_once_and_ignores_the_result() {
        let s = subnet(
            serde_json::json!({"vlan": "v100", "disableGatewayCheck": true}),
            serde_json::json!({}),
        );
        let check = plan(&s, &map(&[]), &map(&[])).unwrap().gateway_check.unwrap();
        assert!(!check.concerned);
        // A live migration's target and an activation strategy: no check at all.
        for (k, v) in [
            (KUBEVIRT_MIGRATION_JOB, "job-1"),
            ("ovn.kubernetes.io/activation_strategy", "manual"),
        ] {
            assert_eq!(plan(&s, &map(&[(k, v)]), &map(&[])).unwrap().gateway_check, None);
        }
    }

    #[test]
    fn logical_gateway_and_overlay_ping_ovn_s_router_with_the_daemon_mtu() {
        let labels = map(&[("pn1.provider-network.kubernetes.io/mtu", "1372")]);
        let ann = map(&[("ovn.kubernetes.io/provider_network", "pn1")]);
        for spec in [
            serde_json::json!({"vlan": "v100", "logicalGateway": true}),
            serde_json::json!({}),
        ] {
            let p = plan(&subnet(spec, serde_json::json!({})), &ann, &labels).unwrap();
            assert_eq!(p.mtu, 1400);
            assert_eq!(p.gateway_check.unwrap().mode, GatewayCheckMode::Ping);
            assert_eq!(p.wait_patch_port, None);
        }
    }

    #[test]
    fn u2o_routes_via_the_interconnection_ip_and_checks_it_first() {
        let spec = serde_json::json!({"vlan": "v100", "u2oInterconnection": true});
        let labels = map(&[("pn1.provider-network.kubernetes.io/mtu", "1372")]);
        let ann = map(&[("ovn.kubernetes.io/provider_network", "pn1")]);
        let err = plan(&subnet(spec.clone(), serde_json::json!({})), &ann, &labels).unwrap_err();
        assert_eq!(err.to_string(), "failed to generate u2o ip on subnet ul");
        let s = subnet(spec, serde_json::json!({"u2oInterconnectionIP": "10.100.0.254"}));
        let p = plan(&s, &ann, &labels).unwrap();
        let u2o: IpAddr = "10.100.0.254".parse().unwrap();
        assert_eq!(p.u2o_gateways, vec![u2o]);
        assert_eq!(p.gateway_check.unwrap().targets, vec![u2o, GW[0]]);
        assert_eq!(p.mtu, 1400, "U2O: the daemon's MTU, not the label (Kube-OVN)");
        assert_eq!(p.wait_patch_port.as_deref(), Some("patch-localnet.ul-to-br-int"));
    }

    #[test]
    fn an_unknown_subnet_gives_the_daemon_mtu_and_no_check() {
        let p = subnet_plan(&SubnetInputs {
            subnet: None,
            annotations: None,
            provider: "ovn",
            provider_network: None,
            node_labels: None,
            default_mtu: 1400,
            gateways: &GW,
        })
        .unwrap();
        assert_eq!((p.mtu, p.gateway_check, p.wait_patch_port), (1400, None, None));
    }

    /// A tenant writes its pod's annotations: one naming another provider network (whose NIC
    /// has a larger MTU on this node) must not give the pod that MTU. The subnet's Vlan decides.
    #[test]
    fn the_mtu_label_is_the_subnets_provider_networks_not_the_one_the_pod_names() {
        let s = subnet(serde_json::json!({"vlan": "v100"}), serde_json::json!({}));
        let forged = map(&[("ovn.kubernetes.io/provider_network", "pn2")]);
        let labels = map(&[
            ("pn1.provider-network.kubernetes.io/mtu", "1372"),
            ("pn2.provider-network.kubernetes.io/mtu", "9000"),
        ]);
        assert_eq!(plan(&s, &forged, &labels).unwrap().mtu, 1372);
        assert_eq!(
            plan(&s, &map(&[]), &labels).unwrap().mtu,
            1372,
            "no annotation needed"
        );
        // The Vlan not in the daemon's cache (yet): retried, whatever the pod says, rather than
        // --mtu (1400), larger than this NIC's 1372.
        let unknown_vlan = subnet_plan(&SubnetInputs {
            subnet: Some(&s),
            annotations: Some(&forged),
            provider: "ovn",
            provider_network: None,
            node_labels: Some(&labels),
            default_mtu: 1400,
            gateways: &GW,
        });
        assert_eq!(
            unknown_vlan.unwrap_err().to_string(),
            "subnet ul: spec.vlan: vlan v100 (its provider network's MTU) is not known to this daemon yet"
        );
    }
}
