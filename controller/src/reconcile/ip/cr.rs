//! The IP reconciler: IP CRs are the cluster-visible record of every allocation (`kubectl get
//! ips`), named like the switch port (`<pod>.<ns>`, `node-<node>`), and one of the sources IPAM is
//! rebuilt from. The pod and node reconcilers write theirs through [`super::record`]; this
//! reconciler acts on the ones users create.
//!
//! Records the controller writes for pods and nodes carry `ovn.kubernetes.io/ip_reserved=false`.
//! An IP CR a user creates without that label reserves an address for a pod that does not exist
//! yet (Kube-OVN's `handleAddReservedIP`, reference §3.10a): named `<pod>.<ns>`, with
//! `spec.subnet` and optionally `v4IpAddress`/`v6IpAddress`/`macAddress`. The controller adds its
//! finalizer, reserves the address in IPAM (static, or the next free one, written back to the
//! spec) and labels it `ip_reserved=true`. The pod of that name gets that address; the
//! reservation outlives the pod, and deleting the IP CR releases it through the finalizer.
//!
//! Unlike Kube-OVN, records written for pods carry no finalizer: a pod's release deletes its
//! record in one call, and an IP CR deleted from under a live pod changes nothing (the pod keeps
//! its address, which its port records). IP CRs that carry the finalizer (reserved ones, and
//! those Kube-OVN left behind) are released through it.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::{MacAddr, keys, parse};
use kube_ovn_api::crd::{FINALIZER, Ip};
use kube_ovn_api::names;
use serde_json::json;

use super::record::{addresses, is_controller_record};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::Request;
use crate::ovn::plan::Plan;
use crate::ovn::topology::remove_switch_port;
use crate::reconcile::pod_state::{is_alive, port_name};
use crate::reconcile::subnet_spec::effective;

pub const KIND: &str = "IP";

/// A live pod that holds the IP CR's key (its address is the pod's, not the reservation's).
fn live_pod(ctx: &Context, ip: &Ip) -> Option<Arc<Pod>> {
    let (pod, ns) = (ip.spec.pod_name.as_deref()?, ip.spec.namespace.as_deref()?);
    ctx.stores
        .pods
        .get(&ObjectRef::new(pod).within(ns))
        .filter(|p| is_alive(p) && port_name(p) == ip.name_any())
}

pub async fn reconcile(ip: Arc<Ip>, ctx: Arc<Context>) -> Result<Action> {
    let name = ip.name_any();
    let ours = ip.finalizers().iter().any(|f| f == FINALIZER);
    if ip.meta().deletion_timestamp.is_some() {
        if ours {
            let _lock = ctx.pod_locks.lock(&name).await;
            released(&ctx, &ip).await?;
        }
        return Ok(Action::await_change());
    }
    // Records the controller wrote for pods and nodes (its trigger passes them over too).
    if is_controller_record(&ip) {
        return Ok(Action::await_change());
    }
    let _lock = ctx.pod_locks.lock(&name).await;
    match reserve(&ip, &ctx, ours).await {
        Err(e @ Error::Invalid(_)) => {
            tracing::warn!(ip = %name, error = %e, "address not reserved");
            let event = Event {
                type_: EventType::Warning,
                reason: "ReserveIPFailed".into(),
                note: Some(e.to_string()),
                action: "Reserve".into(),
                secondary: None,
            };
            if let Err(err) = ctx.recorder.publish(&event, &ip.object_ref(&())).await {
                tracing::debug!(error = %err, "cannot publish event");
            }
            Err(e)
        }
        other => other,
    }
}

/// The reservation a user-created IP CR asks for; errors name the field.
fn reservation(ip: &Ip, provider: &str) -> Result<Request> {
    let name = ip.name_any();
    let bad = |field: &str, why: String| Error::Invalid(format!("IP {name}: {field}: {why}"));
    let s = &ip.spec;
    let pod = s.pod_name.as_deref().filter(|p| !p.is_empty());
    let ns = s.namespace.as_deref().filter(|n| !n.is_empty());
    let (Some(pod), Some(ns)) = (pod, ns) else {
        return Err(bad(
            "spec.podName, spec.namespace",
            "both are required to reserve an address".into(),
        ));
    };
    let want = names::pod_port_name(pod, ns, provider);
    if name != want {
        return Err(bad(
            "metadata.name",
            format!("must be {want:?} (the pod's port name) to reserve an address for pod {ns}/{pod}"),
        ));
    }
    let pod_type = s.pod_type.as_deref().unwrap_or_default();
    if !matches!(pod_type, "" | "StatefulSet" | "VirtualMachine") {
        return Err(bad(
            "spec.podType",
            format!("{pod_type:?} is not one of \"\", StatefulSet, VirtualMachine"),
        ));
    }
    let text = |v: &Option<String>| v.clone().filter(|x| !x.is_empty());
    let v4 = match text(&s.v4_ip_address) {
        Some(a) => Some(
            a.parse::<Ipv4Addr>()
                .map_err(|_| bad("spec.v4IpAddress", format!("{a:?} is not an IPv4 address")))?,
        ),
        None => None,
    };
    let v6 = match text(&s.v6_ip_address) {
        // Kube-OVN refuses upper case, which would never match the address it formats.
        Some(a) if a.chars().any(|c| c.is_ascii_uppercase()) => {
            return Err(bad("spec.v6IpAddress", format!("{a:?} must be lower case")));
        }
        Some(a) => Some(
            a.parse::<Ipv6Addr>()
                .map_err(|_| bad("spec.v6IpAddress", format!("{a:?} is not an IPv6 address")))?,
        ),
        None => None,
    };
    let mac = match text(&s.mac_address) {
        Some(m) => {
            Some(parse::<MacAddr>("spec.macAddress", &m).map_err(|e| bad("spec.macAddress", e.to_string()))?)
        }
        None => None,
    };
    Ok(Request {
        v4,
        v6,
        mac,
        ..Request::default()
    })
}

/// Reserves a user-created IP CR's address: finalizer first (so its deletion always comes
/// through here), then IPAM, then the addresses and labels written back.
async fn reserve(ip: &Ip, ctx: &Context, has_finalizer: bool) -> Result<Action> {
    let name = ip.name_any();
    let subnet_name = ip
        .spec
        .subnet
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::Invalid(format!("IP {name}: spec.subnet is required")))?;
    let subnet = ctx
        .stores
        .subnets
        .get(&ObjectRef::new(&subnet_name))
        .ok_or_else(|| Error::NotReady(format!("subnet {subnet_name} of IP {name} does not exist")))?;
    let eff = effective(&subnet, &ctx.config.cluster_router)?;
    let request = reservation(ip, &eff.provider)?;
    if !ctx.ipam().has_subnet(&subnet_name) {
        return Err(Error::NotReady(format!("subnet {subnet_name} is not ready")));
    }
    let api: Api<Ip> = Api::all(ctx.kube.clone());
    if !has_finalizer {
        let mut finalizers = ip.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": ip.resource_version(),
            }})),
        )
        .await
        .doing(format_args!("add the finalizer to IP {name}"))?;
    }
    let alloc = match live_pod(ctx, ip) {
        // The pod has the address already; IPAM is the pod path's to change.
        Some(_) => ctx.ipam().allocation(&subnet_name, &name).cloned(),
        // Without addresses in the spec, IPAM hands out the next free one; asked again, it
        // returns what the key holds.
        None => Some(
            ctx.ipam()
                .allocate(&subnet_name, &name, &request)
                .map_err(|e| Error::Invalid(format!("IP {name}: {e}")))?,
        ),
    };
    let mut patch = serde_json::Map::new();
    if let Some(alloc) = &alloc {
        let (both, v4, v6) = addresses(alloc);
        let s = &ip.spec;
        for (field, have, want) in [
            ("ipAddress", &s.ip_address, both),
            ("v4IpAddress", &s.v4_ip_address, v4),
            ("v6IpAddress", &s.v6_ip_address, v6),
            ("macAddress", &s.mac_address, alloc.mac.to_string()),
        ] {
            if have.clone().unwrap_or_default() != want {
                patch.insert(field.to_owned(), json!(want));
            }
        }
    }
    let labels = ip.labels();
    let want_labels = [
        (keys::IP_RESERVED_LABEL, "true"),
        (keys::SUBNET_LABEL, subnet_name.as_str()),
        (subnet_name.as_str(), ""),
    ];
    let label_patch: serde_json::Map<String, serde_json::Value> = want_labels
        .iter()
        .filter(|(k, v)| labels.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    if !patch.is_empty() || !label_patch.is_empty() {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": label_patch}, "spec": patch})),
        )
        .await
        .doing(format_args!("write the reservation into IP {name}"))?;
        tracing::info!(ip = %name, subnet = %subnet_name, "address reserved");
    }
    Ok(Action::await_change())
}

/// An IP CR with our finalizer is being deleted: its address is released (unless a live pod
/// uses it: then the pod's own deletion releases it), and the finalizer removed.
async fn released(ctx: &Context, ip: &Ip) -> Result<()> {
    let name = ip.name_any();
    if live_pod(ctx, ip).is_none() {
        let plan = ctx.nb.read(|cache| {
            let mut plan = Plan::new();
            remove_switch_port(&mut plan, cache, &name);
            plan
        });
        ctx.nb
            .apply(plan, "ip-delete")
            .await
            .doing(format_args!("remove the port of IP {name}"))?;
        let released = ctx.ipam().release_everywhere(&name);
        if !released.is_empty() {
            tracing::info!(ip = %name, "reserved address released");
        }
    }
    let finalizers: Vec<&String> = ip.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let api: Api<Ip> = Api::all(ctx.kube.clone());
    match api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": finalizers, "resourceVersion": ip.resource_version()}}),
            ),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).doing(format_args!("remove the finalizer from IP {name}")),
    }
}
