//! `kube::runtime::Controller` over the project's Subnet CRD, in process: the reconciler adds its
//! finalizer (kube's JSON patch with `test /metadata/finalizers null`), writes status with
//! server-side apply on `/status` and with a merge patch, follows a spec change, and on delete runs
//! its cleanup once, after which the finalizer goes and the object with it.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{WAIT, install_crds};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::Subnet;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

const FINALIZER: &str = "kubeovn.io/lab-test";
const MANAGER: &str = "lab-test-controller";

#[derive(Debug, thiserror::Error)]
#[error("kube: {0}")]
struct ReconcileError(#[from] kube::Error);

struct Ctx {
    api: Api<Subnet>,
    reconciles: AtomicUsize,
    cleaned: Mutex<Vec<String>>,
    errors: Mutex<Vec<String>>,
}

async fn reconcile(subnet: Arc<Subnet>, ctx: Arc<Ctx>) -> Result<Action, finalizer::Error<ReconcileError>> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    finalizer(&ctx.api, FINALIZER, subnet, |event| async {
        match event {
            finalizer::Event::Apply(s) => write_status(&ctx, &s).await,
            finalizer::Event::Cleanup(s) => {
                ctx.cleaned.lock().unwrap().push(s.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
}

/// Status as kube users write it: their own fields by server-side apply (forced, one field
/// manager), and one more field by merge patch.
async fn write_status(ctx: &Ctx, subnet: &Subnet) -> Result<Action, ReconcileError> {
    let name = subnet.name_any();
    let generation = subnet.meta().generation;
    let applied = json!({
        "apiVersion": "kubeovn.io/v1",
        "kind": "Subnet",
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled",
                                   "observedGeneration": generation}]},
    });
    ctx.api
        .patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(applied),
        )
        .await?;
    let cidr = subnet.spec.cidr_block.clone().unwrap_or_default();
    ctx.api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"v4availableIPrange": cidr}})),
        )
        .await?;
    Ok(Action::await_change())
}

fn observed_generation(s: &Subnet) -> Option<i64> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .observed_generation
}

fn available_range(s: &Subnet) -> Option<String> {
    s.status.as_ref()?.v4_available_ip_range.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_finalizer_status_and_delete() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    install_crds(&client).await.unwrap();
    let api: Api<Subnet> = Api::all(client.clone());
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        reconciles: AtomicUsize::new(0),
        cleaned: Mutex::new(Vec::new()),
        errors: Mutex::new(Vec::new()),
    });
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, error, ctx| {
                ctx.errors.lock().unwrap().push(error.to_string());
                Action::requeue(Duration::from_millis(50))
            },
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));
    let controller = tokio::spawn(controller);

    let subnet: Subnet = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "ctl-a"},
        "spec": {"protocol": "IPv4", "cidrBlock": "10.1.0.0/16"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &subnet).await.unwrap();

    wait_until_async("the finalizer and status of generation 1", WAIT, || async {
        let s = api.get("ctl-a").await?;
        Ok(s.finalizers().iter().any(|f| f == FINALIZER)
            && observed_generation(&s) == Some(1)
            && available_range(&s).as_deref() == Some("10.1.0.0/16"))
    })
    .await
    .unwrap();
    let s = api.get("ctl-a").await.unwrap();
    assert_eq!(
        s.meta().generation,
        Some(1),
        "a finalizer and status writes are not spec changes"
    );
    assert_eq!(s.spec.cidr_block.as_deref(), Some("10.1.0.0/16"));

    // A spec change bumps the generation; the controller follows it.
    api.patch(
        "ctl-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cidrBlock": "10.2.0.0/16"}})),
    )
    .await
    .unwrap();
    wait_until_async("the status to follow generation 2", WAIT, || async {
        let s = api.get("ctl-a").await?;
        Ok(observed_generation(&s) == Some(2) && available_range(&s).as_deref() == Some("10.2.0.0/16"))
    })
    .await
    .unwrap();
    assert_eq!(api.get("ctl-a").await.unwrap().meta().generation, Some(2));

    // Delete: the finalizer holds the object until the cleanup ran and removed it.
    let deleting = api.delete("ctl-a", &DeleteParams::default()).await.unwrap();
    let held = deleting
        .left()
        .expect("a finalizer keeps the object: the delete returns it");
    assert!(held.meta().deletion_timestamp.is_some());
    wait_until_async("the subnet to be gone", WAIT, || async {
        Ok(api.get_opt("ctl-a").await?.is_none())
    })
    .await
    .unwrap();
    assert_eq!(
        *ctx.cleaned.lock().unwrap(),
        vec!["ctl-a".to_owned()],
        "cleanup runs once"
    );
    assert!(
        ctx.errors.lock().unwrap().is_empty(),
        "reconcile errors: {:?}",
        ctx.errors.lock().unwrap()
    );
    // A no-op status write changes nothing and triggers nothing, so the controller settles: a
    // handful of reconciles, not a loop.
    let reconciles = ctx.reconciles.load(Ordering::SeqCst);
    assert!(
        (4..30).contains(&reconciles),
        "{reconciles} reconciles for one object's life"
    );
    controller.abort();
}
