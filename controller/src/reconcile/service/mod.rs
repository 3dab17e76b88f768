//! Services on OVN load balancers: each Service's VIPs in its VPC's load balancers (planned by
//! [`plan`]; the load balancers themselves and their switches are
//! [`crate::reconcile::vpc::lb`]'s), and the sweep that removes the VIPs of Services gone.
//!
//! ```text
//!   Service ◀─ its own changes; its EndpointSlices (label kubernetes.io/service-name);
//!              a change of another Service with an address it claims (claimants_of);
//!              again after 30 s while a claim of it is refused (a Subnet may admit it now)
//!      └─▶ owners of its addresses (all Services) ─▶ plan_service
//!          ─▶ events for bad input and refused claims ─▶ `ovn.kubernetes.io/vpc` annotation
//!          ─▶ per load balancer of every VPC: this Service's keys made exactly what it wants
//!   Service gone, or an address dropped ─▶ sweep: every VIP of an address no Service owns goes
//! ```
//!
//! Ownership of a VIP is its address, and the owner of an address is decided by
//! [`claims`](mod@claims)' rule from all Services every time (a Service's ClusterIPs are its
//! own; any other claim goes to the oldest admissible claimant). The keys of a Service are those
//! that start with an address it owns (Kube-OVN finds them the same way when it cleans up after
//! a Service), and it never touches the others: a Service claiming another's address changes
//! nothing of that VIP, and deleting it leaves the owner's as it was. Nothing else is
//! remembered, so a restart decides the same and writes nothing when nothing changed.

pub mod claims;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::Subnet;
use kube_ovn_ovsdb::tables::nb::LoadBalancer;
use kube_ovn_ovsdb::{Atom, Table, Value};

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::informer::{Change, Changes};
use crate::ovn::lb;
use crate::ovn::plan::{Plan, VENDOR, VENDOR_KEY};
use crate::reconcile::service::claims::{Admission, Owners, SubnetRange, admitting_vpc, claims};
use crate::reconcile::service::plan::{Rules, SERVICE_NAME_LABEL, plan_service, service_ips};
use crate::reconcile::vpc::lb::lb_names;

pub const KIND: &str = "Service";

/// The EndpointSlices of a Service, from the cache.
fn slices_of(ctx: &Context, ns: &str, name: &str) -> Vec<Arc<EndpointSlice>> {
    ctx.stores
        .endpoint_slices
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(ns)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
        })
        .collect()
}

/// The Service an EndpointSlice belongs to, before and after a change.
pub fn services_of_slice(change: &Change<EndpointSlice>) -> Vec<ObjectRef<Service>> {
    let mut out: Vec<ObjectRef<Service>> = [&change.old, &change.new]
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let svc = s.labels().get(SERVICE_NAME_LABEL)?;
            Some(ObjectRef::new(svc).within(&s.namespace()?))
        })
        .collect();
    out.dedup();
    out
}

/// The other Services that claim (beyond their ClusterIPs) an address a changed Service has or
/// had: whether their claims are granted may change with it (the owner gone, or a new ClusterIP
/// taking the address from them).
pub fn claimants_of(change: &Change<Service>, services: &[Arc<Service>]) -> Vec<ObjectRef<Service>> {
    let Some(changed) = change.new.as_ref().or(change.old.as_ref()) else {
        return Vec::new();
    };
    let me = claims::key_of(changed);
    let addresses: BTreeSet<IpAddr> = [&change.old, &change.new]
        .into_iter()
        .flatten()
        .filter_map(|s| service_ips(s).ok())
        .flatten()
        .collect();
    services
        .iter()
        .filter(|s| claims::key_of(s) != me)
        .filter(|s| claims(s).is_ok_and(|c| c.others.iter().any(|c| addresses.contains(&c.ip))))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// Every VPC the controller knows (the default one even before its CR is cached).
fn vpcs(ctx: &Context) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = ctx.stores.vpcs.state().iter().map(|v| v.name_any()).collect();
    all.insert(ctx.config.cluster_router.clone());
    all
}

/// A refused claim is tried again after this long: a Subnet admitting it may have appeared (the
/// owner's going reconciles it at once, `claimants_of`; Subnets do not).
const RETRY_REFUSED: Duration = Duration::from_secs(30);

/// What the claim rule needs from the caches: subnets, namespace labels, VPC namespaces.
struct Ranges {
    subnets: Vec<Arc<Subnet>>,
    ns_labels: BTreeMap<String, BTreeMap<String, String>>,
    vpc_namespaces: BTreeMap<String, Vec<String>>,
}

impl Ranges {
    fn load(ctx: &Context) -> Self {
        Self {
            subnets: ctx.stores.subnets.state(),
            ns_labels: ctx
                .stores
                .namespaces
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
            vpc_namespaces: ctx
                .stores
                .vpcs
                .state()
                .iter()
                .map(|v| (v.name_any(), v.spec.namespaces.clone().unwrap_or_default()))
                .collect(),
        }
    }

    /// [`admitting_vpc`] over the cached Subnets, and the address must be no one's in the IPAM
    /// (in a shared subnet, a pod's address is that pod's).
    fn vip_range(&self, ctx: &Context, ns: &str, ip: IpAddr) -> std::result::Result<String, String> {
        let labels = self.ns_labels.get(ns).cloned().unwrap_or_default();
        let ranges: Vec<SubnetRange> = self
            .subnets
            .iter()
            .filter(|s| s.meta().deletion_timestamp.is_none())
            .map(|s| SubnetRange {
                name: s.name_any(),
                vpc: crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, s).to_owned(),
                cidrs: s
                    .spec
                    .cidr_block
                    .iter()
                    .flat_map(|c| c.split(','))
                    .filter_map(|c| c.trim().parse().ok())
                    .collect(),
                binds: crate::reconcile::binding::subnet_binds(s, ns, &labels),
                binds_any: s.spec.namespaces.as_ref().is_some_and(|n| !n.is_empty())
                    || s.spec.namespace_selectors.as_ref().is_some_and(|n| !n.is_empty()),
            })
            .collect();
        let vpc = admitting_vpc(
            ns,
            ip,
            &ranges,
            &self.vpc_namespaces,
            &ctx.config.cluster_router,
            &ctx.config.node_subnet.name,
        )?;
        let ipam = ctx.ipam();
        if let Some(holder) = ipam.subnet_of(ip).and_then(|s| ipam.holder(s, ip)) {
            return Err(format!("{ip} is allocated to {holder}"));
        }
        Ok(vpc)
    }
}

/// The owners of `interest` (all addresses when `None`) among the cached Services.
fn owners(ctx: &Context, ranges: &Ranges, interest: Option<&BTreeSet<IpAddr>>) -> Owners {
    let services = ctx.stores.services.state();
    let refs: Vec<&Service> = services.iter().map(AsRef::as_ref).collect();
    let vip_range = |ns: &str, ip: IpAddr| ranges.vip_range(ctx, ns, ip);
    let admission = Admission {
        external_ip_cidrs: &ctx.config.service_external_ip_cidrs,
        vip_range: &vip_range,
    };
    Owners::compute(&refs, &admission, interest)
}

pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let slices = slices_of(&ctx, &ns, &name);
    let slice_refs: Vec<&EndpointSlice> = slices.iter().map(AsRef::as_ref).collect();
    // Only the pods the endpoints name (looked up by key, not by scanning the namespace).
    let pods: BTreeMap<String, _> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .filter_map(|n| {
            let pod = ctx.stores.pods.get(&ObjectRef::new(&n).within(&ns))?;
            Some((n, pod))
        })
        .collect();
    // The owners of its addresses, from every Service in the cache (a block: the rule's
    // borrowed closures must not live across the awaits below).
    let want = {
        let ranges = Ranges::load(&ctx);
        let interest: BTreeSet<IpAddr> = claims(&svc)
            .map(|c| c.cluster.iter().chain(&c.others).map(|c| c.ip).collect())
            .unwrap_or_default();
        let owners = owners(&ctx, &ranges, Some(&interest));
        let vip_range = |ns: &str, ip: IpAddr| ranges.vip_range(&ctx, ns, ip);
        let admission = Admission {
            external_ip_cidrs: &ctx.config.service_external_ip_cidrs,
            vip_range: &vip_range,
        };
        let vpc_admits = |vpc: &str, ns: &str| {
            ranges
                .vpc_namespaces
                .get(vpc)
                .is_some_and(|l| l.iter().any(|n| n == ns))
        };
        let rules = Rules {
            owners: &owners,
            admission: &admission,
            default_vpc: &ctx.config.cluster_router,
            vpc_admits: &vpc_admits,
        };
        plan_service(&svc, &slice_refs, |p| pods.get(p).map(AsRef::as_ref), &rules)
    };
    for problem in &want.problems {
        warn(&ctx, &svc, "InvalidServiceInput", problem).await;
    }
    for refusal in &want.refused {
        warn(&ctx, &svc, "ServiceAddressRefused", refusal).await;
    }
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for vpc in vpcs(&ctx) {
            let names = lb_names(&ctx.config, &vpc);
            for (kind, lb_name) in names.each() {
                let desired = if vpc == want.vpc {
                    want.vips.get(&kind).cloned().unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                match cache.uuids_by_name(LoadBalancer::NAME, lb_name).first() {
                    Some(uuid) => lb::sync_vips(&mut plan, cache, *uuid, &want.ips, &desired),
                    None if !desired.is_empty() => {
                        return Err(Error::NotReady(format!(
                            "load balancer {lb_name} of VPC {vpc} does not exist yet"
                        )));
                    }
                    None => {}
                }
            }
        }
        Ok(plan)
    })?;
    ctx.nb
        .apply(plan, "service")
        .await
        .doing(format_args!("write the VIPs of service {ns}/{name}"))?;
    let has_vips = !want.ips.is_empty();
    if has_vips && svc.annotations().get(keys::VPC) != Some(&want.vpc) {
        let api: Api<Service> = Api::namespaced(ctx.kube.clone(), &ns);
        let patch = serde_json::json!({"metadata": {"annotations": {keys::VPC: want.vpc}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .doing(format_args!("annotate service {ns}/{name} with its VPC"))?;
    }
    if want.refused.is_empty() {
        Ok(Action::await_change())
    } else {
        Ok(Action::requeue(RETRY_REFUSED))
    }
}

/// A Warning event on the Service (kube-runtime's recorder folds repeats into a count).
async fn warn(ctx: &Context, svc: &Service, reason: &str, message: &str) {
    tracing::warn!(problem = message, reason, "service input left out");
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(message.to_owned()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &svc.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// Whether a change takes an address away from a Service (or the Service itself).
fn drops_an_address(change: &Change<Service>) -> bool {
    let ips = |s: &Option<Arc<Service>>| -> BTreeSet<String> {
        s.as_deref()
            .and_then(|s| service_ips(s).ok())
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    !ips(&change.old).is_subset(&ips(&change.new))
}

/// Removes from every load balancer of ours each VIP whose address no Service in the cache owns.
pub async fn sweep(ctx: &Context) -> Result<()> {
    let ranges = Ranges::load(ctx);
    let owners = owners(ctx, &ranges, None);
    let live = |ip: &str| ip.parse().is_ok_and(|ip| owners.contains(ip));
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let ours: Vec<_> = cache
            .table(LoadBalancer::NAME)
            .filter(|(_, row)| {
                matches!(row.get("external_ids"), Some(Value::Map(m))
                    if m.get(&Atom::from(VENDOR_KEY)).and_then(|v| v.as_str()) == Some(VENDOR)
                        && m.contains_key(&Atom::from("vpc")))
            })
            .map(|(u, _)| *u)
            .collect();
        for uuid in ours {
            lb::sweep_vips(&mut plan, cache, uuid, live);
        }
        plan
    });
    ctx.nb
        .apply(plan, "service-sweep")
        .await
        .doing("remove the VIPs of Services gone")?;
    Ok(())
}

/// Sweeps once at start (Services deleted while no controller ran) and after every change that
/// drops an address; changes that queue up while a sweep runs are served by one more sweep.
pub async fn sweep_on(ctx: Arc<Context>, changes: Changes<Service>) {
    let signals = changes
        .map(|c| drops_an_address(c).then_some(()), || Some(()))
        .ready_chunks(1024);
    let first = futures::stream::once(async { vec![()] });
    first
        .chain(signals)
        .for_each(|_| {
            let ctx = ctx.clone();
            async move {
                let mut backoff = Duration::from_millis(200);
                while let Err(e) = sweep(&ctx).await {
                    tracing::warn!(error = %e, "sweeping the VIPs of Services gone failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        })
        .await;
}
