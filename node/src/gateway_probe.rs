//! The gateway check of a pod NIC, run in the pod's namespace once its addresses and routes
//! are there (Kube-OVN `checkGatewayReady` / `waitNetworkReady`, `pkg/daemon/ovs_linux.go`):
//! each target in order (the U2O interconnection IP first, then the gateways), an IPv4 one
//! resolved with ARP and an IPv6 one pinged, one probe a second, up to `gatewayCheckMaxRetry`
//! probes (Kube-OVN's constant is 200). A probe that goes unanswered is tried again while the
//! pod lives; when the check is not concerned (`disableGatewayCheck`) there is one probe and
//! its result is only logged.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use kube_ovn_dataplane::{Netns, arp, ping};

use crate::plan::GatewayCheck;

/// How long one probe waits for its answer (Kube-OVN's ARP resolve timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why the check failed: Kube-OVN's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "network {address} with gateway {gateway} is not ready for interface {ifname} after {count} checks"
    )]
    NotReady {
        address: String,
        gateway: IpAddr,
        ifname: String,
        count: u32,
    },
    #[error("gateway {gateway} of interface {ifname}: the pod has no {family} address to probe it from")]
    NoSource {
        gateway: IpAddr,
        ifname: String,
        family: &'static str,
    },
    #[error("the pod was deleted while its gateway {gateway} was being checked")]
    PodGone { gateway: IpAddr },
}

/// The NIC the probes go out of.
pub struct ProbeNic<'a> {
    pub ns: &'a Netns,
    pub ifname: &'a str,
    pub mac: [u8; 6],
    pub addresses: &'a [IpNet],
}

/// Runs `check`; `alive` is asked before every retry and stops the check when the pod is gone.
/// Returns how many probes were sent.
pub async fn run(
    check: &GatewayCheck,
    nic: &ProbeNic<'_>,
    max_retry: u32,
    alive: impl Fn() -> bool,
) -> Result<u32, ProbeError> {
    let attempts = if check.concerned { max_retry.max(1) } else { 1 };
    let mut total = 0;
    for target in &check.targets {
        let source = nic
            .addresses
            .iter()
            .find(|a| a.addr().is_ipv4() == target.is_ipv4())
            .ok_or_else(|| ProbeError::NoSource {
                gateway: *target,
                ifname: nic.ifname.to_owned(),
                family: if target.is_ipv4() { "IPv4" } else { "IPv6" },
            });
        let source = match source {
            Ok(s) => s,
            Err(e) if check.concerned => return Err(e),
            Err(_) => continue,
        };
        let mut count = 0;
        let mut answered = false;
        while count < attempts {
            if count > 0 && !alive() {
                return Err(ProbeError::PodGone { gateway: *target });
            }
            count += 1;
            let started = tokio::time::Instant::now();
            let result = match (source.addr(), target) {
                (IpAddr::V4(src), IpAddr::V4(gw)) => {
                    arp::arp_resolve(nic.ns, nic.ifname, nic.mac, src, *gw, PROBE_TIMEOUT)
                        .await
                        .map(|mac| mac.is_some())
                }
                _ => ping::ping(nic.ns, nic.ifname, *target, 1, PROBE_TIMEOUT).await,
            };
            match result {
                Ok(true) => {
                    answered = true;
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(gateway = %target, error = %e, "gateway probe could not be sent");
                    // Not faster than one probe a second, even when sending fails at once.
                    tokio::time::sleep_until(started + PROBE_TIMEOUT).await;
                }
            }
        }
        total += count;
        if answered {
            tracing::info!(gateway = %target, ifname = nic.ifname, mode = check.mode.as_str(), checks = count, "gateway is ready");
            continue;
        }
        let err = ProbeError::NotReady {
            address: source.to_string(),
            gateway: *target,
            ifname: nic.ifname.to_owned(),
            count,
        };
        if check.concerned {
            return Err(err);
        }
        // disableGatewayCheck: Kube-OVN ignores the failure.
        tracing::info!(error = %err, "gateway check disabled; going on");
    }
    Ok(total)
}
