//! OvnEips and their external subnet written as our controller writes them (issue 26): the
//! OvnEip with its labels (`ovn.kubernetes.io/subnet`, `ovn.kubernetes.io/ovn_eip_type`, and
//! `ovn.kubernetes.io/vpc` once a rule uses it), the operator's `ovn.kubernetes.io/bgp`
//! annotation, then the status through the status subresource (`ready`, `type`, `nat`,
//! `v4Ip`/`v6Ip`, `macAddress`, and `activateGateway` where the controller knows the node).

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::OvnEip;
use serde_json::{Value, json};

/// One OvnEip as the controller leaves it.
pub struct EipSpec<'a> {
    pub name: &'a str,
    /// `status.v4Ip` (and the label `ovn.kubernetes.io/eip_v4_ip`).
    pub v4: &'a str,
    /// `lrp` or `nat`.
    pub kind: &'a str,
    /// `status.nat` (`""` for an lrp EIP or an unused one).
    pub nat: &'a str,
    /// The label `ovn.kubernetes.io/vpc`: the VPC of the rules that use it.
    pub vpc: Option<&'a str>,
    /// `status.activateGateway`, when the controller writes one for this EIP.
    pub active: Option<&'a str>,
    /// The annotation `ovn.kubernetes.io/bgp: "true"`.
    pub bgp: bool,
}

impl<'a> EipSpec<'a> {
    /// vpc1's router port on `external` (`vpc1-external`), active on `node`.
    pub fn router(name: &'a str, v4: &'a str, node: &'a str) -> Self {
        EipSpec {
            name,
            v4,
            kind: "lrp",
            nat: "",
            vpc: None,
            active: Some(node),
            bgp: true,
        }
    }

    /// An EIP used by rules of `vpc` (`nat`: `snat`, `dnat`, `fip`, comma-joined).
    pub fn used(name: &'a str, v4: &'a str, nat: &'a str, vpc: &'a str) -> Self {
        EipSpec {
            name,
            v4,
            kind: "nat",
            nat,
            vpc: Some(vpc),
            active: None,
            bgp: true,
        }
    }
}

/// The Ready external subnet (`cidr`), no `bgp` annotation: the subnet itself is not announced.
pub async fn external_subnet(kube: &kube::Client, name: &str, cidr: &str) -> Result<()> {
    let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
    let (ar, _) = kube::discovery::pinned_kind(kube, &gvk).await?;
    let api: Api<DynamicObject> = Api::all_with(kube.clone(), &ar);
    let obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
        "spec": {"cidrBlock": cidr, "protocol": "IPv4"}});
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(obj))
        .await?;
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Creates the OvnEip, then writes its status, as the controller does.
pub async fn create(kube: &kube::Client, eip: &EipSpec<'_>) -> Result<()> {
    let mut labels = json!({"ovn.kubernetes.io/subnet": "external",
        "ovn.kubernetes.io/ovn_eip_type": eip.kind, "ovn.kubernetes.io/eip_v4_ip": eip.v4});
    if let Some(vpc) = eip.vpc {
        labels["ovn.kubernetes.io/vpc"] = json!(vpc);
    }
    let annotations = if eip.bgp {
        json!({"ovn.kubernetes.io/bgp": "true"})
    } else {
        json!({})
    };
    let object: OvnEip = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "OvnEip",
        "metadata": {"name": eip.name, "labels": labels, "annotations": annotations},
        "spec": {"externalSubnet": "external", "type": eip.kind, "v4Ip": eip.v4,
            "macAddress": "00:00:00:aa:bb:cc"}}))?;
    let api: Api<OvnEip> = Api::all(kube.clone());
    api.create(&PostParams::default(), &object).await?;
    let mut status = json!({"ready": true, "type": eip.kind, "nat": eip.nat, "v4Ip": eip.v4,
        "macAddress": "00:00:00:aa:bb:cc"});
    if let Some(active) = eip.active {
        status["activateGateway"] = json!(active);
    }
    set_status(kube, eip.name, status).await
}

/// Merges `status` into the OvnEip's status (`null` removes a field).
pub async fn set_status(kube: &kube::Client, name: &str, status: Value) -> Result<()> {
    Api::<OvnEip>::all(kube.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    Ok(())
}

/// Writes `status.activateGateway`, as the controller does when the gateway port moves.
pub async fn set_active(kube: &kube::Client, name: &str, node: &str) -> Result<()> {
    set_status(kube, name, json!({"activateGateway": node})).await
}

/// Deletes the OvnEip (no finalizer here: the controller's is gone once no rule uses it).
pub async fn delete(kube: &kube::Client, name: &str) -> Result<()> {
    Api::<OvnEip>::all(kube.clone())
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// The Warning events about OvnEip `name` (cluster-scoped: they land in `default`), as
/// (reason, note, reporting instance).
pub async fn warnings(kube: &kube::Client, name: &str) -> Result<Vec<(String, String, String)>> {
    let events: Api<Event> = Api::all(kube.clone());
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding
                    .as_ref()
                    .is_some_and(|r| r.kind.as_deref() == Some("OvnEip") && r.name.as_deref() == Some(name))
        })
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.reporting_instance.unwrap_or_default(),
            )
        })
        .collect())
}
