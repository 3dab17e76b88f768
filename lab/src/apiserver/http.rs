//! The HTTP face of the emulator: URL and query parsing, verbs, content types, and the JSON
//! bodies (objects, lists, tables, Status errors) the real API server sends.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::field_validation::FieldValidation;
use super::registry::Resource;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{DeleteOptions, Propagation, Store, WatchRequest, WatchStart, WriteOptions};
use super::watch_stream::WatchOptions;
use super::{ServerState, binding, content, discovery, managed, openapi, patch, scale, table, watch_stream};

/// A resource request, from its URL.
#[derive(Debug)]
pub struct Target {
    pub resource: Arc<Resource>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `…/status`.
    pub status: bool,
    /// `…/scale` (served by `scale`).
    pub scale: bool,
    /// `pods/{name}/binding` (served by `binding`).
    pub binding: bool,
}

pub type Query = HashMap<String, String>;

fn query(uri: &Uri) -> Query {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn flag(q: &Query, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true" || v == "1")
}

pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

pub fn error_response(e: &ApiError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.status(),
    )
}

/// The one handler behind every path.
pub async fn handle(
    State(state): State<Arc<ServerState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let span = tracing::debug_span!("request", %method, path = uri.path());
    if let Some(refused) = state.auth.gate(&state.store, &method, &uri, &headers) {
        return refused;
    }
    if !content::accepts_json(&headers) {
        return error_response(&content::not_acceptable(&headers));
    }
    let mut warnings = Vec::new();
    let routed = span.in_scope(|| route(&state, &method, &uri, &headers, &body, &mut warnings));
    match routed {
        Ok(Reply::Json(code, v)) => {
            let mut response = json_response(code, &v);
            for w in warnings {
                // RFC 7234 warn-code 299 ("miscellaneous persistent warning"), as the API server
                // sends them; kubectl prints each as "Warning: ...".
                let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
                if let Ok(value) = header::HeaderValue::from_str(&text) {
                    response.headers_mut().append(header::WARNING, value);
                }
            }
            response
        }
        Ok(Reply::Watch(request, options)) => watch_stream::respond(&state, &request, options),
        Err(e) => {
            tracing::debug!(code = e.code, message = %e.message, "request failed");
            error_response(&e)
        }
    }
}

enum Reply {
    Json(StatusCode, Value),
    Watch(WatchRequest, WatchOptions),
}

fn timeout_of(q: &Query) -> Option<std::time::Duration> {
    q.get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(std::time::Duration::from_secs)
}

fn route(
    state: &ServerState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    warnings: &mut Vec<String>,
) -> Result<Reply, ApiError> {
    let segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let store = &state.store;
    let (group, version, rest) = match segs.as_slice() {
        [] => return Ok(Reply::Json(StatusCode::OK, discovery::root_paths())),
        ["openapi", "v3"] => return Ok(Reply::Json(StatusCode::OK, openapi::index(&store.resources()))),
        ["openapi", "v3", gv @ ..] => {
            return openapi::for_path(&store.resources(), &gv.join("/"))
                .map(|doc| Reply::Json(StatusCode::OK, doc))
                .ok_or_else(|| {
                    ApiError::new(
                        404,
                        "NotFound",
                        format!("no OpenAPI document for {}", gv.join("/")),
                    )
                });
        }
        ["version"] => return Ok(Reply::Json(StatusCode::OK, discovery::version())),
        ["healthz" | "readyz" | "livez"] => return Ok(Reply::Json(StatusCode::OK, json!("ok"))),
        ["api"] => return Ok(Reply::Json(StatusCode::OK, discovery::core_versions())),
        ["apis"] => return Ok(Reply::Json(StatusCode::OK, discovery::groups(store))),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g] => return discovery::group(store, g).map(|v| Reply::Json(StatusCode::OK, v)),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({})",
                    uri.path()
                ),
            ));
        }
    };
    if rest.is_empty() {
        return discovery::resources(store, group, version).map(|v| Reply::Json(StatusCode::OK, v));
    }
    let (namespace, resource_name, tail) = match rest {
        ["namespaces", ns, res, tail @ ..] if !matches!(*res, "status" | "finalize") || !tail.is_empty() => {
            (Some((*ns).to_owned()), *res, tail)
        }
        [res, tail @ ..] => (None, *res, tail),
        [] => unreachable!("checked above"),
    };
    // {name} and one subresource at most: anything deeper names nothing that is served.
    if tail.len() > 2 {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({})",
                uri.path()
            ),
        ));
    }
    let (name, sub) = (tail.first().copied(), tail.get(1).copied());
    let resource = store.resource(group, version, resource_name).ok_or_else(|| {
        let gv = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({gv} {resource_name})"),
        )
    })?;
    let binding = sub == Some("binding") && resource.group.is_empty() && resource.plural == "pods";
    let (status, scale) = match sub {
        None => (false, false),
        Some("status") if resource.status_subresource => (true, false),
        Some("scale") if resource.scale_subresource => (false, true),
        Some("finalize") if resource.plural == "namespaces" => (false, false),
        Some("binding") if binding => (false, false),
        Some(other) => {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("{}: subresource {other:?} is not served", resource.qualified()),
            ));
        }
    };
    if resource.namespaced && namespace.is_none() && !(matches!(*method, Method::GET) && name.is_none()) {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "{} is namespaced: use /namespaces/{{ns}}/{}",
                resource.plural, resource.plural
            ),
        ));
    }
    if !resource.namespaced && namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("{} is not namespaced", resource.plural),
        ));
    }
    let target = Target {
        resource,
        namespace,
        name: name.map(str::to_owned),
        status,
        scale,
        binding,
    };
    let q = query(uri);
    if target.scale {
        let (code, body) = scale::serve(store, &target, method, headers, body, &write_options(&q))?;
        return Ok(Reply::Json(code, body));
    }
    if target.binding {
        let (code, body) = binding::serve(store, &target, method, headers, body, &write_options(&q))?;
        return Ok(Reply::Json(code, body));
    }
    match *method {
        Method::GET => get(store, &target, &q, headers),
        Method::POST => create(store, &target, &q, headers, body, warnings),
        Method::PUT => update(store, &target, &q, headers, body, warnings),
        Method::PATCH => patch_object(store, &target, &q, headers, body, warnings),
        Method::DELETE => delete(store, &target, &q, headers, body),
        _ => Err(ApiError::method_not_allowed(format!(
            "method {method} is not supported"
        ))),
    }
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn selectors(target: &Target, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map_or("", String::as_str),
        &target.resource.field_selectors(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((labels, fields))
}

fn get(store: &Store, target: &Target, q: &Query, headers: &HeaderMap) -> Result<Reply, ApiError> {
    let res = &target.resource;
    if let Some(name) = &target.name {
        let obj = store.get(res, target.namespace.as_deref(), name)?;
        let body = if wants_table(headers) {
            table::table(res, &[obj], store.current_rv(), q, jiff::Timestamp::now())
        } else {
            (*obj).clone()
        };
        return Ok(Reply::Json(StatusCode::OK, body));
    }
    let (labels, fields) = selectors(target, q)?;
    if flag(q, "watch") {
        let rv = q.get("resourceVersion").map_or("", String::as_str);
        let send_initial = flag(q, "sendInitialEvents");
        let start = match rv {
            _ if send_initial => WatchStart::Current,
            "" | "0" => WatchStart::Current,
            n => WatchStart::After(
                n.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {n:?}")))?,
            ),
        };
        let request = WatchRequest {
            resource: res.clone(),
            namespace: target.namespace.clone(),
            start,
            labels,
            fields,
        };
        let options = WatchOptions {
            bookmarks: flag(q, "allowWatchBookmarks"),
            initial_end: send_initial,
            timeout: timeout_of(q),
            // `kubectl get -w` watches as tables too: each event then carries a one-row table.
            table: wants_table(headers).then(|| q.clone()),
        };
        return Ok(Reply::Watch(request, options));
    }
    let limit = q
        .get("limit")
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))
        })
        .transpose()?;
    let page = store.list(
        res,
        target.namespace.as_deref(),
        &labels,
        &fields,
        limit,
        q.get("continue").map(String::as_str).filter(|c| !c.is_empty()),
    )?;
    if wants_table(headers) {
        return Ok(Reply::Json(
            StatusCode::OK,
            table::table(res, &page.items, page.resource_version, q, jiff::Timestamp::now()),
        ));
    }
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        metadata["continue"] = json!(c);
        metadata["remainingItemCount"] = json!(page.remaining);
    }
    let items: Vec<&Value> = page.items.iter().map(AsRef::as_ref).collect();
    Ok(Reply::Json(
        StatusCode::OK,
        json!({"apiVersion": res.api_version(), "kind": res.list_kind(), "metadata": metadata, "items": items}),
    ))
}

fn write_options(q: &Query) -> WriteOptions {
    WriteOptions {
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        field_manager: q.get("fieldManager").cloned(),
        managed_by_apply: false,
    }
}

fn create(
    store: &Store,
    target: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Reply, ApiError> {
    if target.name.is_some() {
        return Err(ApiError::method_not_allowed(
            "POST names a collection, not an object",
        ));
    }
    let (obj, _) = content::parse(headers, body, content::OBJECT_TYPES, &target.resource)?;
    field_validation(q)?.check(&target.resource, &obj, warnings)?;
    let created = store.create(
        &target.resource,
        target.namespace.as_deref(),
        obj,
        &write_options(q),
    )?;
    Ok(Reply::Json(StatusCode::CREATED, (*created).clone()))
}

fn update(
    store: &Store,
    target: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Reply, ApiError> {
    let name = target
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("PUT needs an object name"))?;
    let (obj, _) = content::parse(headers, body, content::OBJECT_TYPES, &target.resource)?;
    field_validation(q)?.check(&target.resource, &obj, warnings)?;
    let updated = store.update(
        &target.resource,
        target.namespace.as_deref(),
        name,
        obj,
        target.status,
        &write_options(q),
    )?;
    Ok(Reply::Json(StatusCode::OK, (*updated).clone()))
}

fn patch_object(
    store: &Store,
    target: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Reply, ApiError> {
    let name = target
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("PATCH needs an object name"))?;
    let (patch_body, mime) = content::parse(headers, body, content::PATCH_TYPES, &target.resource)?;
    let validation = field_validation(q)?;
    let res = target.resource.clone();
    let mut opts = write_options(q);
    let apply = mime == "application/apply-patch+yaml";
    if apply {
        let manager = opts
            .field_manager
            .clone()
            .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply patch"))?;
        opts.managed_by_apply = true;
        let force = flag(q, "force");
        let sub = target.status.then_some("status");
        let existed = store.get(&res, target.namespace.as_deref(), name).is_ok();
        // Apply creates a missing object, but not through /status: that subresource of a missing
        // object is NotFound, as on the real server.
        if target.status && !existed {
            return Err(ApiError::not_found(&res, name));
        }
        let out = store.modify(
            &res,
            target.namespace.as_deref(),
            name,
            target.status,
            &opts,
            |live| {
                let applied = managed::apply(&res, live, &patch_body, &manager, force, sub, &meta_now())
                    .map_err(|e| e.into_api_error(&res, name))?;
                validation.check(&res, &applied, warnings)?;
                Ok(applied)
            },
        )?;
        let code = if existed {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        return Ok(Reply::Json(code, (*out).clone()));
    }
    // The real server refuses the media type before it looks for the object.
    if mime == "application/strategic-merge-patch+json" && !managed::strategic_merge_supported(&res) {
        return Err(managed::StrategicMergeError::Unsupported.into_api_error());
    }
    let out = store.patch(
        &res,
        target.namespace.as_deref(),
        name,
        target.status,
        &opts,
        |old| {
            let new = match mime.as_str() {
                "application/json-patch+json" => patch::json_patch(old, &patch_body)
                    .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?,
                "application/merge-patch+json" => patch::merge_patch(old, &patch_body),
                _ => managed::strategic_merge(&res, old, &patch_body)
                    .map_err(managed::StrategicMergeError::into_api_error)?,
            };
            validation.check(&res, &new, warnings)?;
            Ok(new)
        },
    )?;
    Ok(Reply::Json(StatusCode::OK, (*out).clone()))
}

fn field_validation(q: &Query) -> Result<FieldValidation, ApiError> {
    FieldValidation::parse(q.get("fieldValidation").map(String::as_str))
}

fn meta_now() -> String {
    super::meta::now()
}

fn delete(
    store: &Store,
    target: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let options = content::delete_options(headers, body)?;
    let policy = q.get("propagationPolicy").cloned().or_else(|| {
        options
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let propagation = match policy.as_deref() {
        None | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid propagationPolicy {other:?}"
            )));
        }
    };
    let text = |p: &str| options.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let dry_run = q.get("dryRun").is_some_and(|d| d == "All")
        || options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x == "All"));
    let opts = DeleteOptions {
        propagation,
        precondition_uid: text("/preconditions/uid"),
        precondition_rv: text("/preconditions/resourceVersion"),
        dry_run,
    };
    let res = &target.resource;
    let Some(name) = &target.name else {
        // deletecollection: everything the selectors match.
        let (labels, fields) = selectors(target, q)?;
        let page = store.list(res, target.namespace.as_deref(), &labels, &fields, None, None)?;
        let mut gone = Vec::new();
        for obj in &page.items {
            let name = super::meta::name(obj).unwrap_or_default();
            let ns = super::meta::namespace(obj);
            match store.delete(res, ns, name, &opts) {
                Ok(o) => gone.push((*o).clone()),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(Reply::Json(
            StatusCode::OK,
            json!({"apiVersion": res.api_version(), "kind": res.list_kind(), "metadata": {"resourceVersion": store.current_rv().to_string()}, "items": gone}),
        ));
    };
    let out = store.delete(res, target.namespace.as_deref(), name, &opts)?;
    Ok(Reply::Json(StatusCode::OK, (*out).clone()))
}
