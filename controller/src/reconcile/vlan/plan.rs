//! What a Vlan should look like, and where its name belongs (Kube-OVN's `handleAddVlan`,
//! `handleUpdateVlan`, `checkVlanConflict`, `pkg/controller/vlan.go`). Pure.
//!
//! - `spec.provider` empty: it becomes `--default-provider-name`.
//! - `status.subnets`: the subnets (not being deleted) whose `spec.vlan` names it, sorted.
//! - Conflict: two Vlans on one provider with the same non-zero ID. Kube-OVN marks whichever it
//!   happened to process second; here the outcome is decided by the objects alone: the one
//!   already accepted (listed in its network's `status.vlans`: its subnets may carry traffic) keeps
//!   its place, else the oldest (`creationTimestamp`, then name, since the timestamp counts whole
//!   seconds); the others are `conflict: true`. A Vlan being deleted conflicts with nobody, so
//!   deleting the winner clears the next.
//! - `pn.status.vlans` (the subnets' "this Vlan is ready" signal) lists it on its provider when
//!   that network exists and it does not conflict; any other network listing it loses it (a
//!   provider changed, a conflict appeared). Kube-OVN only ever adds there.

use std::sync::Arc;

use kube::ResourceExt;
use kube_ovn_api::crd::{ProviderNetwork, Subnet, Vlan};

/// Reasons of the Vlan's `Ready` condition (`VlanConflict` is also the Warning event's).
pub const REASON_CONFLICT: &str = "VlanConflict";
pub const REASON_NO_PROVIDER: &str = "ProviderNetworkNotFound";
pub const REASON_READY: &str = "Accepted";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanPlan {
    /// The provider, effective: `spec.provider` (or the deprecated `providerInterfaceName`), else
    /// the default.
    pub provider: String,
    /// `Some(default)` when `spec.provider` must be written.
    pub set_provider: Option<String>,
    pub id: u16,
    /// The older Vlan this one conflicts with.
    pub conflicts_with: Option<String>,
    pub provider_exists: bool,
    pub subnets: Vec<String>,
    /// The provider network to add the Vlan's name to.
    pub add_to: Option<String>,
    /// The provider networks to remove it from.
    pub remove_from: Vec<String>,
}

impl VlanPlan {
    /// The `Ready` condition: status, reason, message.
    pub fn readiness(&self, name: &str) -> (bool, &'static str, String) {
        if let Some(other) = &self.conflicts_with {
            return (
                false,
                REASON_CONFLICT,
                conflict_message(&self.provider, name, other, self.id),
            );
        }
        if !self.provider_exists {
            return (
                false,
                REASON_NO_PROVIDER,
                format!("provider network {} not found", self.provider),
            );
        }
        (
            true,
            REASON_READY,
            format!("listed in provider network {}'s status.vlans", self.provider),
        )
    }
}

/// The conflict's message, naming both Vlans.
pub fn conflict_message(provider: &str, vlan: &str, other: &str, id: u16) -> String {
    format!("provider {provider} vlan {vlan} conflicts with vlan {other} (id {id})")
}

fn deleting(v: &Vlan) -> bool {
    v.metadata.deletion_timestamp.is_some()
}

/// A Vlan's provider: its own, else `default`.
pub fn provider_of<'a>(v: &'a Vlan, default: &'a str) -> &'a str {
    v.spec.effective_provider().unwrap_or(default)
}

/// The oldest other Vlan on `provider` with the same non-zero `id`, if it is older than `vlan`.
/// `listed` are the Vlans the provider network lists as accepted; they come first.
pub fn older_rival(
    vlan: &Vlan,
    provider: &str,
    vlans: &[Arc<Vlan>],
    default: &str,
    listed: &[String],
) -> Option<String> {
    let id = vlan.spec.effective_id();
    if id == 0 || deleting(vlan) {
        return None;
    }
    let age = |v: &Vlan| {
        let name = v.name_any();
        (
            !listed.contains(&name),
            v.metadata.creation_timestamp.clone().map(|t| t.0),
            name,
        )
    };
    let mine = age(vlan);
    vlans
        .iter()
        .filter(|v| v.name_any() != vlan.name_any() && !deleting(v))
        .filter(|v| provider_of(v, default) == provider && v.spec.effective_id() == id)
        .map(|v| age(v))
        .filter(|a| *a < mine)
        .min()
        .map(|(_, _, name)| name)
}

pub fn plan(
    vlan: &Vlan,
    vlans: &[Arc<Vlan>],
    subnets: &[Arc<Subnet>],
    pns: &[Arc<ProviderNetwork>],
    default_provider: &str,
) -> VlanPlan {
    let name = vlan.name_any();
    let provider = provider_of(vlan, default_provider).to_owned();
    let set_provider = vlan
        .spec
        .effective_provider()
        .is_none()
        .then(|| default_provider.to_owned());
    let home = pns.iter().find(|p| p.name_any() == provider);
    let listed = home
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.vlans.clone())
        .unwrap_or_default();
    let conflicts_with = older_rival(vlan, &provider, vlans, default_provider, &listed);
    let mut subnets: Vec<String> = subnets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| s.spec.vlan.as_deref() == Some(name.as_str()))
        .map(|s| s.name_any())
        .collect();
    subnets.sort();
    let lists = |pn: &ProviderNetwork| {
        pn.status
            .as_ref()
            .and_then(|s| s.vlans.as_ref())
            .is_some_and(|v| v.contains(&name))
    };
    let belongs = conflicts_with.is_none() && !deleting(vlan);
    let add_to = home.filter(|p| belongs && !lists(p)).map(|p| p.name_any());
    let mut remove_from: Vec<String> = pns
        .iter()
        .filter(|p| lists(p) && !(belongs && p.name_any() == provider))
        .map(|p| p.name_any())
        .collect();
    remove_from.sort();
    VlanPlan {
        provider,
        set_provider,
        id: vlan.spec.effective_id(),
        conflicts_with,
        provider_exists: home.is_some(),
        subnets,
        add_to,
        remove_from,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vlan(name: &str, id: u16, provider: &str, created: &str) -> Arc<Vlan> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created},
                "spec": {"id": id, "provider": provider}}))
            .unwrap(),
        )
    }

    fn pn(name: &str, vlans: &[&str]) -> Arc<ProviderNetwork> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"defaultInterface": "eth1"},
                "status": {"vlans": vlans}}),
            )
            .unwrap(),
        )
    }

    fn subnet(name: &str, vlan: &str, deleting: bool) -> Arc<Subnet> {
        let mut meta = json!({"name": name});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            meta["finalizers"] = json!(["x"]);
        }
        Arc::new(serde_json::from_value(json!({"metadata": meta, "spec": {"vlan": vlan}})).unwrap())
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:00:01Z";

    #[test]
    fn the_oldest_of_two_with_one_id_on_one_provider_wins() {
        let (old, new) = (vlan("z-old", 100, "pn1", T0), vlan("a-new", 100, "pn1", T1));
        let other_pn = vlan("b", 100, "pn2", T0);
        let untagged = vlan("c", 0, "pn1", T0);
        let all = [old.clone(), new.clone(), other_pn.clone(), untagged.clone()];
        let pns = [pn("pn1", &[]), pn("pn2", &[])];
        let p_old = plan(&old, &all, &[], &pns, "provider");
        assert_eq!(p_old.conflicts_with, None);
        assert_eq!(p_old.add_to.as_deref(), Some("pn1"));
        let p_new = plan(&new, &all, &[], &pns, "provider");
        assert_eq!(
            p_new.conflicts_with.as_deref(),
            Some("z-old"),
            "older, though later by name"
        );
        assert_eq!(p_new.add_to, None);
        assert_eq!(
            p_new.readiness("a-new"),
            (
                false,
                "VlanConflict",
                "provider pn1 vlan a-new conflicts with vlan z-old (id 100)".into()
            )
        );
        assert_eq!(plan(&other_pn, &all, &[], &pns, "provider").conflicts_with, None);
        assert_eq!(
            plan(&untagged, &all, &[], &pns, "provider").conflicts_with,
            None,
            "id 0 never conflicts"
        );
        // Same second: the name decides, the same way every time.
        let (a, b) = (vlan("a", 7, "pn1", T0), vlan("b", 7, "pn1", T0));
        let both = [b.clone(), a.clone()];
        assert_eq!(plan(&a, &both, &[], &pns, "provider").conflicts_with, None);
        assert_eq!(
            plan(&b, &both, &[], &pns, "provider").conflicts_with.as_deref(),
            Some("a")
        );
        // One already accepted keeps its place against an older newcomer (same second here,
        // or a clock behind): its subnets may be carrying traffic.
        let listed = [pn("pn1", &["b"]), pn("pn2", &[])];
        assert_eq!(
            plan(&a, &both, &[], &listed, "provider")
                .conflicts_with
                .as_deref(),
            Some("b")
        );
        assert_eq!(plan(&b, &both, &[], &listed, "provider").conflicts_with, None);
        // The older being deleted: the newer is fine again.
        let mut going = (*old).clone();
        going.metadata.deletion_timestamp = Some(serde_json::from_value(json!(T1)).unwrap());
        let after = [Arc::new(going), new.clone()];
        assert_eq!(plan(&new, &after, &[], &pns, "provider").conflicts_with, None);
    }

    #[test]
    fn its_name_is_listed_on_its_provider_only() {
        let v = vlan("v1", 100, "pn1", T0);
        let pns = [pn("pn1", &["v1", "other"]), pn("pn0", &["v1"]), pn("pn2", &["x"])];
        let p = plan(&v, std::slice::from_ref(&v), &[], &pns, "provider");
        assert_eq!((p.add_to, p.remove_from), (None, vec!["pn0".to_owned()]));
        // A conflict takes it off its provider too (both listed, as after an id change: age
        // decides).
        let older = vlan("v0", 100, "pn1", "2025-01-01T00:00:00Z");
        let pns = [pn("pn1", &["v1", "v0"]), pn("pn0", &["v1"])];
        let p = plan(&v, &[v.clone(), older], &[], &pns, "provider");
        assert_eq!(p.remove_from, ["pn0", "pn1"]);
        // No provider network yet: nothing to add to, and the condition says why.
        let p = plan(&v, std::slice::from_ref(&v), &[], &[], "provider");
        assert_eq!((p.add_to.as_deref(), p.provider_exists), (None, false));
        assert_eq!(p.readiness("v1").1, "ProviderNetworkNotFound");
    }

    #[test]
    fn an_empty_provider_is_the_default_and_subnets_are_those_naming_it() {
        let v: Arc<Vlan> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "v1"}, "spec": {"id": 10, "provider": ""}}))
                .unwrap(),
        );
        let subnets = [
            subnet("s2", "v1", false),
            subnet("s1", "v1", false),
            subnet("s3", "v1", true),
            subnet("x", "v9", false),
        ];
        let p = plan(
            &v,
            std::slice::from_ref(&v),
            &subnets,
            &[pn("provider", &[])],
            "provider",
        );
        assert_eq!(p.set_provider.as_deref(), Some("provider"));
        assert_eq!(p.provider, "provider");
        assert_eq!(p.add_to.as_deref(), Some("provider"));
        assert_eq!(
            p.subnets,
            ["s1", "s2"],
            "sorted; a subnet being deleted no longer counts"
        );
    }
}
