//! Provider-prefixed keys: Kube-OVN keeps one set of pod annotations per network.
//!
//! The primary network's provider is `ovn`, so its keys are `ovn.kubernetes.io/<name>`. An
//! attachment network through a Kube-OVN NetworkAttachmentDefinition `<nad>` in namespace `<ns>`
//! has provider `<nad>.<ns>.ovn` and keys `<nad>.<ns>.ovn.kubernetes.io/<name>`; an IPAM-only
//! NAD (macvlan with `ipam.type: kube-ovn`) has provider `<nad>.<ns>`. A key is split back into
//! provider and name at the first `.kubernetes.io/`.

/// The primary network's provider.
pub const PRIMARY_PROVIDER: &str = "ovn";

const DOMAIN: &str = ".kubernetes.io/";

/// Why a provider key cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderKeyError {
    /// The provider is empty, has whitespace or `/`, or starts or ends with `.`.
    #[error("invalid provider {0:?}: expected `ovn`, `<nad>.<ns>.ovn` or `<nad>.<ns>`")]
    InvalidProvider(String),
    /// The key name is empty or has whitespace or `/`.
    #[error("invalid annotation name {0:?}: expected e.g. `ip_address` or `ovn.kubernetes.io/ip_address`")]
    InvalidName(String),
}

/// The provider of a Kube-OVN attachment network: `<nad>.<ns>.ovn`.
pub fn attachment_provider(nad: &str, namespace: &str) -> String {
    format!("{nad}.{namespace}.{PRIMARY_PROVIDER}")
}

/// The key for `name` on `provider`'s network.
///
/// `name` may be a bare name (`ip_address`) or a primary-network key constant from
/// [`super::keys`] (`ovn.kubernetes.io/ip_address`), whose prefix is replaced:
/// `provider_key("ovn", keys::IP_ADDRESS)` is the constant itself and
/// `provider_key("net1.ns1.ovn", keys::IP_ADDRESS)` is `net1.ns1.ovn.kubernetes.io/ip_address`.
pub fn provider_key(provider: &str, name: &str) -> Result<String, ProviderKeyError> {
    let bare = name.strip_prefix(super::keys::PREFIX).unwrap_or(name);
    if bare.is_empty() || bare.contains('/') || bare.contains(char::is_whitespace) {
        return Err(ProviderKeyError::InvalidName(name.to_owned()));
    }
    if provider.is_empty()
        || provider.contains('/')
        || provider.contains(char::is_whitespace)
        || provider.starts_with('.')
        || provider.ends_with('.')
        || provider.contains("..")
    {
        return Err(ProviderKeyError::InvalidProvider(provider.to_owned()));
    }
    Ok(format!("{provider}{DOMAIN}{bare}"))
}

/// A key split into provider and name (borrowed from the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderKey<'a> {
    /// `ovn`, `<nad>.<ns>.ovn`, ...
    pub provider: &'a str,
    /// `ip_address`, `logical_switch`, ... (per-interface keys keep their `.<ifname>` suffix).
    pub name: &'a str,
}

impl ProviderKey<'_> {
    /// Whether this is the primary network's key.
    pub fn is_primary(&self) -> bool {
        self.provider == PRIMARY_PROVIDER
    }
}

/// Splits `<provider>.kubernetes.io/<name>`; `None` for keys of any other shape (other
/// domains, an empty provider or name).
pub fn parse_provider_key(key: &str) -> Option<ProviderKey<'_>> {
    let (provider, name) = key.split_once(DOMAIN)?;
    if provider.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some(ProviderKey { provider, name })
}

#[cfg(test)]
mod tests {
    use super::super::keys;
    use super::*;

    #[test]
    fn primary_provider_gives_the_plain_keys() {
        assert_eq!(provider_key("ovn", keys::IP_ADDRESS).unwrap(), keys::IP_ADDRESS);
        assert_eq!(
            provider_key("ovn", "logical_switch").unwrap(),
            keys::LOGICAL_SWITCH
        );
    }

    #[test]
    fn attachment_keys_build_and_split() {
        let provider = attachment_provider("attachnet", "default");
        assert_eq!(provider, "attachnet.default.ovn");
        let key = provider_key(&provider, keys::IP_ADDRESS).unwrap();
        assert_eq!(key, "attachnet.default.ovn.kubernetes.io/ip_address");
        let split = parse_provider_key(&key).unwrap();
        assert_eq!(
            split,
            ProviderKey {
                provider: "attachnet.default.ovn",
                name: "ip_address"
            }
        );
        assert!(!split.is_primary());
        let primary = parse_provider_key(keys::ROUTED).unwrap();
        assert!(primary.is_primary());
        assert_eq!(primary.name, "routed");
        // IPAM-only NAD provider and a per-interface key.
        let ipam = parse_provider_key("macvlan.ns1.kubernetes.io/ip_address.net2").unwrap();
        assert_eq!(
            ipam,
            ProviderKey {
                provider: "macvlan.ns1",
                name: "ip_address.net2"
            }
        );
    }

    #[test]
    fn bad_providers_and_names_are_rejected() {
        for bad in ["", ".ovn", "a..b", "a/b", "a b", "ovn."] {
            assert_eq!(
                provider_key(bad, keys::IP_ADDRESS),
                Err(ProviderKeyError::InvalidProvider(bad.to_owned())),
                "{bad:?}"
            );
        }
        for bad in ["", "ovn.kubernetes.io/", "a/b", "a b"] {
            assert_eq!(
                provider_key("ovn", bad),
                Err(ProviderKeyError::InvalidName(bad.to_owned())),
                "{bad:?}"
            );
        }
        for key in [
            "app.kubernetes.io/name",
            "kubernetes.io/hostname",
            "k8s.v1.cni.cncf.io/networks",
        ] {
            // `app.kubernetes.io/name` does split; it is up to the caller to know `app` is no
            // provider. The other two have no `<provider>.kubernetes.io/` shape at all.
            if key.starts_with("app.") {
                assert!(parse_provider_key(key).is_some());
            } else {
                assert!(parse_provider_key(key).is_none(), "{key}");
            }
        }
        assert!(parse_provider_key(".kubernetes.io/x").is_none());
        assert!(parse_provider_key("ovn.kubernetes.io/").is_none());
    }
}
