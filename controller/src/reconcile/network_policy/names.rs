//! The names of a NetworkPolicy's port group (and so of its address sets and meters, which are
//! derived from it), such that two policies never share one.
//!
//! Kube-OVN names the port group `<np>.<ns>` with every `-` made `.` ([`kube_ovn_name`]), so
//! different policies can get the same name: `allow` in namespace `team-x` and `allow-team` in
//! namespace `x` are both `allow.team.x`. Sharing it, the policy reconciled last would take the
//! group (the other's pods drop out of it), and deleting one would delete the other's rows.
//!
//! The rule, decided from all policies in the cache so that it does not depend on which is
//! reconciled first:
//!
//! - a policy keeps Kube-OVN's name unless an older policy (`creationTimestamp`, then
//!   namespace/name, as for Service addresses) has the same Kube-OVN name;
//! - such a younger policy is named [`hashed_name`]: Kube-OVN's name, `_`, and 16 hex digits of
//!   a 64-bit FNV-1a hash of `<ns>/<np>`. No Kube-OVN name contains `_` (policy and namespace
//!   names are DNS names), so a hashed name never equals another policy's Kube-OVN name;
//! - a group of that name that belongs to another policy in the northbound DB (its
//!   `external_ids:np`), for instance while the other one moves to its own name, is never taken
//!   over: the reconcile waits until it is gone ([`super::write_plan`]).
//!
//! When the older policy goes, the younger gets Kube-OVN's name back (the policy controller
//! reconciles the policies of a name when one of that name comes or goes), and its rows under
//! the hashed name are removed with the rename.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use kube_ovn_api::names;

/// Port group name of a policy: Kube-OVN's `-` → `.`, and `np` in front of a name that does not
/// start with a letter (OVN needs address set names to, and `$<pg>_ip4` derives from it).
pub fn port_group_name(policy: &str, namespace: &str) -> String {
    let pg = names::network_policy_port_group(policy, namespace);
    if pg.starts_with(|c: char| c.is_ascii_alphabetic()) {
        pg
    } else {
        format!("np{pg}")
    }
}

/// Kube-OVN's port group name of a policy (see [`port_group_name`]).
pub fn kube_ovn_name(np: &NetworkPolicy) -> String {
    port_group_name(&np.name_any(), &np.namespace().unwrap_or_default())
}

/// `<ns>/<np>`.
pub fn key_of(np: &NetworkPolicy) -> String {
    format!("{}/{}", np.namespace().unwrap_or_default(), np.name_any())
}

/// FNV-1a, 64 bits: stable across builds and releases (std's hashers are not), and short.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The name of a policy whose Kube-OVN name an older policy has.
pub fn hashed_name(np: &NetworkPolicy) -> String {
    format!("{}_{:016x}", kube_ovn_name(np), fnv1a(key_of(np).as_bytes()))
}

fn age(np: &NetworkPolicy) -> (bool, Option<Time>, String) {
    let ts = np.metadata.creation_timestamp.clone();
    (ts.is_none(), ts, key_of(np))
}

/// The port group name of `np` among `all` (the cached policies, `np` may be among them).
pub fn port_group_of(np: &NetworkPolicy, all: &[std::sync::Arc<NetworkPolicy>]) -> String {
    let name = kube_ovn_name(np);
    let me = key_of(np);
    let mine = age(np);
    let older_twin = all
        .iter()
        .filter(|o| key_of(o) != me && o.metadata.deletion_timestamp.is_none())
        .any(|o| kube_ovn_name(o) == name && age(o) < mine);
    if older_twin { hashed_name(np) } else { name }
}

/// The other policies of the same Kube-OVN name as `np` (whose names a change of `np` decides).
pub fn twins_of(
    np: &NetworkPolicy,
    all: &[std::sync::Arc<NetworkPolicy>],
) -> Vec<std::sync::Arc<NetworkPolicy>> {
    let name = kube_ovn_name(np);
    let me = key_of(np);
    all.iter()
        .filter(|o| key_of(o) != me && kube_ovn_name(o) == name)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn np(ns: &str, name: &str, created: &str) -> Arc<NetworkPolicy> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": ns, "creationTimestamp": created}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn colliding_kube_ovn_names_give_the_younger_policy_a_hashed_name_in_any_order() {
        let victim = np("bt-team-x", "allow", "2026-01-01T00:00:00Z");
        let attacker = np("x", "allow-bt-team", "2026-01-02T00:00:00Z");
        assert_eq!(kube_ovn_name(&victim), "allow.bt.team.x");
        assert_eq!(kube_ovn_name(&attacker), "allow.bt.team.x");
        for all in [
            vec![victim.clone(), attacker.clone()],
            vec![attacker.clone(), victim.clone()],
        ] {
            assert_eq!(port_group_of(&victim, &all), "allow.bt.team.x");
            let hashed = port_group_of(&attacker, &all);
            assert_eq!(hashed, hashed_name(&attacker));
            assert!(hashed.starts_with("allow.bt.team.x_") && hashed.len() == "allow.bt.team.x_".len() + 16);
        }
        // Stable across releases: the hash is FNV-1a, not std's.
        assert_eq!(hashed_name(&attacker), "allow.bt.team.x_75764ddfe4007294");
        // Alone, or the older one gone: Kube-OVN's name.
        assert_eq!(
            port_group_of(&attacker, std::slice::from_ref(&attacker)),
            "allow.bt.team.x"
        );
        // The same second: namespace/name decides.
        let a = np("a-b", "c", "2026-01-01T00:00:00Z");
        let b = np("b", "c-a", "2026-01-01T00:00:00Z");
        let all = [a.clone(), b.clone()];
        assert_eq!(port_group_of(&a, &all), "c.a.b");
        assert_eq!(port_group_of(&b, &all), hashed_name(&b));
        assert_eq!(twins_of(&a, &all).len(), 1);
        assert!(twins_of(&a, &[a.clone(), np("other", "p", "2026-01-01T00:00:00Z")]).is_empty());
    }
}
