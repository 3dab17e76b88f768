//! Leader election with a Lease (`kube-ovn-controller` in the controller's namespace, as Kube-OVN
//! names it), so two replicas never both write: a replica does nothing until it holds the lease,
//! and stops (fail-stop, as Kube-OVN's controller exits) when it loses it.
//!
//! Timing follows Kube-OVN's `--leader-elect-*` flags. `kube-lease-manager` renews `grace`
//! seconds before expiry; we set the grace so the leader renews every retry period, as client-go
//! does. client-go's leader also gives up when it has not renewed for the renew deadline, shorter
//! than the lease, so it has stopped before a follower may take over even when it cannot reach
//! the API server; `kube-lease-manager` has no such deadline, so a watchdog here reads the Lease
//! every retry period and reports the leadership lost once the last renewal it saw is older than
//! the deadline.
//!
//! A follower watches the Lease itself every retry period (see [`campaign`]), so a lease
//! released by a clean stop is taken over at once, as with client-go.
//!
//! The renewer and the watchdog are tasks owned by [`Leadership`]: dropping it (the controller is
//! aborted, as in a crash) stops them without releasing the lease, so a follower takes over only
//! once the lease expires; [`Leadership::release`] hands the lease over at once on a clean stop.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::config::Config;
use crate::error::{Error, Result};
use kube_ovn_support::AbortOnDrop;

pub const LEASE_NAME: &str = "kube-ovn-controller";

/// This replica's leadership, held until dropped or released.
pub struct Leadership {
    // Fields drop in order: the tasks are aborted before the receiver goes, so the renewer never
    // sees its channel close (which would release the lease, as a clean stop does).
    renewer: AbortOnDrop<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    _watchdog: AbortOnDrop<()>,
    leading: watch::Receiver<bool>,
    deadline_passed: watch::Receiver<bool>,
}

impl Leadership {
    /// Resolves when this replica is no longer the leader.
    pub async fn lost(&mut self) {
        let leading = &mut self.leading;
        let deadline = &mut self.deadline_passed;
        tokio::select! {
            _ = leading.wait_for(|l| !*l) => {},
            _ = deadline.wait_for(|d| *d) => {},
        }
    }

    /// Gives the lease up now (a clean stop), so a follower need not wait for it to expire.
    pub async fn release(self) {
        let Self {
            renewer,
            _watchdog: watchdog,
            leading,
            ..
        } = self;
        drop(watchdog);
        let handle = renewer.into_inner();
        // The renewer releases the lease when its channel closes.
        drop(leading);
        match tokio::time::timeout(Duration::from_secs(5), handle).await {
            Ok(Ok(Ok(_))) => tracing::info!("lease released"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "could not release the lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, "lease renewer failed"),
            Err(_) => tracing::warn!("lease release timed out"),
        }
    }
}

/// Whether `identity` may take the lease now: it is missing, free, ours, or expired.
fn takeable(lease: Option<&Lease>, identity: &str, now: SystemTime) -> bool {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(h) if h == identity => true,
        Some(_) => {
            let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
                return true;
            };
            let secs = u64::try_from(secs).unwrap_or(0);
            now >= SystemTime::from(renewed.0) + Duration::from_secs(secs)
        }
    }
}

/// Waits until this replica holds the lease.
///
/// A follower reads the Lease every retry period, as client-go's does, and starts the lease
/// manager only once the lease may be taken. Left to itself the manager sleeps until the lease
/// it last saw expires, so a lease released by a clean stop would sit free for up to a whole
/// lease duration; and a manager that lost the race for a free lease is dropped (aborted, so it
/// releases nothing) and the watching starts again.
pub async fn campaign(config: &Config, kube: &kube::Client) -> Result<Leadership> {
    let timing = config.leader_election;
    let duration = timing.lease_duration.as_secs();
    let grace = duration.saturating_sub(timing.retry_period.as_secs()).max(1);
    let api: Api<Lease> = Api::namespaced(kube.clone(), &config.lease_namespace);
    let mut tick = tokio::time::interval(timing.retry_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(identity = %config.identity, "waiting for leadership");
    loop {
        tick.tick().await;
        match api.get_opt(LEASE_NAME).await {
            Ok(lease) if takeable(lease.as_ref(), &config.identity, SystemTime::now()) => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the lease");
                continue;
            }
        }
        let manager = LeaseManagerBuilder::new(kube.clone(), LEASE_NAME)
            .with_namespace(&config.lease_namespace)
            .with_identity(&config.identity)
            // The lease manager's default field manager is random per process; name it after the
            // replica, so managedFields say who holds the lease.
            .with_field_manager(&config.identity)
            .with_duration(duration)
            .with_grace(grace)
            .build()
            .await
            .map_err(|e| Error::Lease(e.to_string()))?;
        let (mut leading, task) = manager.watch().await;
        let renewer = AbortOnDrop::new(task);
        // Taking an expired lease includes a random pause of up to a second.
        let attempt = timing.retry_period + Duration::from_secs(2);
        match tokio::time::timeout(attempt, leading.wait_for(|l| *l)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Error::Lease(e.to_string())),
            Err(_) => {
                tracing::debug!("another replica took the lease first");
                // Aborted before the receiver goes, so nothing is released.
                drop(renewer);
                continue;
            }
        }
        tracing::info!(identity = %config.identity, "leading");
        let (tx, deadline_passed) = watch::channel(false);
        let watchdog = AbortOnDrop::spawn(watchdog(api, config.identity.clone(), timing, tx));
        return Ok(Leadership {
            renewer,
            _watchdog: watchdog,
            leading,
            deadline_passed,
        });
    }
}

/// Every retry period, reads the Lease; says `true` once it is held by someone else, or its
/// last renewal by us (as far as we could see) is older than the renew deadline.
async fn watchdog(
    api: Api<Lease>,
    identity: String,
    timing: crate::config::LeaderElection,
    tx: watch::Sender<bool>,
) {
    let mut last_renewed = Instant::now();
    let mut tick = tokio::time::interval(timing.retry_period);
    loop {
        tick.tick().await;
        match api.get_opt(LEASE_NAME).await {
            Ok(Some(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                if spec.holder_identity.as_deref() != Some(identity.as_str()) {
                    tracing::error!(holder = ?spec.holder_identity, "the lease is held by another replica");
                    let _ = tx.send(true);
                    return;
                }
                if let Some(renewed) = spec.renew_time {
                    let at = SystemTime::from(renewed.0);
                    let age = SystemTime::now().duration_since(at).unwrap_or_default();
                    last_renewed = Instant::now().checked_sub(age).unwrap_or(last_renewed);
                }
            }
            Ok(None) => tracing::warn!("the lease is gone"),
            Err(e) => tracing::warn!(error = %e, "cannot read the lease"),
        }
        if last_renewed.elapsed() > timing.renew_deadline {
            tracing::error!(
                deadline = ?timing.renew_deadline,
                "the lease was not renewed in time; giving up leadership"
            );
            let _ = tx.send(true);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs_ago: u64, duration: i32) -> Lease {
        let renewed = k8s_openapi::jiff::Timestamp::now() - Duration::from_secs(renewed_secs_ago);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": LEASE_NAME},
            "spec": {"holderIdentity": holder, "renewTime": renewed.to_string(),
                     "leaseDurationSeconds": duration}
        }))
        .unwrap()
    }

    #[test]
    fn a_lease_may_be_taken_when_missing_free_ours_or_expired() {
        let now = SystemTime::now();
        assert!(takeable(None, "me", now));
        assert!(takeable(Some(&lease(None, 0, 30)), "me", now));
        assert!(takeable(Some(&lease(Some("me"), 0, 30)), "me", now));
        assert!(!takeable(Some(&lease(Some("other"), 10, 30)), "me", now));
        assert!(takeable(Some(&lease(Some("other"), 31, 30)), "me", now));
    }
}
