//! Leader election with a Lease (`kube-ovn-controller` in the controller's namespace), so two
//! replicas never both write: this replica waits until it holds the lease, and the returned
//! receiver flips to `false` if it ever loses it (the caller then exits, fail-stop).

use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::config::Config;
use crate::error::{Error, Result};

pub const LEASE_NAME: &str = "kube-ovn-controller";
/// Seconds a lease lasts without renewal; another replica takes over after it expires.
const DURATION: u64 = 15;
const GRACE: u64 = 5;

pub async fn campaign(config: &Config, kube: &kube::Client) -> Result<watch::Receiver<bool>> {
    let manager = LeaseManagerBuilder::new(kube.clone(), LEASE_NAME)
        .with_namespace(&config.lease_namespace)
        .with_identity(&config.identity)
        // The lease manager's default field manager is random per process; name it after the
        // replica, so managedFields say who holds the lease.
        .with_field_manager(&config.identity)
        .with_duration(DURATION)
        .with_grace(GRACE)
        .build()
        .await
        .map_err(|e| Error::Lease(e.to_string()))?;
    let (mut rx, task) = manager.watch().await;
    tracing::info!(identity = %config.identity, "waiting for leadership");
    rx.wait_for(|leading| *leading)
        .await
        .map_err(|e| Error::Lease(e.to_string()))?;
    tracing::info!(identity = %config.identity, "leading");
    // The manager task keeps renewing for as long as the receiver lives.
    drop(task);
    Ok(rx)
}
