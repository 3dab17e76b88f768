//! Which subnets and IP pools a pod may use: the admission rule for tenants.
//!
//! Pods and their annotations are written by tenants; Subnets, Vpcs, IPPools and Namespaces
//! (their labels and annotations) by the platform team (DESIGN.md, "Trust"). So whatever a pod
//! names for itself — `ovn.kubernetes.io/logical_switch`, an attachment network's
//! `<provider>.kubernetes.io/logical_switch`, an `ip_pool` naming an IPPool — is checked against
//! the platform's bindings, while what the namespace's binding gives it is trusted.
//!
//! # The rule
//!
//! Subnet `S` admits namespace `N` iff `S` is not the join subnet (`--node-switch`, which
//! carries the nodes' `ovn0` ports and never a pod), and:
//!
//! 1. when `S` is in a custom VPC, that VPC exists and its `spec.namespaces` lists `N` (a custom
//!    VPC binding none admits none). The namespaces a VPC lists belong to it: the subnet
//!    reconciler already refuses a custom VPC's subnet binding a namespace the VPC does not list
//!    (Kube-OVN's `validateVpcBySubnet`), so the VPC's list bounds every subnet of it;
//! 2. and one of:
//!    - `S` binds no namespace (neither `spec.namespaces` nor `spec.namespaceSelectors`): open to
//!      every namespace its VPC admits — in the default VPC (`--cluster-router`), every one;
//!    - `S` binds `N` (named in `spec.namespaces`, or its labels selected by one of
//!      `spec.namespaceSelectors`);
//!    - `S` is one of the subnets `N`'s binding gives it ([`crate::reconcile::binding`], what the namespace
//!      reconciler writes as the namespace's `logical_switch` annotation): its custom VPC's
//!      default subnet, or — for a namespace nothing binds — the cluster's default subnet
//!      (`--default-subnet`) even when that subnet binds other namespaces.
//!
//! So a subnet's own binding narrows its VPC's, and every subnet the namespace's own binding
//! picks in a valid configuration is admitted: a pod placed by its namespace is never refused.
//!
//! IP pool `P` admits `N` iff `N` is in `P.spec.namespaces`, or `P.spec.namespaces` is empty and
//! `P`'s subnet admits `N` (a pool of a subnet that does not exist is left to the allocation,
//! which fails on it).
//!
//! A reserved IP CR (`spec.subnet`) is a platform object naming the pod: trusted, not checked.
//!
//! # Deviation from Kube-OVN
//!
//! Kube-OVN honours a pod's `logical_switch` and named `ip_pool` whatever the namespace
//! (`getPodDefaultSubnet` takes the annotated subnet as it is; a Subnet's and a Vpc's
//! `namespaces` only pick the default for a namespace's pods, and a Subnet's `private` isolates
//! traffic with ACLs, not addresses). Here a binding is also an admission: a pod whose own
//! annotations name a subnet or pool that does not admit its namespace gets nothing (no address,
//! no port, no IP CR) and a Warning event naming the annotation. A subnet or pool that binds no
//! namespace in the default VPC is usable by every namespace, as in Kube-OVN. An IP pool whose
//! `spec.namespaces` lists a namespace is usable by it whatever its subnet's binding (the
//! platform granted it). The rule is checked before allocation: a binding removed later does not
//! take an address back — the pod keeps its port, and its later reconciles are refused with a
//! Warning until it is deleted.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::{IpPoolAnnotation, parse, parse_provider_key};
use kube_ovn_api::crd::{IPPool, Subnet, Vpc};

use crate::reconcile::binding;
use crate::reconcile::triggers::subnet_vpc_name;

/// The platform's objects and flags the rule reads.
#[derive(Debug, Clone, Copy)]
pub struct Platform<'a> {
    pub subnets: &'a [Arc<Subnet>],
    pub vpcs: &'a [Arc<Vpc>],
    pub pools: &'a [Arc<IPPool>],
    /// `--cluster-router`: the default VPC.
    pub cluster_router: &'a str,
    /// `--node-switch`: the join subnet.
    pub node_subnet: &'a str,
    /// `--default-subnet`.
    pub default_subnet: &'a str,
}

/// The namespace asking, with its labels (for `namespaceSelectors`).
#[derive(Debug, Clone, Copy)]
pub struct Tenant<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// Why a subnet or pool does not admit a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The join subnet is the nodes', never a pod's.
    NodeSubnet { subnet: String },
    /// The subnet binds other namespaces (by name or by selector).
    SubnetBinds {
        subnet: String,
        namespace: String,
        bound: Vec<String>,
        selectors: bool,
    },
    /// The subnet binds no namespace and its custom VPC does not list this one.
    VpcBinds {
        subnet: String,
        namespace: String,
        vpc: String,
        bound: Vec<String>,
    },
    /// The subnet's custom VPC does not exist.
    NoVpc {
        subnet: String,
        namespace: String,
        vpc: String,
    },
    /// The pool binds other namespaces.
    PoolBinds {
        pool: String,
        namespace: String,
        bound: Vec<String>,
    },
    /// The pool binds no namespace and its subnet does not admit this one.
    PoolSubnet { pool: String, subnet: Box<Refusal> },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |l: &[String]| format!("[{}]", l.join(", "));
        match self {
            Self::NodeSubnet { subnet } => {
                write!(
                    f,
                    "subnet {subnet} is the node (join) subnet, which pods cannot use"
                )
            }
            Self::SubnetBinds {
                subnet,
                namespace,
                bound,
                selectors,
            } => {
                write!(
                    f,
                    "subnet {subnet} does not admit namespace {namespace} (it binds {}",
                    list(bound)
                )?;
                if *selectors {
                    f.write_str(" and the namespaces its namespaceSelectors select")?;
                }
                f.write_str(")")
            }
            Self::VpcBinds {
                subnet,
                namespace,
                vpc,
                bound,
            } => write!(
                f,
                "subnet {subnet} does not admit namespace {namespace} (its VPC {vpc} binds {})",
                list(bound)
            ),
            Self::NoVpc {
                subnet,
                namespace,
                vpc,
            } => write!(
                f,
                "subnet {subnet} does not admit namespace {namespace} (its VPC {vpc} does not exist)"
            ),
            Self::PoolBinds {
                pool,
                namespace,
                bound,
            } => write!(
                f,
                "IP pool {pool} does not admit namespace {namespace} (it binds {})",
                list(bound)
            ),
            Self::PoolSubnet { pool, subnet } => {
                write!(f, "IP pool {pool} binds no namespace and its {subnet}")
            }
        }
    }
}

/// A refusal, with what asked for the subnet or pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The pod's annotation that named it; `None` when the namespace's binding chose it.
    pub key: Option<String>,
    pub refusal: Refusal,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "metadata.annotations[\"{key}\"]: {}", self.refusal),
            None => write!(f, "the namespace's subnet binding: {}", self.refusal),
        }
    }
}

fn names(list: Option<&Vec<String>>) -> Vec<String> {
    list.cloned().unwrap_or_default()
}

/// Whether `subnet` admits the tenant's namespace (the rule in the module doc).
pub fn subnet_admits(p: &Platform, subnet: &Subnet, t: &Tenant) -> Result<(), Refusal> {
    let name = subnet.name_any();
    if name == p.node_subnet {
        return Err(Refusal::NodeSubnet { subnet: name });
    }
    let vpc = subnet_vpc_name(p.cluster_router, subnet);
    if vpc != p.cluster_router {
        let Some(v) = p
            .vpcs
            .iter()
            .find(|v| v.name_any() == vpc && v.meta().deletion_timestamp.is_none())
        else {
            return Err(Refusal::NoVpc {
                subnet: name,
                namespace: t.namespace.to_owned(),
                vpc: vpc.to_owned(),
            });
        };
        let bound = names(v.spec.namespaces.as_ref());
        if !bound.iter().any(|n| n == t.namespace) {
            return Err(Refusal::VpcBinds {
                subnet: name,
                namespace: t.namespace.to_owned(),
                vpc: vpc.to_owned(),
                bound,
            });
        }
    }
    let bound = names(subnet.spec.namespaces.as_ref());
    let selectors = subnet
        .spec
        .namespace_selectors
        .as_ref()
        .is_some_and(|s| !s.is_empty());
    if (bound.is_empty() && !selectors) || binding::subnet_binds(subnet, t.namespace, t.labels) {
        return Ok(());
    }
    let mut given = binding::bound_subnets(t.namespace, t.labels, p.subnets, p.vpcs, p.cluster_router);
    if given.is_empty() {
        given.push(binding::fallback_subnet(t.namespace, p.vpcs, p.default_subnet));
    }
    if given.contains(&name) {
        return Ok(());
    }
    Err(Refusal::SubnetBinds {
        subnet: name,
        namespace: t.namespace.to_owned(),
        bound,
        selectors,
    })
}

/// Whether `pool` admits the tenant's namespace (the rule in the module doc).
pub fn pool_admits(p: &Platform, pool: &IPPool, t: &Tenant) -> Result<(), Refusal> {
    let bound = names(pool.spec.namespaces.as_ref());
    if !bound.is_empty() {
        if bound.iter().any(|n| n == t.namespace) {
            return Ok(());
        }
        return Err(Refusal::PoolBinds {
            pool: pool.name_any(),
            namespace: t.namespace.to_owned(),
            bound,
        });
    }
    let Some(subnet) = pool
        .spec
        .subnet
        .as_deref()
        .and_then(|s| p.subnets.iter().find(|x| x.name_any() == s))
    else {
        return Ok(());
    };
    subnet_admits(p, subnet, t).map_err(|r| Refusal::PoolSubnet {
        pool: pool.name_any(),
        subnet: Box::new(r),
    })
}

/// Checks every subnet and IP pool a pod's own annotations name, on every network (the primary
/// `ovn` one and each attachment's `<provider>.kubernetes.io/…`): `logical_switch` naming a
/// subnet, `ip_pool` naming an IPPool. Names of objects that do not exist are not refusals
/// here (the allocation reports them); an `ip_pool` list of addresses names no pool. Keys are
/// checked in order, so the first refusal reported is stable.
pub fn check_pod(p: &Platform, t: &Tenant, annotations: &BTreeMap<String, String>) -> Result<(), Denied> {
    for (key, value) in annotations {
        let Some(k) = parse_provider_key(key) else {
            continue;
        };
        let deny = |refusal| Denied {
            key: Some(key.clone()),
            refusal,
        };
        match k.name {
            "logical_switch" if !value.is_empty() => {
                if let Some(s) = p.subnets.iter().find(|s| s.name_any() == *value) {
                    subnet_admits(p, s, t).map_err(deny)?;
                }
            }
            "ip_pool" => {
                if let Ok(IpPoolAnnotation::Pool(name)) = parse::<IpPoolAnnotation>(key, value)
                    && let Some(pool) = p.pools.iter().find(|x| x.name_any() == name)
                {
                    pool_admits(p, pool, t).map_err(deny)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
