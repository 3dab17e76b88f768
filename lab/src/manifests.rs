//! Creating the objects of a YAML manifest through a kube client, whatever their kinds: for tests
//! and the lab, which apply `deploy/` and `examples/` files to an API server without kubectl.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("parsing the manifest: {0}")]
    Parse(String),
    #[error("document {index}: {why}")]
    Document { index: usize, why: String },
    #[error("creating {kind} {name}: {source}")]
    Create {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Creates every document of `yaml`, in order; returns them. The resource of a kind is its
/// lower-cased plural with an `s` (right for every kind deploy/ and examples/ hold but CRs, whose
/// plural comes from discovery: [`create_all`] is for built-in kinds and RBAC).
pub async fn create_all(kube: &kube::Client, yaml: &str) -> Result<Vec<Value>, ManifestError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(yaml)
        .map_err(|e| ManifestError::Parse(e.to_string()))?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    for (index, doc) in docs.iter().enumerate() {
        let bad = |why: &str| ManifestError::Document {
            index,
            why: why.to_owned(),
        };
        let api_version = doc["apiVersion"].as_str().ok_or_else(|| bad("no apiVersion"))?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = doc["kind"].as_str().ok_or_else(|| bad("no kind"))?;
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
        let obj: DynamicObject = serde_json::from_value(doc.clone()).map_err(|e| bad(&e.to_string()))?;
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(kube.clone(), ns, &ar),
            None => Api::all_with(kube.clone(), &ar),
        };
        api.create(&PostParams::default(), &obj)
            .await
            .map_err(|source| ManifestError::Create {
                kind: kind.to_owned(),
                name: doc["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                source,
            })?;
    }
    Ok(docs)
}
