//! kube's reflector against the emulator: through 1,000 seeded random creates, replaces, patches,
//! no-op writes and deletes, three reflector stores (list+watch, paged list+watch, and a
//! label-selected streaming list) stay equal to the emulator's own state: the same names,
//! resourceVersions and contents.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{WAIT, object_key, server_objects};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::drill::Rng;
use kube_ovn_testkit::wait_until_async;
use serde_json::{Value, json};

const NAMESPACES: &[&str] = &["red", "blue"];
const TIERS: &[Option<&str>] = &[Some("web"), Some("db"), None];

/// Starts a reflector over `api` with `config`, counting the errors its watcher reports.
fn start_reflector(
    api: Api<ConfigMap>,
    config: watcher::Config,
    errors: Arc<AtomicUsize>,
) -> Store<ConfigMap> {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config));
    tokio::spawn(stream.for_each(move |event| {
        if let Err(e) = event {
            eprintln!("reflector error: {e}");
            errors.fetch_add(1, Ordering::SeqCst);
        }
        futures::future::ready(())
    }));
    reader
}

/// A ConfigMap as the typed client would see it: the server's JSON through `ConfigMap`.
fn normalized(obj: &Value) -> Value {
    let typed: ConfigMap = serde_json::from_value(obj.clone()).expect("a ConfigMap");
    serde_json::to_value(typed).expect("serializable")
}

/// Compares a reflector's store with `expected`; an error describes the first difference.
fn compare(name: &str, store: &Store<ConfigMap>, expected: &BTreeMap<String, Value>) -> anyhow::Result<bool> {
    let got: BTreeMap<String, Value> = store
        .state()
        .iter()
        .map(|cm| {
            let v = serde_json::to_value(&**cm).expect("serializable");
            (object_key(&v), v)
        })
        .collect();
    let got_keys: Vec<&String> = got.keys().collect();
    let want_keys: Vec<&String> = expected.keys().collect();
    if got_keys != want_keys {
        anyhow::bail!("{name}: names differ: reflector has {got_keys:?}, server has {want_keys:?}");
    }
    for (key, want) in expected {
        let want = normalized(want);
        if got[key] != want {
            anyhow::bail!(
                "{name}: {key} differs:\n reflector {}\n server    {want}",
                got[key]
            );
        }
    }
    Ok(true)
}

fn all_equal(
    server: &ApiServer,
    plain: &Store<ConfigMap>,
    paged: &Store<ConfigMap>,
    web: &Store<ConfigMap>,
) -> anyhow::Result<bool> {
    let expected = server_objects(server, "", "v1", "configmaps");
    let web_expected: BTreeMap<String, Value> = expected
        .iter()
        .filter(|(_, o)| o.pointer("/metadata/labels/tier") == Some(&json!("web")))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(compare("list+watch", plain, &expected)?
        && compare("paged list+watch", paged, &expected)?
        && compare("streaming list tier=web", web, &web_expected)?)
}

fn random_config_map(rng: &mut Rng, ns: &str, name: &str) -> ConfigMap {
    let mut labels = serde_json::Map::new();
    if let Some(tier) = rng.pick(TIERS) {
        labels.insert("tier".into(), json!(tier));
    }
    if rng.below(2) == 0 {
        labels.insert("shard".into(), json!(rng.below(3).to_string()));
    }
    let data: serde_json::Map<String, Value> = (0..rng.below(4))
        .map(|i| (format!("k{i}"), json!(rng.next_u64().to_string())))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": data,
    }))
    .expect("a ConfigMap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflectors_stay_equal_to_the_store_through_random_writes() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in NAMESPACES {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces.create(&PostParams::default(), &obj).await.unwrap();
    }
    let mut rng = Rng::new(common::seed(0x5eed_0001));
    // What this test believes exists, with the last object the server returned for it.
    let mut live: BTreeMap<(String, String), ConfigMap> = BTreeMap::new();
    // Some objects exist before the reflectors start, so their initial lists have pages.
    for i in 0..12 {
        let ns = NAMESPACES[i % 2];
        let name = format!("cm-{i}");
        let cm = random_config_map(&mut rng, ns, &name);
        let created = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        live.insert((ns.to_owned(), name), created);
    }

    let errors = Arc::new(AtomicUsize::new(0));
    let all: Api<ConfigMap> = Api::all(client.clone());
    let plain = start_reflector(all.clone(), watcher::Config::default(), errors.clone());
    let paged = start_reflector(
        all.clone(),
        watcher::Config::default().page_size(5),
        errors.clone(),
    );
    let web = start_reflector(
        all.clone(),
        watcher::Config::default().labels("tier=web").streaming_lists(),
        errors.clone(),
    );

    let check = |label: String| {
        let (plain, paged, web) = (plain.clone(), paged.clone(), web.clone());
        let server = server.clone();
        async move {
            let what = format!("the reflectors to equal the server ({label})");
            wait_until_async(&what, WAIT, || {
                futures::future::ready(all_equal(&server, &plain, &paged, &web))
            })
            .await
            .unwrap();
        }
    };
    check("initial lists".into()).await;

    let (mut creates, mut replaces, mut patches, mut noops, mut deletes) = (0, 0, 0, 0, 0);
    for step in 1..=1000_u32 {
        let ns = *rng.pick(NAMESPACES);
        let name = format!("cm-{}", rng.below(30));
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let key = (ns.to_owned(), name.clone());
        match (live.get(&key).cloned(), rng.below(10)) {
            (None, _) => {
                let created = api
                    .create(&PostParams::default(), &random_config_map(&mut rng, ns, &name))
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: create {ns}/{name}: {e}"));
                live.insert(key, created);
                creates += 1;
            }
            (Some(current), 0..=3) => {
                // A replace based on the last version seen (PUT with its resourceVersion).
                let mut next = random_config_map(&mut rng, ns, &name);
                next.metadata.resource_version = current.metadata.resource_version.clone();
                let replaced = api
                    .replace(&name, &PostParams::default(), &next)
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: replace {ns}/{name}: {e}"));
                live.insert(key, replaced);
                replaces += 1;
            }
            (Some(_), 4..=5) => {
                let tier = rng.pick(TIERS).map_or(Value::Null, |t| json!(t));
                let patch = json!({"metadata": {"labels": {"tier": tier}}, "data": {"p": step.to_string()}});
                let patched = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: patch {ns}/{name}: {e}"));
                live.insert(key, patched);
                patches += 1;
            }
            (Some(current), 6) => {
                // A write that changes nothing: same resourceVersion back, no event.
                let same = api
                    .replace(&name, &PostParams::default(), &current)
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: no-op replace {ns}/{name}: {e}"));
                assert_eq!(
                    same.metadata.resource_version, current.metadata.resource_version,
                    "step {step}: a no-op replace of {ns}/{name} changed the resourceVersion"
                );
                noops += 1;
            }
            (Some(_), _) => {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: delete {ns}/{name}: {e}"));
                live.remove(&key);
                deletes += 1;
            }
        }
        if step.is_multiple_of(100) {
            check(format!("after step {step}")).await;
        }
    }
    eprintln!("{creates} creates, {replaces} replaces, {patches} patches, {noops} no-ops, {deletes} deletes");
    assert!(
        creates > 100 && replaces > 100 && patches > 50 && noops > 20 && deletes > 100,
        "the random mix must exercise every kind of write"
    );
    // The test's own bookkeeping agrees with the server too.
    let server_keys: Vec<String> = server_objects(&server, "", "v1", "configmaps")
        .into_keys()
        .collect();
    let live_keys: Vec<String> = live.keys().map(|(ns, n)| format!("{ns}/{n}")).collect();
    assert_eq!(server_keys, live_keys);
    assert_eq!(
        errors.load(Ordering::SeqCst),
        0,
        "the reflectors' watchers reported errors"
    );
}
