//! Warning Events (core/v1) about the objects the agent's controllers work on, as Kubernetes'
//! components record them: `kubectl describe` and `kubectl get events` show why a pod has no
//! sandbox or a Service kept a ClusterIP it asked for.
//!
//! Repeats aggregate as the real event recorder does: the same object, reason and message make
//! one Event whose `count` and `lastTimestamp` grow. Recording never fails the caller: an Event
//! that cannot be written is logged.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::names::short_hash;

/// Records Events as one component (`kubelet`, `kube-ovn-lab-services`…).
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    component: String,
    /// The node, for a kubelet's events (`source.host`).
    host: Option<String>,
}

impl EventRecorder {
    pub fn new(client: Client, component: &str, host: Option<&str>) -> Self {
        Self {
            client,
            component: component.to_owned(),
            host: host.map(str::to_owned),
        }
    }

    /// A reference to `obj` for an Event's `involvedObject`.
    pub fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
        ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(obj.name_any()),
            namespace: obj.namespace(),
            uid: obj.uid(),
            resource_version: obj.resource_version(),
            field_path: None,
        }
    }

    /// Records a Warning about `involved`.
    pub async fn warning(&self, involved: &ObjectReference, reason: &str, message: &str) {
        if let Err(e) = self.record(involved, "Warning", reason, message).await {
            tracing::warn!(reason, error = %e, object = ?involved.name, "could not record an Event");
        }
    }

    async fn record(
        &self,
        involved: &ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let object = involved.name.clone().unwrap_or_default();
        // Events of cluster-scoped objects (Nodes) live in `default`, as the recorder puts them.
        let namespace = involved.namespace.clone().unwrap_or_else(|| "default".into());
        let key = format!(
            "{}\n{}\n{reason}\n{message}",
            involved.uid.as_deref().unwrap_or(&object),
            self.component
        );
        let name = format!("{object}.{}", short_hash(key.as_bytes(), 16));
        let now = jiff::Timestamp::now();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: involved.clone(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(type_.into()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: None::<MicroTime>,
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: self.host.clone(),
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone().unwrap_or_else(|| self.component.clone())),
            ..Event::default()
        };
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = api.get(&name).await?;
                let count = existing.count.unwrap_or(1) + 1;
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"count": count, "lastTimestamp": crate::agent::now()})),
                )
                .await
                .map(drop)
            }
            Err(e) => Err(e),
        }
    }
}
