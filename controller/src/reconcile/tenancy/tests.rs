//! The admission rule, case by case (module doc of [`super`]).

use serde_json::json;

use super::*;

fn object<K: serde::de::DeserializeOwned>(name: &str, spec: serde_json::Value) -> K {
    let mut v = json!({"metadata": {"name": name}});
    v["spec"] = spec;
    serde_json::from_value(v).unwrap()
}

fn subnet(name: &str, spec: serde_json::Value) -> Arc<Subnet> {
    Arc::new(object(name, spec))
}

fn vpc(name: &str, spec: serde_json::Value) -> Arc<Vpc> {
    Arc::new(object(name, spec))
}

fn pool(name: &str, spec: serde_json::Value) -> Arc<IPPool> {
    Arc::new(object(name, spec))
}

/// A cluster: the default VPC's `ovn-default` (binds nothing) and `join`; `open` (default VPC,
/// binds nothing); `team-net` (default VPC, binds `team`); `sel-net` (selects `tier=gold`);
/// VPC `vpc1` (binds `tenant-1`, default subnet `vpc1-default`) with `vpc1-net` (binds nothing)
/// and `vpc1-narrow` (binds `tenant-2`, which the VPC does not); VPC `empty-vpc` (binds nothing) with `empty-net`;
/// `orphan-net` of a VPC that does not exist.
struct Cluster {
    subnets: Vec<Arc<Subnet>>,
    vpcs: Vec<Arc<Vpc>>,
    pools: Vec<Arc<IPPool>>,
}

impl Cluster {
    fn new() -> Self {
        Self {
            subnets: vec![
                subnet("ovn-default", json!({"cidrBlock": "10.16.0.0/16"})),
                subnet("join", json!({"cidrBlock": "100.64.0.0/16"})),
                subnet("open", json!({"cidrBlock": "10.30.0.0/24"})),
                subnet(
                    "team-net",
                    json!({"cidrBlock": "10.31.0.0/24", "namespaces": ["team"]}),
                ),
                subnet(
                    "sel-net",
                    json!({"cidrBlock": "10.32.0.0/24",
                        "namespaceSelectors": [{"matchLabels": {"tier": "gold"}}]}),
                ),
                subnet(
                    "vpc1-default",
                    json!({"vpc": "vpc1", "cidrBlock": "192.168.0.0/24"}),
                ),
                subnet("vpc1-net", json!({"vpc": "vpc1", "cidrBlock": "192.168.10.0/24"})),
                subnet(
                    "vpc1-narrow",
                    json!({"vpc": "vpc1", "cidrBlock": "192.168.20.0/24", "namespaces": ["tenant-2"]}),
                ),
                subnet(
                    "empty-net",
                    json!({"vpc": "empty-vpc", "cidrBlock": "192.168.30.0/24"}),
                ),
                subnet(
                    "orphan-net",
                    json!({"vpc": "gone", "cidrBlock": "192.168.40.0/24"}),
                ),
            ],
            vpcs: vec![
                vpc(
                    "vpc1",
                    json!({"namespaces": ["tenant-1"], "defaultSubnet": "vpc1-default"}),
                ),
                vpc("empty-vpc", json!({})),
            ],
            pools: vec![
                pool("team-pool", json!({"subnet": "open", "namespaces": ["team"]})),
                pool("open-pool", json!({"subnet": "open"})),
                pool("vpc1-pool", json!({"subnet": "vpc1-net"})),
                pool(
                    "granted-pool",
                    json!({"subnet": "vpc1-net", "namespaces": ["attacker"]}),
                ),
            ],
        }
    }

    fn platform(&self) -> Platform<'_> {
        Platform {
            subnets: &self.subnets,
            vpcs: &self.vpcs,
            pools: &self.pools,
            cluster_router: "ovn-cluster",
            node_subnet: "join",
            default_subnet: "ovn-default",
        }
    }

    fn subnet(&self, name: &str) -> &Subnet {
        self.subnets.iter().find(|s| s.name_any() == name).unwrap()
    }

    fn pool(&self, name: &str) -> &IPPool {
        self.pools.iter().find(|s| s.name_any() == name).unwrap()
    }

    fn admits(&self, subnet: &str, ns: &str, labels: &[(&str, &str)]) -> Result<(), Refusal> {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let t = Tenant {
            namespace: ns,
            labels: &labels,
        };
        subnet_admits(&self.platform(), self.subnet(subnet), &t)
    }

    fn pool_admits(&self, pool: &str, ns: &str) -> Result<(), Refusal> {
        let labels = BTreeMap::new();
        let t = Tenant {
            namespace: ns,
            labels: &labels,
        };
        pool_admits(&self.platform(), self.pool(pool), &t)
    }

    fn check(&self, ns: &str, ann: &[(&str, &str)]) -> Result<(), Denied> {
        let labels = BTreeMap::new();
        let t = Tenant {
            namespace: ns,
            labels: &labels,
        };
        let ann = ann
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        check_pod(&self.platform(), &t, &ann)
    }
}

#[test]
fn the_default_vpc_admits_every_namespace_to_a_subnet_that_binds_none() {
    let c = Cluster::new();
    for ns in ["attacker", "team", "tenant-1"] {
        assert_eq!(c.admits("ovn-default", ns, &[]), Ok(()), "{ns}");
        assert_eq!(c.admits("open", ns, &[]), Ok(()), "{ns}");
    }
}

#[test]
fn a_subnet_binding_admits_its_namespaces_only() {
    let c = Cluster::new();
    assert_eq!(c.admits("team-net", "team", &[]), Ok(()));
    let refused = c.admits("team-net", "attacker", &[]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "subnet team-net does not admit namespace attacker (it binds [team])"
    );
    // By selector: the namespace's labels (platform-written) decide.
    assert_eq!(c.admits("sel-net", "x", &[("tier", "gold")]), Ok(()));
    let refused = c.admits("sel-net", "x", &[("tier", "tin")]).unwrap_err();
    assert!(
        matches!(&refused, Refusal::SubnetBinds { selectors: true, bound, .. } if bound.is_empty()),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("namespaceSelectors"), "{refused}");
}

#[test]
fn a_custom_vpc_admits_the_namespaces_it_binds() {
    let c = Cluster::new();
    assert_eq!(c.admits("vpc1-net", "tenant-1", &[]), Ok(()));
    assert_eq!(c.admits("vpc1-default", "tenant-1", &[]), Ok(()));
    let refused = c.admits("vpc1-net", "attacker", &[]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "subnet vpc1-net does not admit namespace attacker (its VPC vpc1 binds [tenant-1])"
    );
    assert!(c.admits("vpc1-default", "attacker", &[]).is_err());
    // A VPC binding nobody admits nobody; a VPC that does not exist, nobody.
    let refused = c.admits("empty-net", "tenant-1", &[]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "subnet empty-net does not admit namespace tenant-1 (its VPC empty-vpc binds [])"
    );
    assert!(matches!(
        c.admits("orphan-net", "tenant-1", &[]),
        Err(Refusal::NoVpc { .. })
    ));
}

#[test]
fn a_subnet_binding_narrows_its_vpcs() {
    let c = Cluster::new();
    // vpc1 binds tenant-1, its subnet vpc1-narrow binds tenant-2: neither may use it (the
    // subnet reconciler refuses such a subnet too, Kube-OVN's validateVpcBySubnet).
    assert!(matches!(
        c.admits("vpc1-narrow", "tenant-1", &[]),
        Err(Refusal::SubnetBinds { .. })
    ));
    assert!(matches!(
        c.admits("vpc1-narrow", "tenant-2", &[]),
        Err(Refusal::VpcBinds { .. })
    ));
    // A selector on a custom VPC's subnet does not reach past the VPC either.
    let mut c = Cluster::new();
    c.subnets[6] = subnet(
        "vpc1-net",
        json!({"vpc": "vpc1", "cidrBlock": "192.168.10.0/24",
            "namespaceSelectors": [{"matchLabels": {"tier": "gold"}}]}),
    );
    assert!(matches!(
        c.admits("vpc1-net", "attacker", &[("tier", "gold")]),
        Err(Refusal::VpcBinds { .. })
    ));
    assert_eq!(c.admits("vpc1-net", "tenant-1", &[("tier", "gold")]), Ok(()));
    assert!(c.admits("vpc1-net", "tenant-1", &[]).is_err());
}

#[test]
fn what_the_namespace_binding_gives_is_always_admitted() {
    // The default subnet binding some namespaces is still the fallback of the unbound ones, and
    // a VPC's default subnet binding others is still where the VPC's namespaces go.
    let mut c = Cluster::new();
    c.subnets[0] = subnet(
        "ovn-default",
        json!({"cidrBlock": "10.16.0.0/16", "namespaces": ["kube-system"]}),
    );
    c.subnets[5] = subnet(
        "vpc1-default",
        json!({"vpc": "vpc1", "cidrBlock": "192.168.0.0/24", "namespaces": ["other"]}),
    );
    c.vpcs[0] = vpc(
        "vpc1",
        json!({"namespaces": ["tenant-1", "other"], "defaultSubnet": "vpc1-default"}),
    );
    assert_eq!(c.admits("ovn-default", "unbound", &[]), Ok(()));
    assert_eq!(c.admits("vpc1-default", "tenant-1", &[]), Ok(()));
    // ... but not to a namespace bound elsewhere.
    assert!(c.admits("ovn-default", "team", &[]).is_err());
    assert!(c.admits("vpc1-default", "attacker", &[]).is_err());
    // Every namespace's own choice, checked against the rule, in a valid configuration (without
    // vpc1-narrow, which the subnet reconciler refuses: it binds a namespace vpc1 does not).
    c.subnets.retain(|s| s.name_any() != "vpc1-narrow");
    let p = c.platform();
    let labels = BTreeMap::new();
    for ns in ["unbound", "team", "tenant-1", "tenant-2", "kube-system", "other"] {
        let mut given = binding::bound_subnets(ns, &labels, &c.subnets, &c.vpcs, "ovn-cluster");
        if given.is_empty() {
            given.push(binding::fallback_subnet(ns, &c.vpcs, "ovn-default"));
        }
        for s in given {
            let t = Tenant {
                namespace: ns,
                labels: &labels,
            };
            assert_eq!(subnet_admits(&p, c.subnet(&s), &t), Ok(()), "{ns} in {s}");
        }
    }
}

#[test]
fn the_join_subnet_admits_nobody() {
    let c = Cluster::new();
    for ns in ["kube-system", "default", "attacker"] {
        assert_eq!(
            c.admits("join", ns, &[]),
            Err(Refusal::NodeSubnet {
                subnet: "join".into()
            })
        );
    }
}

#[test]
fn an_ip_pool_admits_its_namespaces_or_its_subnets() {
    let c = Cluster::new();
    assert_eq!(c.pool_admits("team-pool", "team"), Ok(()));
    let refused = c.pool_admits("team-pool", "attacker").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "IP pool team-pool does not admit namespace attacker (it binds [team])"
    );
    // A pool binding nobody is its subnet's.
    assert_eq!(c.pool_admits("open-pool", "attacker"), Ok(()));
    assert_eq!(c.pool_admits("vpc1-pool", "tenant-1"), Ok(()));
    let refused = c.pool_admits("vpc1-pool", "attacker").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "IP pool vpc1-pool binds no namespace and its subnet vpc1-net does not admit namespace \
         attacker (its VPC vpc1 binds [tenant-1])"
    );
    // The platform granting a pool to a namespace is enough.
    assert_eq!(c.pool_admits("granted-pool", "attacker"), Ok(()));
}

#[test]
fn a_pod_is_checked_on_every_key_that_names_a_subnet_or_pool() {
    let c = Cluster::new();
    let ls = "ovn.kubernetes.io/logical_switch";
    let denied = c.check("attacker", &[(ls, "vpc1-net")]).unwrap_err();
    assert_eq!(
        denied.to_string(),
        "metadata.annotations[\"ovn.kubernetes.io/logical_switch\"]: subnet vpc1-net does not \
         admit namespace attacker (its VPC vpc1 binds [tenant-1])"
    );
    assert_eq!(c.check("tenant-1", &[(ls, "vpc1-net")]), Ok(()));
    // An attachment network's key, of a Kube-OVN NAD and of an IPAM-only one.
    for key in [
        "net1.attacker.ovn.kubernetes.io/logical_switch",
        "macvlan.attacker.kubernetes.io/logical_switch",
    ] {
        let denied = c
            .check("attacker", &[(ls, "ovn-default"), (key, "vpc1-net")])
            .unwrap_err();
        assert_eq!(denied.key.as_deref(), Some(key));
    }
    let denied = c.check("attacker", &[(ls, "join")]).unwrap_err();
    assert!(matches!(denied.refusal, Refusal::NodeSubnet { .. }));
    // A named pool of another namespace, even on an admitted subnet.
    let ip_pool = "ovn.kubernetes.io/ip_pool";
    let denied = c
        .check("attacker", &[(ls, "open"), (ip_pool, "team-pool")])
        .unwrap_err();
    assert_eq!(denied.key.as_deref(), Some(ip_pool));
    assert!(matches!(denied.refusal, Refusal::PoolBinds { .. }));
    let key = "net1.attacker.ovn.kubernetes.io/ip_pool";
    assert!(c.check("attacker", &[(key, "vpc1-pool")]).is_err());
    assert_eq!(c.check("team", &[(ip_pool, "team-pool")]), Ok(()));
    // Address lists, unknown names and other keys are not the rule's business.
    for ann in [
        (ip_pool, "10.16.0.5,10.16.0.6"),
        (ip_pool, "no-such-pool"),
        (ls, "no-such-subnet"),
        ("ovn.kubernetes.io/ip_address", "192.168.10.9"),
        ("example.com/logical_switch", "vpc1-net"),
    ] {
        assert_eq!(c.check("attacker", &[ann]), Ok(()), "{ann:?}");
    }
}
