//! kube-ovn-controller: translates Kubernetes objects into OVN's northbound database and hands
//! each pod its address.

pub mod ipam;
