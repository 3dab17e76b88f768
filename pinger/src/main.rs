//! kube-ovn-pinger: network-quality probes from every node (pods, nodes, external address, DNS, API server, OVS and ovn-controller) with Kube-OVN's metric names.

use clap::Parser;
use kube_ovn_support::klog::KlogFlags;

#[derive(Debug, Parser)]
#[command(name = "kube-ovn-pinger", version)]
struct Flags {
    #[command(flatten)]
    klog: KlogFlags,
}

fn main() {
    let flags = Flags::parse();
    flags.klog.init_logs();
}
