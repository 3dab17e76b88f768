//! kube-ovn-monitor: OVN NB/SB/northd status and RAFT metrics with Kube-OVN's names, a sidecar of ovn-central.

use clap::Parser;
use kube_ovn_support::klog::KlogFlags;

#[derive(Debug, Parser)]
#[command(name = "kube-ovn-monitor", version)]
struct Flags {
    #[command(flatten)]
    klog: KlogFlags,
}

fn main() {
    let flags = Flags::parse();
    flags.klog.init_logs();
}
