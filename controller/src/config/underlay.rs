//! The network type and the default underlay (Kube-OVN's `--network-type=vlan` flags,
//! `pkg/controller/config.go`, and the checks of `init.go initDefaultVlan /
//! initDefaultLogicalSwitch`): with `vlan`, the controller creates the ProviderNetwork
//! `--default-provider-name` on `--default-interface-name`, the Vlan `--default-vlan-name` with
//! `--default-vlan-id`, and makes the default subnet use it ([`crate::reconcile::startup`]).

use super::{FlagError, bad, name};

/// `--network-type`: the tunnel of overlay subnets, or `vlan` for an underlay default subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkType {
    Geneve,
    Vxlan,
    Stt,
    Vlan,
}

impl NetworkType {
    fn parse(value: &str) -> Result<Self, FlagError> {
        Ok(match value {
            "geneve" => Self::Geneve,
            "vxlan" => Self::Vxlan,
            "stt" => Self::Stt,
            "vlan" => Self::Vlan,
            _ => return Err(bad("network-type", value, "must be geneve, vxlan, stt or vlan")),
        })
    }
}

/// The flags of the default underlay, Kube-OVN's names and defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct UnderlayFlags {
    /// `geneve`, `vxlan` or `stt` (the daemons' tunnel; the controller needs nothing of it), or
    /// `vlan`: the default subnet is an underlay on the flags below.
    #[arg(long, env = "NETWORK_TYPE", default_value = "geneve")]
    pub network_type: String,
    /// The ProviderNetwork of `--network-type=vlan`, and the provider of every Vlan whose
    /// `spec.provider` is empty.
    #[arg(long, env = "DEFAULT_PROVIDER_NAME", default_value = "provider")]
    pub default_provider_name: String,
    /// The host NIC of the default ProviderNetwork (`defaultInterface`); required with
    /// `--network-type=vlan`.
    #[arg(long, env = "DEFAULT_INTERFACE_NAME", default_value = "")]
    pub default_interface_name: String,
    /// The default ProviderNetwork's `exchangeLinkName`.
    #[arg(long, env = "DEFAULT_EXCHANGE_LINK_NAME", default_value_t = false, action = clap::ArgAction::Set)]
    pub default_exchange_link_name: bool,
    /// The Vlan the default subnet uses with `--network-type=vlan`.
    #[arg(long, env = "DEFAULT_VLAN_NAME", default_value = "ovn-vlan")]
    pub default_vlan_name: String,
    /// That Vlan's ID (0 untagged, up to 4095).
    #[arg(
        long,
        env = "DEFAULT_VLAN_ID",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub default_vlan_id: i64,
    /// The default underlay subnet's `logicalGateway`.
    #[arg(long, env = "DEFAULT_LOGICAL_GATEWAY", default_value_t = false, action = clap::ArgAction::Set)]
    pub default_logical_gateway: bool,
    /// The default underlay subnet's `u2oInterconnection`.
    #[arg(long, env = "DEFAULT_U2O_INTERCONNECTION", default_value_t = false, action = clap::ArgAction::Set)]
    pub default_u2o_interconnection: bool,
}

/// What `--network-type=vlan` creates at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultUnderlay {
    /// The ProviderNetwork (`--default-provider-name`).
    pub provider: String,
    /// Its `defaultInterface`.
    pub interface: String,
    pub exchange_link_name: bool,
    /// The Vlan (`--default-vlan-name`) and its ID.
    pub vlan: String,
    pub vlan_id: u16,
    /// The default subnet's `logicalGateway` and `u2oInterconnection`.
    pub logical_gateway: bool,
    pub u2o_interconnection: bool,
}

/// The longest ProviderNetwork name: its bridge `br-<name>` must fit Linux's 15-character
/// interface names (Kube-OVN documents the same limit of 12).
pub const MAX_PROVIDER_NAME: usize = 12;

/// A ProviderNetwork name: a DNS label of at most [`MAX_PROVIDER_NAME`] characters.
pub fn provider_name(flag: &'static str, value: &str) -> Result<String, FlagError> {
    let n = name(flag, value)?;
    if n.len() > MAX_PROVIDER_NAME {
        return Err(bad(
            flag,
            value,
            format!(
                "longer than {MAX_PROVIDER_NAME} characters: the bridge br-{value} would not fit a \
                 15-character interface name"
            ),
        ));
    }
    Ok(n)
}

impl UnderlayFlags {
    /// The network type, the default provider name, and the default underlay when
    /// `--network-type=vlan`. Kube-OVN's messages where it refuses the same.
    pub fn validate(&self) -> Result<(NetworkType, String, Option<DefaultUnderlay>), FlagError> {
        let network_type = NetworkType::parse(&self.network_type)?;
        let provider = provider_name("default-provider-name", &self.default_provider_name)?;
        if network_type != NetworkType::Vlan {
            return Ok((network_type, provider, None));
        }
        if self.default_interface_name.is_empty() {
            return Err(bad(
                "default-interface-name",
                "",
                "no host nic for vlan (required with --network-type=vlan)",
            ));
        }
        let interface = &self.default_interface_name;
        if interface.len() > 15 || interface.contains('/') || interface.chars().any(char::is_whitespace) {
            return Err(bad(
                "default-interface-name",
                interface,
                "not a Linux interface name (at most 15 characters, no '/' or whitespace)",
            ));
        }
        let vlan_id = u16::try_from(self.default_vlan_id)
            .ok()
            .filter(|id| *id <= 4095)
            .ok_or_else(|| {
                bad(
                    "default-vlan-id",
                    &self.default_vlan_id.to_string(),
                    "the default vlan id is not between 1-4095",
                )
            })?;
        if self.default_logical_gateway && self.default_u2o_interconnection {
            return Err(bad(
                "default-u2o-interconnection",
                "true",
                "logicalGateway and u2oInterconnection can't be opened at the same time \
                 (--default-logical-gateway is true too)",
            ));
        }
        Ok((
            network_type,
            provider.clone(),
            Some(DefaultUnderlay {
                provider,
                interface: interface.clone(),
                exchange_link_name: self.default_exchange_link_name,
                vlan: name("default-vlan-name", &self.default_vlan_name)?,
                vlan_id,
                logical_gateway: self.default_logical_gateway,
                u2o_interconnection: self.default_u2o_interconnection,
            }),
        ))
    }
}
