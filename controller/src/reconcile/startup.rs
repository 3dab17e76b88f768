//! Start-up, as Kube-OVN's controller does it: the default VPC and its router, NB_Global's
//! options, and the join and default subnets as CRs (from the flags). IPAM is rebuilt later, once
//! the caches are filled ([`super::ip::ipam_rebuild`]).
//!
//! With `--network-type=vlan` (Kube-OVN's `initDefaultVlan`, `initDefaultProviderNetwork`,
//! `initDefaultLogicalSwitch`), before the subnets: the ProviderNetwork `--default-provider-name`
//! on `--default-interface-name` (nodes annotated `<pn>.provider-network.kubernetes.io/exclude=true`
//! go into `excludeNodes`, those annotated `…/interface=<nic>` into `customInterfaces`, and the
//! annotations are removed once it exists), the Vlan `--default-vlan-name`, and the default
//! subnet with `vlan`, `logicalGateway` and `u2oInterconnection`. Each only when absent: an
//! existing object is the user's.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_ovn_api::annotations::keys::provider_network_label;
use kube_ovn_api::crd::{ProviderNetwork, Subnet, Vlan, Vpc};
use kube_ovn_ovsdb::tables::nb::NbGlobal;
use kube_ovn_ovsdb::{Condition, Mutation, Operation, Table, Value, WaitUntil};
use serde_json::json;

use crate::config::underlay::DefaultUnderlay;
use crate::config::{Config, DefaultSubnet};
use crate::error::{Doing, Error, Result};
use crate::ovn::Nb;
use crate::ovn::plan::Plan;
use crate::ovn::topology::create_router_if_missing;

/// NB_Global options Kube-OVN sets (those OVN 23.03 knows; unknown keys are ignored by northd).
const NB_GLOBAL_OPTIONS: &[(&str, &str)] = &[("use_ct_inv_match", "false"), ("ls_dnat_mod_dl_dst", "true")];

/// How long start-up waits for ovn-northd to create the NB_Global row of a new database before
/// it creates the row itself.
const NB_GLOBAL_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for the NB_Global row: on a new northbound database ovn-northd creates it once it
/// connects, and a controller that starts first (the manifests install starts both at once)
/// found none and set none of [`NB_GLOBAL_OPTIONS`] — without `use_ct_inv_match=false`, an
/// underlay pod's connection to an overlay pod on another node died (its reply entered the
/// underlay switch from the router on the other chassis, conntrack called it invalid). If
/// northd has not made the row by the deadline, creates it as `ovn-nbctl init` does, guarded by
/// a `wait` (RFC 7047 §5.2.6) so that a row made meanwhile is not duplicated.
async fn ensure_nb_global(nb: &Nb) -> Result<()> {
    let present = || nb.read(|c| c.rows::<NbGlobal>().is_ok_and(|rows| !rows.is_empty()));
    let mut changes = nb.client().subscribe();
    let deadline = tokio::time::Instant::now() + NB_GLOBAL_WAIT;
    while !present() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Some(_)) => {}
            Err(_) | Ok(None) => break,
        }
    }
    if present() {
        return Ok(());
    }
    tracing::warn!(
        wait = ?NB_GLOBAL_WAIT,
        "no NB_Global row in the northbound database (is ovn-northd running?); creating it"
    );
    let ops = vec![
        Operation::Wait {
            table: NbGlobal::NAME.into(),
            conditions: vec![],
            columns: vec!["_uuid".into()],
            until: WaitUntil::Equal,
            rows: vec![],
            timeout_ms: Some(0),
        },
        Operation::insert(NbGlobal::NAME, std::collections::BTreeMap::new()),
    ];
    match nb.client().transact(ops).await {
        Ok(_) => {}
        // The wait failed: the row appeared meanwhile.
        Err(e) if present() => tracing::debug!(error = %e, "NB_Global appeared meanwhile"),
        Err(e) => return Err(e).doing("create the NB_Global row"),
    }
    nb.barrier().await.doing("read the NB_Global row back")?;
    Ok(())
}

/// Creates `obj` unless it exists; says whether it created it.
async fn create_if_absent<K>(api: &Api<K>, obj: serde_json::Value) -> Result<bool>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let what = format!(
        "{} {}",
        K::kind(&()),
        obj["metadata"]["name"].as_str().unwrap_or_default()
    );
    let obj: K = serde_json::from_value(obj).map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e).doing(format_args!("create {what}")),
    }
}

fn subnet_object(s: &DefaultSubnet, extra: &serde_json::Value, router: &str) -> serde_json::Value {
    let mut spec = json!({
        "cidrBlock": s.cidr_block(),
        "protocol": if s.cidrs.len() == 2 { "Dual" } else if s.cidrs[0].network().is_ipv4() { "IPv4" } else { "IPv6" },
        "vpc": router,
        "provider": "ovn",
        "gatewayType": "distributed",
    });
    if !s.gateways.is_empty() {
        spec["gateway"] = json!(s.gateway());
    }
    if !s.exclude_ips.is_empty() {
        spec["excludeIps"] = json!(s.exclude_ips);
    }
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": s.name}, "spec": spec})
}

/// The cluster router and its load balancers, NB_Global options, the default VPC and the two
/// default subnets.
pub async fn init(config: &Config, kube: &kube::Client, nb: &Nb) -> Result<()> {
    ensure_nb_global(nb).await?;
    let router = &config.cluster_router;
    let plan = nb.read(|cache| {
        let mut plan = Plan::new();
        create_router_if_missing(&mut plan, cache, router, &[("vpc", router.as_str())]);
        // The default VPC's load balancers exist before any subnet is reconciled (Kube-OVN
        // creates them at start too), so ovn-default does not wait for them.
        crate::ovn::lb::ensure_lbs(&mut plan, cache, &config.cluster_lbs, router);
        if let Ok(Some(global)) = cache.rows::<NbGlobal>().map(|g| g.into_iter().next()) {
            let missing: Vec<(&str, &str)> = NB_GLOBAL_OPTIONS
                .iter()
                .copied()
                .filter(|(k, v)| global.options.get(*k).map(String::as_str) != Some(*v))
                .collect();
            if !missing.is_empty() {
                let cond = vec![Condition::uuid(global.uuid)];
                plan.push(Operation::mutate(
                    NbGlobal::NAME,
                    cond.clone(),
                    vec![Mutation::delete(
                        "options",
                        Value::set(missing.iter().map(|(k, _)| *k)),
                    )],
                ));
                plan.push(Operation::mutate(
                    NbGlobal::NAME,
                    cond,
                    vec![Mutation::insert("options", Value::map(missing))],
                ));
            }
        }
        plan
    });
    nb.apply(plan, "init").await.doing(format_args!(
        "create router {router}, its load balancers and NB_Global's options"
    ))?;
    create_if_absent(
        &Api::<Vpc>::all(kube.clone()),
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": router}, "spec": {}}),
    )
    .await?;
    let mut default_extra =
        json!({"default": true, "natOutgoing": true, "disableGatewayCheck": !config.default_gateway_check});
    if let Some(underlay) = &config.default_underlay {
        init_underlay(kube, underlay).await?;
        default_extra["vlan"] = json!(underlay.vlan);
        default_extra["logicalGateway"] = json!(underlay.logical_gateway);
        default_extra["u2oInterconnection"] = json!(underlay.u2o_interconnection);
    }
    let subnets: Api<Subnet> = Api::all(kube.clone());
    create_if_absent(
        &subnets,
        subnet_object(
            &config.node_subnet,
            &json!({"disableInterConnection": true}),
            router,
        ),
    )
    .await?;
    create_if_absent(
        &subnets,
        subnet_object(&config.default_subnet, &default_extra, router),
    )
    .await?;
    Ok(())
}

/// The default ProviderNetwork's spec: the flags, and the nodes' annotations (`exclude=true`
/// into `excludeNodes`, `interface=<nic>` into `customInterfaces`, one entry per NIC in node
/// order).
pub fn default_provider_network(underlay: &DefaultUnderlay, nodes: &[Node]) -> serde_json::Value {
    let exclude = provider_network_label(&underlay.provider, "exclude");
    let interface = provider_network_label(&underlay.provider, "interface");
    let mut excluded: Vec<String> = Vec::new();
    let mut custom: Vec<(String, Vec<String>)> = Vec::new();
    for node in nodes {
        let ann = node.annotations();
        let name = node.name_any();
        if ann.get(&exclude).map(String::as_str) == Some("true") {
            excluded.push(name);
        } else if let Some(nic) = ann.get(&interface).filter(|n| !n.is_empty()) {
            match custom.iter_mut().find(|(i, _)| i == nic) {
                Some((_, nodes)) => nodes.push(name),
                None => custom.push((nic.clone(), vec![name])),
            }
        }
    }
    let mut spec = json!({
        "defaultInterface": underlay.interface,
        "exchangeLinkName": underlay.exchange_link_name,
    });
    if !excluded.is_empty() {
        spec["excludeNodes"] = json!(excluded);
    }
    if !custom.is_empty() {
        spec["customInterfaces"] = custom
            .into_iter()
            .map(|(interface, nodes)| json!({"interface": interface, "nodes": nodes}))
            .collect();
    }
    json!({"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
        "metadata": {"name": underlay.provider}, "spec": spec})
}

/// The nodes whose provider-network annotations the network `pn` already records (an
/// `exclude=true` node in `excludeNodes`, an `interface=<nic>` node in that NIC's
/// `customInterfaces` entry): the annotations said all they had to say and are removed, as
/// Kube-OVN removes them once the network exists. Computed from the network rather than
/// remembered from its creation, so a start that failed between creating the network and
/// removing an annotation finishes the removal on the next start; an annotation the network does
/// not record (set after the network was made) is left to its author.
pub fn annotations_recorded(pn: &ProviderNetwork, nodes: &[Node]) -> Vec<String> {
    let provider = pn.name_any();
    let exclude = provider_network_label(&provider, "exclude");
    let interface = provider_network_label(&provider, "interface");
    nodes
        .iter()
        .filter(|node| {
            let (name, ann) = (node.name_any(), node.annotations());
            let excluded = ann.get(&exclude).map(String::as_str) == Some("true")
                && pn.spec.exclude_nodes.iter().flatten().any(|n| *n == name);
            let custom = ann.get(&interface).is_some_and(|nic| {
                pn.spec.custom_interfaces.iter().flatten().any(|c| {
                    c.interface.as_ref() == Some(nic) && c.nodes.iter().flatten().any(|n| *n == name)
                })
            });
            excluded || custom
        })
        .map(ResourceExt::name_any)
        .collect()
}

/// `--network-type=vlan`: the default ProviderNetwork and Vlan, each only when absent.
async fn init_underlay(kube: &kube::Client, underlay: &DefaultUnderlay) -> Result<()> {
    let pns: Api<ProviderNetwork> = Api::all(kube.clone());
    let nodes: Api<Node> = Api::all(kube.clone());
    let listed = nodes.list(&ListParams::default()).await.doing("list the nodes")?;
    // Listed by name rather than got: the controller's role lists provider networks, it has no
    // reason to be granted `get` as well.
    let by_name = ListParams::default().fields(&format!("metadata.name={}", underlay.provider));
    let find = || async {
        let found = pns.list(&by_name).await;
        found
            .doing(format_args!("look for provider network {}", underlay.provider))
            .map(|l| l.items.into_iter().next())
    };
    let pn = if let Some(pn) = find().await? {
        pn
    } else {
        if create_if_absent(&pns, default_provider_network(underlay, &listed.items)).await? {
            tracing::info!(provider_network = %underlay.provider, interface = %underlay.interface, "created");
        }
        find().await?.ok_or_else(|| {
            Error::Invalid(format!(
                "provider network {} vanished after its creation",
                underlay.provider
            ))
        })?
    };
    let patch = Patch::Merge(json!({"metadata": {"annotations": {
        provider_network_label(&underlay.provider, "exclude"): null,
        provider_network_label(&underlay.provider, "interface"): null,
    }}}));
    for node in annotations_recorded(&pn, &listed.items) {
        // A failure fails the start (the controller is restarted): the next start finds the
        // annotation still recorded by the network and removes it then.
        nodes
            .patch(&node, &PatchParams::default(), &patch)
            .await
            .doing(format_args!("remove node {node}'s provider network annotations"))?;
    }
    let vlan = json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": underlay.vlan},
        "spec": {"id": underlay.vlan_id, "provider": underlay.provider}});
    if create_if_absent(&Api::<Vlan>::all(kube.clone()), vlan).await? {
        tracing::info!(vlan = %underlay.vlan, id = underlay.vlan_id, provider = %underlay.provider, "created");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_provider_network_takes_the_nodes_annotations() {
        let node = |name: &str, ann: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": ann}})).unwrap()
        };
        let nodes = [
            node(
                "n1",
                json!({"provider.provider-network.kubernetes.io/exclude": "true"}),
            ),
            node(
                "n2",
                json!({"provider.provider-network.kubernetes.io/interface": "eth2"}),
            ),
            node("n3", json!({})),
            node(
                "n4",
                json!({"provider.provider-network.kubernetes.io/interface": "eth2"}),
            ),
            node(
                "n5",
                json!({"provider.provider-network.kubernetes.io/interface": "bond0"}),
            ),
        ];
        let underlay = DefaultUnderlay {
            provider: "provider".into(),
            interface: "eth1".into(),
            exchange_link_name: true,
            vlan: "ovn-vlan".into(),
            vlan_id: 1,
            logical_gateway: false,
            u2o_interconnection: false,
        };
        let pn = default_provider_network(&underlay, &nodes);
        assert_eq!(
            pn["spec"],
            json!({"defaultInterface": "eth1", "exchangeLinkName": true, "excludeNodes": ["n1"],
                "customInterfaces": [{"interface": "eth2", "nodes": ["n2", "n4"]},
                                     {"interface": "bond0", "nodes": ["n5"]}]})
        );
        let mut pn: ProviderNetwork = serde_json::from_value(pn).expect("a ProviderNetwork");
        assert_eq!(annotations_recorded(&pn, &nodes), ["n1", "n2", "n4", "n5"]);
        // A later start with a network that no longer records n4 (edited by its owner) leaves
        // n4's annotation alone; the others are still removed (a start that failed half-way
        // finishes the removal).
        pn.spec.custom_interfaces.as_mut().unwrap()[0].nodes = Some(vec!["n2".into()]);
        assert_eq!(annotations_recorded(&pn, &nodes), ["n1", "n2", "n5"]);
    }
}
