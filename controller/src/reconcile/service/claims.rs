//! Which Service owns each load-balancer address, decided by a rule from all Services every time
//! (not by whichever reconciled last), and which claims of a Service are refused. Pure: no I/O;
//! [`crate::reconcile::service`] gives it the caches' contents and turns refusals into Warning events.
//!
//! The rule (issue 21, "addresses that belong to someone stay theirs"):
//!
//! 1. A Service's own `spec.clusterIPs` are its own: the API server allocated them, nobody else
//!    can have them.
//! 2. Every other claim — the `switch_lb_vip` / `router_lb_vip` annotations, `spec.externalIPs`,
//!    `status.loadBalancer.ingress[].ip` — first has to be admissible on its own:
//!    - an annotation VIP must lie inside the CIDR of a Subnet that admits the Service's
//!      namespace ([`admitting_vpc`]), is not the join subnet, and is not allocated to anything
//!      by the IPAM (a pod's address in a shared subnet is that pod's);
//!    - an external IP must lie inside `--service-external-ip-cidrs` (empty by default, so none
//!      is honoured, as Kubernetes' `DenyServiceExternalIPs` default intends);
//!    - a LoadBalancer ingress IP is written into the status by the controller that allocated
//!      it (a tenant cannot write the status), so it needs no range.
//! 3. Of the admissible claims of one address that no ClusterIP holds, the oldest Service's wins
//!    (`creationTimestamp`, then namespace/name, so a restart decides the same way). The others
//!    are refused: a Warning event naming the field and the owner, and nothing of the owner's
//!    VIP changes. When the owner goes, the next claimant gets the address at its next
//!    reconcile.
//!
//! Kube-OVN uses the annotations and `externalIPs` as written; the refusals are our deviation
//! (README's compatibility table).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::external_ips::ExternalIpCidrs;

/// A Service as `namespace/name`.
pub type ServiceKey = String;

pub fn key_of(svc: &Service) -> ServiceKey {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

/// Where a claimed address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `spec.clusterIPs`: always the Service's own.
    ClusterIp,
    /// `switch_lb_vip` / `router_lb_vip`.
    Annotation,
    /// `status.loadBalancer.ingress[].ip`.
    Ingress,
    /// `spec.externalIPs`.
    External,
}

/// One address a Service asks for, with the field it is written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub ip: IpAddr,
    pub field: String,
    pub source: Source,
}

/// Everything a Service asks for. With an annotation, its VIPs are the annotation's addresses
/// instead of its ClusterIPs (Kube-OVN's `switch_lb_vip` for selectorless Services in custom
/// VPCs); it still owns its ClusterIPs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    pub cluster: Vec<Claim>,
    /// The annotation's, else the ingress and external IPs (none when headless).
    pub others: Vec<Claim>,
}

fn parse(id: &str, field: String, text: &str, source: Source) -> Result<Claim, String> {
    let ip = text
        .trim()
        .parse()
        .map_err(|_| format!("{id}: {field}: {text:?} is not an IP address"))?;
    Ok(Claim { ip, field, source })
}

/// The addresses `svc` asks for. A malformed address is an error naming the Service and field.
pub fn claims(svc: &Service) -> Result<Claims, String> {
    let id = format!("service {}", key_of(svc));
    let mut out = Claims::default();
    let spec = svc.spec.as_ref();
    let listed = spec
        .and_then(|s| s.cluster_ips.clone())
        .filter(|l| !l.is_empty())
        .or_else(|| spec.and_then(|s| s.cluster_ip.clone()).map(|i| vec![i]))
        .unwrap_or_default();
    for (i, ip) in listed.iter().enumerate() {
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let field = format!("spec.clusterIPs[{i}]");
        out.cluster.push(parse(&id, field, ip, Source::ClusterIp)?);
    }
    let ann = svc.annotations();
    for key in [keys::SWITCH_LB_VIP, keys::ROUTER_LB_VIP] {
        if let Some(v) = ann.get(key).filter(|v| !v.is_empty()) {
            for p in v.split(',') {
                let field = format!("metadata.annotations[\"{key}\"]");
                out.others.push(parse(&id, field, p, Source::Annotation)?);
            }
            return Ok(out);
        }
    }
    if out.cluster.is_empty() {
        // Headless: nothing to balance, whatever the status says.
        return Ok(out);
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref());
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        if let Some(ip) = ing.ip.as_deref() {
            let field = format!("status.loadBalancer.ingress[{i}].ip");
            out.others.push(parse(&id, field, ip, Source::Ingress)?);
        }
    }
    for (i, ip) in spec
        .and_then(|s| s.external_ips.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.externalIPs[{i}]");
        out.others.push(parse(&id, field, ip, Source::External)?);
    }
    Ok(out)
}

/// What decides, besides ownership, whether a claim can be honoured.
pub struct Admission<'a> {
    /// `--service-external-ip-cidrs`.
    pub external_ip_cidrs: &'a ExternalIpCidrs,
    /// For an annotation VIP of a Service in namespace `ns`: `Ok(vpc)`, the VPC of the Subnet
    /// that admits the namespace and holds the address, or `Err(why not)`.
    pub vip_range: &'a dyn Fn(&str, IpAddr) -> Result<String, String>,
}

impl Admission<'_> {
    /// `Ok(Some(vpc))` for an annotation VIP (the VPC whose range it is in), `Ok(None)` for
    /// other admissible claims, `Err(why)` when the claim cannot be honoured by anyone.
    fn check(&self, ns: &str, claim: &Claim) -> Result<Option<String>, String> {
        match claim.source {
            Source::ClusterIp | Source::Ingress => Ok(None),
            Source::Annotation => (self.vip_range)(ns, claim.ip).map(Some),
            Source::External if self.external_ip_cidrs.allows(claim.ip) => Ok(None),
            Source::External => Err(format!(
                "{} is outside the CIDRs the operator allows for external IPs \
                 (--service-external-ip-cidrs: {:?})",
                claim.ip,
                self.external_ip_cidrs.to_string()
            )),
        }
    }
}

/// The owner of every address some Service holds, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    by_ip: BTreeMap<IpAddr, (ServiceKey, Source)>,
}

impl Owners {
    /// Applies the rule to every Service (those whose claims do not parse claim nothing), for
    /// the addresses `interest` holds (all when `None`: a reconcile needs only its Service's).
    pub fn compute(
        services: &[&Service],
        admission: &Admission<'_>,
        interest: Option<&std::collections::BTreeSet<IpAddr>>,
    ) -> Self {
        let wanted = |ip: &IpAddr| interest.is_none_or(|i| i.contains(ip));
        let mut sorted: Vec<&Service> = services.to_vec();
        sorted.sort_by_cached_key(|s| age(s));
        let all: Vec<(ServiceKey, String, Claims)> = sorted
            .iter()
            .filter_map(|s| {
                let c = claims(s).ok()?;
                Some((key_of(s), s.namespace().unwrap_or_default(), c))
            })
            .collect();
        let mut by_ip = BTreeMap::new();
        for (key, _, c) in &all {
            for claim in c.cluster.iter().filter(|c| wanted(&c.ip)) {
                by_ip.entry(claim.ip).or_insert((key.clone(), Source::ClusterIp));
            }
        }
        for (key, ns, c) in &all {
            for claim in c.others.iter().filter(|c| wanted(&c.ip)) {
                if admission.check(ns, claim).is_ok() {
                    by_ip.entry(claim.ip).or_insert((key.clone(), claim.source));
                }
            }
        }
        Self { by_ip }
    }

    /// Who owns `ip`, and through which field.
    pub fn owner(&self, ip: IpAddr) -> Option<(&str, Source)> {
        self.by_ip.get(&ip).map(|(k, s)| (k.as_str(), *s))
    }

    /// The addresses `service` owns.
    pub fn owned_by<'a>(&'a self, service: &'a str) -> impl Iterator<Item = IpAddr> + 'a {
        self.by_ip
            .iter()
            .filter(move |(_, (k, _))| k == service)
            .map(|(ip, _)| *ip)
    }

    /// Whether some Service owns `ip` (the sweep keeps its VIPs).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.by_ip.contains_key(&ip)
    }
}

/// The sort key of the rule: older first; the same second by namespace/name.
fn age(
    svc: &Service,
) -> (
    bool,
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    ServiceKey,
) {
    let ts = svc.metadata.creation_timestamp.clone();
    (ts.is_none(), ts, key_of(svc))
}

/// The addresses a Service gets, and the refusals of the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    pub ips: Vec<IpAddr>,
    /// One message per refused claim, naming the Service, the field and the reason.
    pub refused: Vec<String>,
}

/// What of `svc`'s claims it gets, given the owners of every address, when its VIPs go to `vpc`.
pub fn grant(
    svc: &Service,
    claims: &Claims,
    owners: &Owners,
    admission: &Admission<'_>,
    vpc: &str,
) -> Granted {
    let me = key_of(svc);
    let ns = svc.namespace().unwrap_or_default();
    let mut out = Granted::default();
    let annotated = claims.others.iter().any(|c| c.source == Source::Annotation);
    if !annotated {
        out.ips.extend(claims.cluster.iter().map(|c| c.ip));
    }
    for claim in &claims.others {
        let id = format!("service {me}: {}", claim.field);
        let refusal = match owners.owner(claim.ip) {
            // Its own ClusterIP named again (say in externalIPs): already its.
            Some((owner, Source::ClusterIp)) if owner == me => None,
            Some((owner, source)) if owner != me => Some(match source {
                Source::ClusterIp => format!("{} is the ClusterIP of service {owner}", claim.ip),
                _ => format!("{} is already claimed by the older service {owner}", claim.ip),
            }),
            _ => match admission.check(&ns, claim) {
                Err(why) => Some(why),
                Ok(Some(in_vpc)) if in_vpc != vpc => Some(format!(
                    "{} lies in a subnet of VPC {in_vpc}, but the service's VIPs go to VPC {vpc}",
                    claim.ip
                )),
                Ok(_) => None,
            },
        };
        match refusal {
            Some(why) => out.refused.push(format!("{id}: {why}; not used")),
            None if !out.ips.contains(&claim.ip) => out.ips.push(claim.ip),
            None => {}
        }
    }
    out
}

/// A Subnet as the VIP range rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetRange {
    pub name: String,
    pub vpc: String,
    pub cidrs: Vec<IpNet>,
    /// Whether the subnet binds the namespace (by `spec.namespaces` or a namespace selector).
    pub binds: bool,
    /// Whether it binds any namespace at all.
    pub binds_any: bool,
}

/// The VPC of the Subnet whose CIDR holds `ip` and that admits namespace `ns`: a Subnet binding
/// the namespace; or one binding none, in the default VPC or in a VPC listing the namespace in
/// its `spec.namespaces`. Never the join subnet (`join`).
pub fn admitting_vpc(
    ns: &str,
    ip: IpAddr,
    subnets: &[SubnetRange],
    vpc_namespaces: &BTreeMap<String, Vec<String>>,
    default_vpc: &str,
    join: &str,
) -> Result<String, String> {
    let holding: Vec<&SubnetRange> = subnets
        .iter()
        .filter(|s| s.cidrs.iter().any(|c| c.contains(&ip)))
        .collect();
    let admits = |s: &SubnetRange| {
        s.name != join
            && (s.binds
                || (!s.binds_any
                    && (s.vpc == default_vpc
                        || vpc_namespaces
                            .get(&s.vpc)
                            .is_some_and(|l| l.iter().any(|n| n == ns)))))
    };
    if let Some(s) = holding.iter().find(|s| admits(s)) {
        return Ok(s.vpc.clone());
    }
    Err(match holding.first() {
        None => format!("{ip} is inside no subnet"),
        Some(s) if s.name == join => format!("{ip} is in the join subnet {}", s.name),
        Some(s) => format!(
            "{ip} is in subnet {}, which does not admit namespace {ns}",
            s.name
        ),
    })
}

#[cfg(test)]
mod tests;
