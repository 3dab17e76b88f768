//! The attributes of one prefix to one peer: the peer's defaults (its BgpPeer's communities,
//! large communities, LOCAL_PREF, MED) merged with every advertisement that selects the prefix
//! for that peer.
//!
//! - Communities and large communities: the union of the peer's and every advertisement's,
//!   sorted and deduplicated (they are tags; nothing to choose between).
//! - LOCAL_PREF: the highest; MED: the lowest; AS-path prepend: the fewest. Each is the value a
//!   receiver prefers (RFC 4271 §9.1.2.2: higher degree of preference, lower MED, shorter
//!   AS_PATH), so the merged route is the most attractive any selecting advertisement asked
//!   for, whatever the order the advertisements are listed in.
//! - An advertisement's value overrides the peer's default: the default applies only when no
//!   selecting advertisement sets that attribute.
//!
//! An advertisement whose value lost is a [`Loss`]: the run loop sets its `Conflict` condition.

use super::ValidatedAdvertisement;
use crate::bgp::rib_out::RouteAttributes;

/// One advertisement's value that another's beat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// Index of the losing advertisement.
    pub loser: usize,
    /// `spec.localPref`, `spec.med`, `spec.asPathPrepend`.
    pub field: &'static str,
    pub value: u32,
    /// Name of the (first, by name) advertisement with the winning value, and the value.
    pub winner: String,
    pub winning: u32,
    /// The rule, for the message.
    pub rule: &'static str,
}

/// The merged attributes and the losses; `ads` are indices into `all`, sorted by name.
pub fn merge(
    defaults: &RouteAttributes,
    ads: &[usize],
    all: &[ValidatedAdvertisement],
) -> (RouteAttributes, Vec<Loss>) {
    let mut attributes = defaults.clone();
    let mut losses = Vec::new();
    for &a in ads {
        attributes.communities.extend_from_slice(&all[a].communities);
        attributes
            .large_communities
            .extend_from_slice(&all[a].large_communities);
    }
    attributes.communities.sort_unstable();
    attributes.communities.dedup();
    attributes.large_communities.sort_unstable();
    attributes.large_communities.dedup();

    let mut pick =
        |field, rule, value: &dyn Fn(&ValidatedAdvertisement) -> Option<u32>, best: fn(u32, u32) -> u32| {
            let winning = ads.iter().filter_map(|&a| value(&all[a])).reduce(best)?;
            let winner = ads
                .iter()
                .find(|&&a| value(&all[a]) == Some(winning))
                .map(|&a| all[a].name.clone())
                .unwrap_or_default();
            for &a in ads {
                if let Some(v) = value(&all[a]).filter(|v| *v != winning) {
                    losses.push(Loss {
                        loser: a,
                        field,
                        value: v,
                        winner: winner.clone(),
                        winning,
                        rule,
                    });
                }
            }
            Some(winning)
        };
    if let Some(v) = pick(
        "spec.localPref",
        "the highest LOCAL_PREF wins",
        &|ad| ad.local_pref,
        u32::max,
    ) {
        attributes.local_pref = Some(v);
    }
    if let Some(v) = pick("spec.med", "the lowest MED wins", &|ad| ad.med, u32::min) {
        attributes.med = Some(v);
    }
    if let Some(v) = pick(
        "spec.asPathPrepend",
        "the fewest prepends win",
        &|ad| ad.as_path_prepend.map(u32::from),
        u32::min,
    ) {
        attributes.as_path_prepend = u8::try_from(v).unwrap_or(u8::MAX);
    }
    (attributes, losses)
}
