//! The matrix's view of custom VPCs' OVN NAT: the OvnFip, OvnSnatRule and OvnDnatRule specs of
//! VPCs with `enableExternal`, resolved to pods and addresses the way the controller resolves
//! them (an `ipName` is an IP object, a `vpcSubnet` a Subnet's CIDR, an EIP's address its
//! `spec.v4Ip` or, when the controller chose it, `status.v4Ip`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::Context;
use ipnet::IpNet;
use kube::api::{Api, ListParams};
use kube_ovn_api::annotations::{self, keys};
use kube_ovn_api::crd::{Ip, OvnDnatRule, OvnEip, OvnFip, OvnSnatRule, Subnet, Vpc};
use kube_ovn_lab::cluster::matrix::NatRules;
use kube_ovn_lab::cluster::matrix::external::{Dnat, Fip, Snat};

/// What the rules need to know of an EIP.
struct Eip {
    address: IpAddr,
    announced: bool,
}

/// Every object of a cluster-scoped kind.
async fn list<K>(client: &kube::Client) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::plural(&())))?
        .items)
}

/// The NAT rules of VPCs with `enableExternal`, and the addresses of the EIPs they use that are
/// announced over BGP (`ovn.kubernetes.io/bgp: "true"`).
pub async fn rules(client: &kube::Client) -> anyhow::Result<(NatRules, BTreeSet<IpAddr>)> {
    let external: BTreeSet<String> = list::<Vpc>(client)
        .await?
        .into_iter()
        .filter(|v| v.spec.enable_external == Some(true))
        .filter_map(|v| v.metadata.name)
        .collect();
    let subnets: BTreeMap<String, (String, Option<IpNet>)> = list::<Subnet>(client)
        .await?
        .into_iter()
        .filter_map(|s| {
            let vpc = s.spec.vpc.clone().unwrap_or_else(|| "ovn-cluster".into());
            let cidr = s
                .spec
                .cidr_block
                .as_deref()
                .unwrap_or_default()
                .split(',')
                .find_map(|c| c.trim().parse().ok());
            Some((s.metadata.name?, (vpc, cidr)))
        })
        .collect();
    let eips: BTreeMap<String, Eip> = list::<OvnEip>(client)
        .await?
        .into_iter()
        .filter_map(|e| {
            let address = e
                .spec
                .v4_ip
                .as_deref()
                .or(e.status.as_ref().and_then(|s| s.v4_ip.as_deref()))?
                .parse()
                .ok()?;
            let announced = annotations::is_true(e.metadata.annotations.as_ref(), keys::BGP);
            Some((e.metadata.name?, Eip { address, announced }))
        })
        .collect();
    // An IP object: its pod, its address and its subnet's VPC.
    let ips: BTreeMap<String, (String, String, Option<IpAddr>, String)> = list::<Ip>(client)
        .await?
        .into_iter()
        .filter_map(|ip| {
            let vpc = ip
                .spec
                .subnet
                .as_ref()
                .and_then(|s| subnets.get(s))
                .map(|(vpc, _)| vpc.clone())?;
            let address = ip.spec.v4_ip_address.as_deref().and_then(|a| a.parse().ok());
            Some((
                ip.metadata.name?,
                (ip.spec.namespace?, ip.spec.pod_name?, address, vpc),
            ))
        })
        .collect();
    let mut rules = NatRules::default();
    let mut used = BTreeSet::new();
    let mut eip_of = |name: &Option<String>| -> Option<IpAddr> {
        let eip = eips.get(name.as_deref()?)?;
        if eip.announced {
            used.insert(eip.address);
        }
        Some(eip.address)
    };
    for fip in list::<OvnFip>(client).await? {
        let Some((namespace, pod, _, vpc)) = fip.spec.ip_name.as_ref().and_then(|n| ips.get(n)) else {
            continue;
        };
        if !external.contains(vpc) {
            continue;
        }
        let Some(eip) = eip_of(&fip.spec.ovn_eip) else {
            continue;
        };
        rules.fips.push(Fip {
            name: fip.metadata.name.unwrap_or_default(),
            eip,
            namespace: namespace.clone(),
            pod: pod.clone(),
        });
    }
    for snat in list::<OvnSnatRule>(client).await? {
        let spec = &snat.spec;
        let target = if let Some(subnet) = &spec.vpc_subnet {
            subnets
                .get(subnet)
                .and_then(|(vpc, cidr)| Some((vpc.clone(), (*cidr)?)))
        } else if let Some(ip) = &spec.ip_name {
            ips.get(ip)
                .and_then(|(_, _, address, vpc)| Some((vpc.clone(), IpNet::from((*address)?))))
        } else {
            spec.vpc.clone().zip(spec.v4_ip_cidr.as_deref().and_then(|c| {
                c.parse()
                    .ok()
                    .or_else(|| c.parse::<IpAddr>().ok().map(IpNet::from))
            }))
        };
        let Some((vpc, cidr)) = target.filter(|(vpc, _)| external.contains(vpc)) else {
            continue;
        };
        let Some(eip) = eip_of(&spec.ovn_eip) else {
            continue;
        };
        rules.snats.push(Snat {
            name: snat.metadata.name.unwrap_or_default(),
            eip,
            vpc,
            cidr,
        });
    }
    for dnat in list::<OvnDnatRule>(client).await? {
        let spec = &dnat.spec;
        if spec
            .protocol
            .as_deref()
            .is_some_and(|p| !p.eq_ignore_ascii_case("tcp"))
        {
            continue; // the probes speak HTTP over TCP
        }
        let Some((namespace, pod, _, vpc)) = spec.ip_name.as_ref().and_then(|n| ips.get(n)) else {
            continue;
        };
        let port = |p: &Option<String>| p.as_deref().and_then(|p| p.parse::<u16>().ok());
        let (Some(external_port), Some(internal_port)) =
            (port(&spec.external_port), port(&spec.internal_port))
        else {
            continue;
        };
        if !external.contains(vpc) {
            continue;
        }
        let Some(eip) = eip_of(&spec.ovn_eip) else {
            continue;
        };
        rules.dnats.push(Dnat {
            name: dnat.metadata.name.unwrap_or_default(),
            eip,
            external_port,
            namespace: namespace.clone(),
            pod: pod.clone(),
            internal_port,
        });
    }
    Ok((rules, used))
}
