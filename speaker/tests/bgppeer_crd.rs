//! The `BgpPeer` CRD: a real kube-apiserver serves the committed YAML, objects round-trip, its
//! structural schema refuses what it can see (422), defaults and prunes as the YAML says, and
//! status merge patches from several speakers keep each other's entries. (The committed YAML is
//! checked against the types by `crdgen --check`, as every CRD of ours is.)

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use kube_ovn_speaker::bgp::fsm::State;
use kube_ovn_speaker::crd::{
    BgpPeer, BgpPeerSpec, CRD_NAME, ValidateSpec, remove_node_patch, status_patch_at,
    status_patch_with_summary,
};
use kube_ovn_speaker::driver::{MessageCounts, PeerStatus};
use serde_json::json;

fn status(state: State, prefixes: usize, error: Option<&str>) -> PeerStatus {
    PeerStatus {
        address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        state,
        established_at: (state == State::Established)
            .then_some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)),
        flaps: 0,
        prefixes_sent: prefixes,
        prefixes_desired: prefixes,
        messages_sent: MessageCounts::default(),
        messages_received: MessageCounts::default(),
        prefixes_pending: 0,
        prefixes_unsendable: 0,
        out_queue_bytes: 0,
        out_queue_peak_bytes: 0,
        last_error: error.map(str::to_owned),
        local_address: None,
        ready: true,
        initial_table_sent: true,
        bfd_down: false,
        idle_holds_waited_for_bfd: 0,
        stopped: false,
    }
}

/// A kube-apiserver serving the BgpPeer CRD from `deploy/crds` (the YAML users apply).
async fn api_server() -> (ApiServer, Api<BgpPeer>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/crds")
        .join(format!("{CRD_NAME}.yaml"));
    let yaml = std::fs::read_to_string(path).unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
    let server = ApiServer::start_with(ApiServerOptions {
        crds: vec![crd],
        ..ApiServerOptions::default()
    })
    .await
    .expect("kube-apiserver serving the committed BgpPeer CRD");
    let client = server.client().await.unwrap();
    (server, Api::all(client))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_and_speakers_keep_each_others_status() {
    let (_server, peers) = api_server().await;
    let spec: BgpPeerSpec = serde_json::from_value(json!({
        "nodeSelector": { "matchExpressions": [{ "key": "rack", "operator": "In", "values": ["r1"] }] },
        "peerAddress": "10.0.0.1",
        "peerASN": 65001,
        "localASN": 65000,
        "passwordSecretRef": { "name": "tor", "namespace": "kube-system", "key": "md5" },
        "holdTime": 9,
        "ebgpMultihop": 2,
        "families": ["ipv4-unicast"],
        "communities": ["65000:1", "no-export"],
        "largeCommunities": ["65000:1:2"],
        "med": 5,
        "bfd": { "enabled": true, "minTxMs": 300, "minRxMs": 300, "multiplier": 3 },
    }))
    .unwrap();
    let created = peers
        .create(&PostParams::default(), &BgpPeer::new("tor-1", spec.clone()))
        .await
        .unwrap();
    assert_eq!(created.spec, spec);
    let got = peers.get("tor-1").await.unwrap();
    assert_eq!(got.spec, spec);
    got.spec.validate().unwrap();
    assert!(
        got.spec
            .validate()
            .unwrap()
            .selects(&BTreeMap::from([("rack".into(), "r1".into())]))
    );

    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000);
    let pp = PatchParams::default();
    let up = status(State::Established, 12, None);
    let down = status(State::Active, 0, Some("connection refused"));
    peers
        .patch_status("tor-1", &pp, &Patch::Merge(status_patch_at("node-a", &up, now)))
        .await
        .unwrap();
    let after = peers
        .patch_status("tor-1", &pp, &Patch::Merge(status_patch_at("node-b", &down, now)))
        .await
        .unwrap();
    let nodes = &after.status.as_ref().unwrap().nodes;
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["node-a", "node-b"]);
    assert_eq!(nodes["node-a"].state.as_deref(), Some("Established"));
    assert_eq!(nodes["node-a"].prefixes_sent, Some(12));
    assert!(nodes["node-a"].established_at.is_some() && nodes["node-a"].last_error.is_none());
    assert_eq!(nodes["node-b"].last_error.as_deref(), Some("connection refused"));
    // The spec is untouched by status patches.
    assert_eq!(after.spec, spec);

    // node-b comes up: its old error is cleared (sent as null), node-a's entry stays.
    let after = peers
        .patch_status(
            "tor-1",
            &pp,
            &Patch::Merge(status_patch_at(
                "node-b",
                &status(State::Established, 12, None),
                now,
            )),
        )
        .await
        .unwrap();
    let nodes = &after.status.as_ref().unwrap().nodes;
    assert_eq!(nodes["node-b"].last_error, None);
    assert_eq!(nodes["node-a"].state.as_deref(), Some("Established"));

    // The summary is written against the version read; a stale version gets 409.
    let patch = status_patch_with_summary("node-a", &up, &after, now);
    let summed = peers
        .patch_status("tor-1", &pp, &Patch::Merge(patch.clone()))
        .await
        .unwrap();
    assert_eq!(
        summed.status.as_ref().unwrap().established.as_deref(),
        Some("2/2")
    );
    let stale = peers.patch_status("tor-1", &pp, &Patch::Merge(patch)).await;
    assert!(
        matches!(&stale, Err(kube::Error::Api(status)) if status.code == 409),
        "{stale:?}"
    );

    // node-a stops peering: only its key goes.
    let after = peers
        .patch_status("tor-1", &pp, &Patch::Merge(remove_node_patch("node-a")))
        .await
        .unwrap();
    let nodes = &after.status.as_ref().unwrap().nodes;
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["node-b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_refuses_what_it_can_see() {
    let (server, _) = api_server().await;
    // Some of these cannot even be held by the Rust type: go through the dynamic API.
    let resource = ApiResource::erase::<BgpPeer>(&());
    let peers: Api<DynamicObject> = Api::all_with(server.client().await.unwrap(), &resource);
    let bad = [
        json!({ "peerAddress": "10.0.0.1" }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 0 }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 4_294_967_296_u64 }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 1, "communities": ["65000:1", "no-export-please"] }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 1, "largeCommunities": ["1:2"] }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 1, "families": ["l2vpn-evpn"] }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 1, "ebgpMultihop": 256 }),
        json!({ "peerAddress": "10.0.0.1", "peerASN": 1, "bfd": { "enabled": true, "multiplier": 0 } }),
        // Exactly one of peerAddress and peerInterface (the CEL rule), an interface name.
        json!({ "peerASN": 1 }),
        json!({ "peerAddress": "10.0.0.1", "peerInterface": "eth0", "peerASN": 1 }),
        json!({ "peerInterface": "eth 0", "peerASN": 1 }),
        json!({ "peerInterface": "eth0", "peerASN": 1, "vrf": "sixteen-bytes-xx" }),
    ];
    for (i, spec) in bad.into_iter().enumerate() {
        let mut object = DynamicObject::new(&format!("bad-{i}"), &resource);
        object.data = json!({ "spec": spec });
        let result = peers.create(&PostParams::default(), &object).await;
        assert!(
            matches!(&result, Err(kube::Error::Api(status)) if status.code == 422),
            "{spec} was accepted: {result:?}"
        );
    }
    let mut good = DynamicObject::new("good", &resource);
    good.data = json!({ "spec": { "peerAddress": "fd00::1", "peerASN": 4_294_967_295_u64 } });
    peers.create(&PostParams::default(), &good).await.unwrap();
    let mut unnumbered = DynamicObject::new("unnumbered", &resource);
    unnumbered.data = json!({ "spec": { "peerInterface": "eth0", "peerASN": 65001, "vrf": "blue",
        "extendedNexthop": true } });
    peers.create(&PostParams::default(), &unnumbered).await.unwrap();
    // The schema's defaults are applied, and a field it does not know is dropped (pruned), not
    // kept nor refused: what a speaker reads is what the schema describes.
    let mut sparse = DynamicObject::new("sparse", &resource);
    sparse.data = json!({ "spec": { "peerAddress": "10.0.0.2", "peerASN": 65001,
        "bfd": {}, "peerAs": 65002 } });
    let stored = peers.create(&PostParams::default(), &sparse).await.unwrap();
    assert_eq!(
        stored.data["spec"]["bfd"],
        json!({ "enabled": false }),
        "{}",
        stored.data
    );
    assert!(stored.data["spec"].get("peerAs").is_none(), "{}", stored.data);
}
