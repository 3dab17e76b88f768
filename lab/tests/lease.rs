//! Leader election with `kube-lease-manager` (what the controller uses) against the emulator.
//!
//! kube-lease-manager takes a free lease with a server-side apply of `holderIdentity` under a
//! field manager per holder (so two candidates applying at once conflict, 409), renews and counts
//! transitions with strategic merge patches, and releases a lease (its own, or an expired one)
//! with a strategic merge patch that nulls the holder fields. Durations are whole seconds (here
//! 3, renewed 2 before expiry): these tests take a few seconds each, and every wait is bounded.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use tokio::sync::watch;

const LEASE: &str = "kube-ovn-controller";

async fn candidate(client: &kube::Client, identity: &str) -> LeaseManager {
    LeaseManagerBuilder::new(client.clone(), LEASE)
        .with_namespace("kube-system")
        .with_identity(identity)
        // The builder keeps the field manager of its default random identity otherwise.
        .with_field_manager(format!("lease-{identity}"))
        // The holder renews `grace` seconds before expiry: 2 s of slack for a loaded machine.
        .with_duration(3)
        .with_grace(2)
        .build()
        .await
        .unwrap()
}

/// Waits (at most `limit`) until `rx` says this candidate leads.
async fn leads(rx: &mut watch::Receiver<bool>, limit: Duration) -> bool {
    tokio::time::timeout(limit, rx.wait_for(|leader| *leader))
        .await
        .is_ok_and(|r| r.is_ok())
}

async fn holder(client: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    leases.get(LEASE).await.unwrap().spec?.holder_identity
}

#[tokio::test]
async fn the_lease_moves_only_when_its_holder_stops_renewing() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();

    let (mut first_rx, first) = candidate(&client, "first").await.watch().await;
    assert!(
        leads(&mut first_rx, Duration::from_secs(10)).await,
        "the first candidate takes the free lease"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("first"));

    // While the first renews, the second waits: longer than the lease duration.
    let (mut second_rx, second) = candidate(&client, "second").await.watch().await;
    assert!(
        !leads(&mut second_rx, Duration::from_secs(5)).await,
        "the second must not take a renewed lease"
    );
    assert!(*first_rx.borrow());
    assert_eq!(holder(&client).await.as_deref(), Some("first"));

    // The first dies without releasing: the lease expires and the second takes it over.
    first.abort();
    assert!(
        leads(&mut second_rx, Duration::from_secs(15)).await,
        "the second takes the expired lease"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("second"));
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease = leases.get(LEASE).await.unwrap();
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(2));
    let appliers: Vec<_> = lease
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.operation.as_deref() == Some("Apply"))
        .filter_map(|e| e.manager.clone())
        .collect();
    assert_eq!(
        appliers,
        ["lease-second"],
        "the first's apply entry lost its fields on release"
    );

    drop(second_rx);
    tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second stops when told")
        .unwrap()
        .unwrap();
    assert_eq!(holder(&client).await, None, "stopping releases the lease");
}

#[tokio::test]
async fn a_released_lease_goes_to_the_waiting_candidate() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let (mut first_rx, first) = candidate(&client, "first").await.watch().await;
    assert!(leads(&mut first_rx, Duration::from_secs(10)).await);
    let (mut second_rx, _second) = candidate(&client, "second").await.watch().await;

    // Dropping the receiver stops the first, which releases the lease on its way out.
    drop(first_rx);
    tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first stops when told")
        .unwrap()
        .unwrap();
    assert!(leads(&mut second_rx, Duration::from_secs(15)).await);
    assert_eq!(holder(&client).await.as_deref(), Some("second"));
}

#[tokio::test]
async fn two_candidates_applying_for_a_free_lease_at_once_conflict() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::{Patch, PatchParams, PostParams};

    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let free: Lease =
        serde_json::from_value(serde_json::json!({"metadata": {"name": LEASE}, "spec": {}})).unwrap();
    leases.create(&PostParams::default(), &free).await.unwrap();
    // The body kube-lease-manager applies to lock a free lease.
    let lock = |identity: &str| {
        let now = MicroTime(jiff::Timestamp::now());
        Patch::Apply(
            serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"acquireTime": now, "renewTime": now, "holderIdentity": identity, "leaseDurationSeconds": 2}}),
        )
    };
    let params = |identity: &str| PatchParams {
        field_manager: Some(format!("lease-{identity}")),
        ..PatchParams::default()
    };
    leases
        .patch(LEASE, &params("first"), &lock("first"))
        .await
        .unwrap();
    let err = leases
        .patch(LEASE, &params("second"), &lock("second"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .starts_with("Apply failed with 3 conflicts: conflicts with \"lease-first\":"),
        "{}",
        status.message
    );
    let fields: Vec<String> = status
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(
        fields,
        [".spec.acquireTime", ".spec.holderIdentity", ".spec.renewTime"]
    );
    assert_eq!(holder(&client).await.as_deref(), Some("first"));
}
