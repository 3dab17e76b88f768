//! Start-up, as Kube-OVN's controller does it: the default VPC and its router, NB_Global's
//! options, and the join and default subnets as CRs (from the flags). IPAM is rebuilt later, once
//! the caches are filled ([`super::ip::ipam_rebuild`]).

use kube::api::{Api, PostParams};
use kube_ovn_api::crd::{Subnet, Vpc};
use kube_ovn_ovsdb::tables::nb::NbGlobal;
use kube_ovn_ovsdb::{Condition, Mutation, Operation, Table, Value};
use serde_json::json;

use crate::config::{Config, DefaultSubnet};
use crate::error::{Doing, Error, Result};
use crate::ovn::Nb;
use crate::ovn::plan::Plan;
use crate::ovn::topology::ensure_router;

/// NB_Global options Kube-OVN sets (those OVN 23.03 knows; unknown keys are ignored by northd).
const NB_GLOBAL_OPTIONS: &[(&str, &str)] = &[("use_ct_inv_match", "false"), ("ls_dnat_mod_dl_dst", "true")];

async fn create_if_absent<K>(api: &Api<K>, obj: serde_json::Value) -> Result<()>
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
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
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
    let router = &config.cluster_router;
    let plan = nb.read(|cache| {
        let mut plan = Plan::new();
        ensure_router(&mut plan, cache, router, &[("vpc", router.as_str())]);
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
        subnet_object(
            &config.default_subnet,
            &json!({"default": true, "natOutgoing": true, "disableGatewayCheck": !config.default_gateway_check}),
            router,
        ),
    )
    .await?;
    Ok(())
}
