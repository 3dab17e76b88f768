//! The external gateway's and OVN BFD's flags (Kube-OVN's names and defaults,
//! `pkg/controller/config.go`): the logical switch VPC routers reach the outside through
//! (`--external-gateway-switch`, its localnet's `network_name` and VLAN), where the
//! `ovn-external-gw-config` ConfigMap lives, whether OVN EIPs/SNAT are acted on, and the timers
//! of the BFD rows the controller writes for `Vpc.spec.enableBfd`.

use super::{FlagError, bad, name};

/// The flags, as given.
#[derive(Debug, Clone, clap::Args)]
pub struct ExternalFlags {
    /// The logical switch (and Subnet) of the external network: VPC routers get their gateway
    /// port on it, OvnEips come from its IPAM.
    #[arg(long, env = "EXTERNAL_GATEWAY_SWITCH", default_value = "external")]
    pub external_gateway_switch: String,
    /// The physical network name of the external switch's localnet port (`network_name`, the
    /// name in the nodes' `ovn-bridge-mappings`).
    #[arg(long, env = "EXTERNAL_GATEWAY_NET", default_value = "external")]
    pub external_gateway_net: String,
    /// The VLAN tag of the external switch's localnet port; 0 is untagged.
    #[arg(
        long,
        env = "EXTERNAL_GATEWAY_VLANID",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub external_gateway_vlanid: i64,
    /// The namespace of the `ovn-external-gw-config` ConfigMap.
    #[arg(long, env = "EXTERNAL_GATEWAY_CONFIG_NS", default_value = "kube-system")]
    pub external_gateway_config_ns: String,
    /// Act on OvnEips, OvnFips, OvnSnatRules, OvnDnatRules, the ConfigMap and VPCs'
    /// `enableExternal` (Kube-OVN's "Enable EIP and SNAT").
    #[arg(long, env = "ENABLE_EIP_SNAT", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_eip_snat: bool,
    /// BFD: the minimum interval, in milliseconds, at which OVN sends BFD control packets.
    #[arg(
        long,
        env = "BFD_MIN_TX",
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub bfd_min_tx: i64,
    /// BFD: the minimum interval, in milliseconds, between received BFD control packets.
    #[arg(
        long,
        env = "BFD_MIN_RX",
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub bfd_min_rx: i64,
    /// BFD: the detection time multiplier (RFC 5880 `Detect Mult`).
    #[arg(long, env = "DETECT_MULT", default_value_t = 3, allow_negative_numbers = true)]
    pub detect_mult: i64,
}

/// The validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalSettings {
    /// `--external-gateway-switch`.
    pub switch: String,
    /// `--external-gateway-net`.
    pub net: String,
    /// `--external-gateway-vlanid`; `None` for 0 (no `tag` on the localnet port).
    pub vlan_id: Option<u16>,
    /// `--external-gateway-config-ns`.
    pub config_ns: String,
    /// `--enable-eip-snat`.
    pub enable_eip_snat: bool,
    pub bfd: BfdTimers,
}

/// The BFD row's `min_tx`, `min_rx` (milliseconds) and `detect_mult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdTimers {
    pub min_tx: i64,
    pub min_rx: i64,
    pub detect_mult: i64,
}

/// The longest BFD interval in milliseconds: RFC 5880 §4.1 carries intervals as 32-bit
/// microseconds.
const MAX_BFD_INTERVAL_MS: i64 = u32::MAX as i64 / 1000;

impl ExternalFlags {
    pub fn validate(&self) -> Result<ExternalSettings, FlagError> {
        let vlan_id = u16::try_from(self.external_gateway_vlanid)
            .ok()
            .filter(|id| *id <= 4095)
            .ok_or_else(|| {
                bad(
                    "external-gateway-vlanid",
                    &self.external_gateway_vlanid.to_string(),
                    "must be between 0 (untagged) and 4095",
                )
            })?;
        for (flag, ms) in [("bfd-min-tx", self.bfd_min_tx), ("bfd-min-rx", self.bfd_min_rx)] {
            // 0 is not refused by the NB schema for min_rx, but it asks the peer to send nothing
            // (RFC 5880 §6.8.1), so OVN could never see a gateway go down.
            if !(1..=MAX_BFD_INTERVAL_MS).contains(&ms) {
                return Err(bad(
                    flag,
                    &ms.to_string(),
                    format!("must be between 1 and {MAX_BFD_INTERVAL_MS} milliseconds"),
                ));
            }
        }
        // An 8-bit field on the wire (RFC 5880 §4.1).
        if !(1..=255).contains(&self.detect_mult) {
            return Err(bad(
                "detect-mult",
                &self.detect_mult.to_string(),
                "must be between 1 and 255",
            ));
        }
        Ok(ExternalSettings {
            switch: name("external-gateway-switch", &self.external_gateway_switch)?,
            net: name("external-gateway-net", &self.external_gateway_net)?,
            vlan_id: (vlan_id > 0).then_some(vlan_id),
            config_ns: name("external-gateway-config-ns", &self.external_gateway_config_ns)?,
            enable_eip_snat: self.enable_eip_snat,
            bfd: BfdTimers {
                min_tx: self.bfd_min_tx,
                min_rx: self.bfd_min_rx,
                detect_mult: self.detect_mult,
            },
        })
    }
}
