//! The caches of the watched kinds, one watch each ([`Informers`]), read by every reconciler.
//!
//! Which caches must have listed before anything runs is not a separate list to keep in step:
//! [`Stores::synced`] names every field of [`Stores`] (a field it does not name fails to compile),
//! and each field is a [`Cache`], which only an [`Informer`] makes, with its sync signal.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube_ovn_api::crd::{
    IPPool, Ip, OvnDnatRule, OvnEip, OvnFip, OvnSnatRule, ProviderNetwork, Subnet, Vlan, Vpc,
};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::informer::{Cache, Informer};

/// Read-only caches of the watched kinds.
#[derive(Clone)]
pub struct Stores {
    pub pods: Cache<Pod>,
    pub nodes: Cache<Node>,
    pub namespaces: Cache<Namespace>,
    pub subnets: Cache<Subnet>,
    pub vpcs: Cache<Vpc>,
    pub ippools: Cache<IPPool>,
    pub ips: Cache<Ip>,
    pub services: Cache<Service>,
    pub endpoint_slices: Cache<EndpointSlice>,
    pub network_policies: Cache<NetworkPolicy>,
    pub provider_networks: Cache<ProviderNetwork>,
    pub vlans: Cache<Vlan>,
    pub ovn_eips: Cache<OvnEip>,
    pub ovn_fips: Cache<OvnFip>,
    pub ovn_snat_rules: Cache<OvnSnatRule>,
    pub ovn_dnat_rules: Cache<OvnDnatRule>,
    /// The `ovn-external-gw-config` ConfigMap in `--external-gateway-config-ns`, and nothing
    /// else (read it with [`Stores::external_gw_config`]).
    pub external_gw_config: Cache<ConfigMap>,
}

impl Stores {
    /// Waits until every cache has its first full list. A reconciler that read a cache before
    /// then would take "absent" for "gone": choose the default subnet for a pod whose namespace
    /// is bound to another, or collect a live pod's port.
    pub async fn synced(&self) -> Result<()> {
        // Every field by name, without `..`: a cache added to `Stores` must be added here.
        let Self {
            pods,
            nodes,
            namespaces,
            subnets,
            vpcs,
            ippools,
            ips,
            services,
            endpoint_slices,
            network_policies,
            provider_networks,
            vlans,
            ovn_eips,
            ovn_fips,
            ovn_snat_rules,
            ovn_dnat_rules,
            external_gw_config,
        } = self;
        futures::try_join!(
            synced(pods),
            synced(nodes),
            synced(namespaces),
            synced(subnets),
            synced(vpcs),
            synced(ippools),
            synced(ips),
            synced(services),
            synced(endpoint_slices),
            synced(network_policies),
            synced(provider_networks),
            synced(vlans),
            synced(ovn_eips),
            synced(ovn_fips),
            synced(ovn_snat_rules),
            synced(ovn_dnat_rules),
            synced(external_gw_config),
        )?;
        Ok(())
    }

    /// The `ovn-external-gw-config` ConfigMap, if it exists (the cache holds only it).
    pub fn external_gw_config(&self) -> Option<std::sync::Arc<ConfigMap>> {
        self.external_gw_config
            .state()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(kube_ovn_api::external_gw::CONFIG_MAP))
    }
}

/// Waits until `cache` holds its first full list; the watch stopping first is [`Error::NotReady`].
async fn synced<K>(cache: &Cache<K>) -> Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    cache.synced().await.map_err(|e| Error::NotReady(e.to_string()))
}

/// One watch per cached kind. Subscribe to their changes before [`Informers::run`].
pub struct Informers {
    pub pods: Informer<Pod>,
    pub nodes: Informer<Node>,
    pub namespaces: Informer<Namespace>,
    pub subnets: Informer<Subnet>,
    pub vpcs: Informer<Vpc>,
    pub ippools: Informer<IPPool>,
    pub ips: Informer<Ip>,
    pub services: Informer<Service>,
    pub endpoint_slices: Informer<EndpointSlice>,
    pub network_policies: Informer<NetworkPolicy>,
    pub provider_networks: Informer<ProviderNetwork>,
    pub vlans: Informer<Vlan>,
    pub ovn_eips: Informer<OvnEip>,
    pub ovn_fips: Informer<OvnFip>,
    pub ovn_snat_rules: Informer<OvnSnatRule>,
    pub ovn_dnat_rules: Informer<OvnDnatRule>,
    pub external_gw_config: Informer<ConfigMap>,
}

impl Informers {
    /// `config` says where the `ovn-external-gw-config` ConfigMap is
    /// (`--external-gateway-config-ns`).
    pub fn new(kube: &kube::Client, config: &Config) -> Self {
        Self {
            pods: Informer::new(kube),
            nodes: Informer::new(kube),
            namespaces: Informer::new(kube),
            subnets: Informer::new(kube),
            vpcs: Informer::new(kube),
            ippools: Informer::new(kube),
            ips: Informer::new(kube),
            services: Informer::new(kube),
            endpoint_slices: Informer::new(kube),
            network_policies: Informer::new(kube),
            provider_networks: Informer::new(kube),
            vlans: Informer::new(kube),
            ovn_eips: Informer::new(kube),
            ovn_fips: Informer::new(kube),
            ovn_snat_rules: Informer::new(kube),
            ovn_dnat_rules: Informer::new(kube),
            external_gw_config: Informer::named(
                kube,
                &config.external.config_ns,
                kube_ovn_api::external_gw::CONFIG_MAP,
            ),
        }
    }

    pub fn stores(&self) -> Stores {
        Stores {
            pods: self.pods.cache(),
            nodes: self.nodes.cache(),
            namespaces: self.namespaces.cache(),
            subnets: self.subnets.cache(),
            vpcs: self.vpcs.cache(),
            ippools: self.ippools.cache(),
            ips: self.ips.cache(),
            services: self.services.cache(),
            endpoint_slices: self.endpoint_slices.cache(),
            network_policies: self.network_policies.cache(),
            provider_networks: self.provider_networks.cache(),
            vlans: self.vlans.cache(),
            ovn_eips: self.ovn_eips.cache(),
            ovn_fips: self.ovn_fips.cache(),
            ovn_snat_rules: self.ovn_snat_rules.cache(),
            ovn_dnat_rules: self.ovn_dnat_rules.cache(),
            external_gw_config: self.external_gw_config.cache(),
        }
    }

    /// Runs every watch until dropped; completes as soon as one of them stops (a cache that no
    /// longer changes would have the controller act on stale state).
    pub async fn run(self) {
        let Self {
            pods,
            nodes,
            namespaces,
            subnets,
            vpcs,
            ippools,
            ips,
            services,
            endpoint_slices,
            network_policies,
            provider_networks,
            vlans,
            ovn_eips,
            ovn_fips,
            ovn_snat_rules,
            ovn_dnat_rules,
            external_gw_config,
        } = self;
        let watches: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = vec![
            Box::pin(pods.run()),
            Box::pin(nodes.run()),
            Box::pin(namespaces.run()),
            Box::pin(subnets.run()),
            Box::pin(vpcs.run()),
            Box::pin(ippools.run()),
            Box::pin(ips.run()),
            Box::pin(services.run()),
            Box::pin(endpoint_slices.run()),
            Box::pin(network_policies.run()),
            Box::pin(provider_networks.run()),
            Box::pin(vlans.run()),
            Box::pin(ovn_eips.run()),
            Box::pin(ovn_fips.run()),
            Box::pin(ovn_snat_rules.run()),
            Box::pin(ovn_dnat_rules.run()),
            Box::pin(external_gw_config.run()),
        ];
        futures::future::select_all(watches).await;
    }
}
