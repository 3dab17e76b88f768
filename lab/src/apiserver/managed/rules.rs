//! List (and map) semantics, the one source that server-side apply and strategic merge patch
//! both read.
//!
//! Pure: no I/O. For built-in kinds the real server takes these from the Go types' markers
//! (`+listType=map`, `+listMapKey=name` for apply; `patchStrategy:"merge"`, `patchMergeKey:"name"`
//! for strategic merge); the table below restates the markers of the fields our components touch
//! (Kubernetes 1.33). Lists it does not name are atomic, as for any unmarked list upstream. For a
//! custom resource they come from the CRD's schema (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`), walked along the path; its `metadata`
//! follows ObjectMeta's markers like any built-in.

use serde_json::Value;

use crate::apiserver::registry::Resource;

/// How server-side apply merges and owns a list.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// One value, replaced whole and owned as one field.
    Atomic,
    /// Scalars merged as a set; each element is owned (`v:` path elements).
    Set,
    /// Objects identified by their key fields; each element is owned (`k:` path elements).
    Map(Vec<MapKey>),
}

/// A key field of an associative list, with the schema default the server assumes when an
/// element omits it (a container port without `protocol` is a TCP port).
#[derive(Debug, Clone, PartialEq)]
pub struct MapKey {
    pub name: String,
    pub default: Option<Value>,
}

/// How a strategic merge patch treats a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchStrategy {
    /// The patch's list replaces the object's.
    Replace,
    /// Scalars: the patch's values are added to the object's (`$deleteFromPrimitiveList` removes).
    MergeValues,
    /// Objects: elements with the same value of the merge key are merged, others appended.
    MergeByKey(&'static str),
}

/// A built-in list's apply and patch semantics.
#[derive(Debug, Clone, Copy)]
enum Apply {
    Atomic,
    Set,
    /// Key field names, each with an optional string default.
    Map(&'static [(&'static str, Option<&'static str>)]),
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    List(Apply, PatchStrategy),
    /// An object owned and replaced whole by apply (`+mapType=atomic` / `+structType=atomic`).
    AtomicMap,
}

/// `(path, shape)`; paths name fields with `.` and list elements with `[]`. Pod container lists
/// are written once, for `containers`: `initContainers` and `ephemeralContainers` share the type.
type Rules = &'static [(&'static str, Shape)];

use Apply as A;
use PatchStrategy as P;
use Shape::{AtomicMap, List};

const NAME: Apply = A::Map(&[("name", None)]);
const TYPE: Apply = A::Map(&[("type", None)]);
const CONDITIONS: (&str, Shape) = ("status.conditions", List(TYPE, P::MergeByKey("type")));

const METADATA: Rules = &[
    ("metadata.finalizers", List(A::Set, P::MergeValues)),
    (
        "metadata.ownerReferences",
        List(A::Map(&[("uid", None)]), P::MergeByKey("uid")),
    ),
];

const POD: Rules = &[
    ("spec.containers", List(NAME, P::MergeByKey("name"))),
    (
        "spec.containers[].ports",
        List(
            A::Map(&[("containerPort", None), ("protocol", Some("TCP"))]),
            P::MergeByKey("containerPort"),
        ),
    ),
    ("spec.containers[].env", List(NAME, P::MergeByKey("name"))),
    (
        "spec.containers[].volumeMounts",
        List(A::Map(&[("mountPath", None)]), P::MergeByKey("mountPath")),
    ),
    (
        "spec.containers[].volumeDevices",
        List(A::Map(&[("devicePath", None)]), P::MergeByKey("devicePath")),
    ),
    ("spec.volumes", List(NAME, P::MergeByKey("name"))),
    ("spec.imagePullSecrets", List(NAME, P::MergeByKey("name"))),
    (
        "spec.hostAliases",
        List(A::Map(&[("ip", None)]), P::MergeByKey("ip")),
    ),
    ("spec.schedulingGates", List(NAME, P::MergeByKey("name"))),
    ("spec.resourceClaims", List(NAME, P::MergeByKey("name"))),
    (
        "spec.topologySpreadConstraints",
        List(
            A::Map(&[("topologyKey", None), ("whenUnsatisfiable", None)]),
            P::MergeByKey("topologyKey"),
        ),
    ),
    CONDITIONS,
    (
        "status.podIPs",
        List(A::Map(&[("ip", None)]), P::MergeByKey("ip")),
    ),
    ("status.hostIPs", List(A::Atomic, P::MergeByKey("ip"))),
];

const NODE: Rules = &[
    ("spec.podCIDRs", List(A::Set, P::MergeValues)),
    CONDITIONS,
    ("status.addresses", List(TYPE, P::MergeByKey("type"))),
];

const SERVICE: Rules = &[
    (
        "spec.ports",
        List(
            A::Map(&[("port", None), ("protocol", Some("TCP"))]),
            P::MergeByKey("port"),
        ),
    ),
    ("spec.selector", AtomicMap),
    CONDITIONS,
];

const WITH_CONDITIONS: Rules = &[CONDITIONS];

const SERVICE_ACCOUNT: Rules = &[("secrets", List(NAME, P::MergeByKey("name")))];

const ENDPOINT_SLICE: Rules = &[("endpoints[].addresses", List(A::Set, P::Replace))];

const NETWORK_POLICY: Rules = &[("spec.podSelector", AtomicMap)];

/// Rules by (group, kind); kinds not listed have only ObjectMeta's.
const KINDS: &[(&str, &str, Rules)] = &[
    ("", "Pod", POD),
    ("", "Node", NODE),
    ("", "Service", SERVICE),
    ("", "Namespace", WITH_CONDITIONS),
    ("", "ServiceAccount", SERVICE_ACCOUNT),
    ("discovery.k8s.io", "EndpointSlice", ENDPOINT_SLICE),
    ("networking.k8s.io", "NetworkPolicy", NETWORK_POLICY),
    (
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        WITH_CONDITIONS,
    ),
];

/// Where in an object a walk is, and so which rules apply there. Start at
/// [`ListRules::for_resource`] and step with [`ListRules::field`] and [`ListRules::item`].
#[derive(Debug, Clone)]
pub struct ListRules<'a> {
    at: At<'a>,
}

#[derive(Debug, Clone)]
enum At<'a> {
    /// A built-in kind (or a custom resource's metadata): its rules and the path so far.
    Builtin { rules: Rules, path: String },
    /// A custom resource at this schema node; `None` past what the schema describes (unknown or
    /// preserved fields, whose lists are atomic).
    Schema { node: Option<&'a Value>, root: bool },
}

impl<'a> ListRules<'a> {
    /// The rules at the top of `res`'s objects.
    pub fn for_resource(res: &'a Resource) -> Self {
        let at = if res.from_crd {
            At::Schema {
                node: res.schema.as_ref(),
                root: true,
            }
        } else {
            let rules = KINDS
                .iter()
                .find(|(g, k, _)| *g == res.group && *k == res.kind)
                .map_or(&[][..], |(_, _, r)| *r);
            At::Builtin {
                rules,
                path: String::new(),
            }
        };
        Self { at }
    }

    /// The rules at field `name` of the object here.
    #[must_use]
    pub fn field(&self, name: &str) -> Self {
        let at = match &self.at {
            At::Builtin { rules, path } => At::Builtin {
                rules,
                path: if path.is_empty() {
                    name.to_owned()
                } else {
                    format!("{path}.{name}")
                },
            },
            // A custom resource's metadata is an ObjectMeta, whatever its schema says.
            At::Schema { root: true, .. } if name == "metadata" => At::Builtin {
                rules: &[],
                path: "metadata".into(),
            },
            At::Schema { node, .. } => At::Schema {
                node: node.and_then(|n| {
                    n.get("properties")
                        .and_then(|p| p.get(name))
                        .or_else(|| n.get("additionalProperties").filter(|a| a.is_object()))
                }),
                root: false,
            },
        };
        Self { at }
    }

    /// The rules at the elements of the list here.
    #[must_use]
    pub fn item(&self) -> Self {
        let at = match &self.at {
            At::Builtin { rules, path } => At::Builtin {
                rules,
                path: format!("{path}[]"),
            },
            At::Schema { node, .. } => At::Schema {
                node: node.and_then(|n| n.get("items")),
                root: false,
            },
        };
        Self { at }
    }

    fn builtin_shape(rules: Rules, path: &str) -> Option<Shape> {
        let path = path
            .replace("spec.initContainers", "spec.containers")
            .replace("spec.ephemeralContainers", "spec.containers");
        METADATA
            .iter()
            .chain(rules.iter())
            .find(|(p, _)| *p == path)
            .map(|(_, s)| *s)
    }

    /// How apply treats the list here.
    pub fn list_type(&self) -> ListType {
        match &self.at {
            At::Builtin { rules, path } => match Self::builtin_shape(rules, path) {
                Some(List(A::Set, _)) => ListType::Set,
                Some(List(A::Map(keys), _)) => ListType::Map(
                    keys.iter()
                        .map(|(name, default)| MapKey {
                            name: (*name).to_owned(),
                            default: default.map(|d| Value::String(d.to_owned())),
                        })
                        .collect(),
                ),
                _ => ListType::Atomic,
            },
            At::Schema { node: Some(n), .. } => {
                match n.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => {
                        let names = n
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str);
                        ListType::Map(
                            names
                                .map(|name| MapKey {
                                    name: name.to_owned(),
                                    default: n.pointer(&format!("/items/properties/{name}/default")).cloned(),
                                })
                                .collect(),
                        )
                    }
                    _ => ListType::Atomic,
                }
            }
            At::Schema { node: None, .. } => ListType::Atomic,
        }
    }

    /// How a strategic merge patch treats the list here (custom resources have none: the API
    /// server refuses strategic merge patches for them).
    pub fn patch_strategy(&self) -> PatchStrategy {
        match &self.at {
            At::Builtin { rules, path } => match Self::builtin_shape(rules, path) {
                Some(List(_, strategy)) => strategy,
                _ => PatchStrategy::Replace,
            },
            At::Schema { .. } => PatchStrategy::Replace,
        }
    }

    /// Whether the object here is owned and replaced whole by apply.
    pub fn atomic_map(&self) -> bool {
        match &self.at {
            At::Builtin { rules, path } => {
                matches!(Self::builtin_shape(rules, path), Some(AtomicMap))
            }
            At::Schema { node, .. } => {
                node.and_then(|n| n.get("x-kubernetes-map-type"))
                    .and_then(Value::as_str)
                    == Some("atomic")
            }
        }
    }

    /// Whether the schema here forbids field `name`: a custom resource's object whose schema
    /// lists its properties and takes no others (no `additionalProperties`, no
    /// `x-kubernetes-preserve-unknown-fields`). Apply refuses such fields, where other writes
    /// have them pruned.
    pub fn undeclared(&self, name: &str) -> bool {
        match &self.at {
            At::Schema { node: Some(n), root } => {
                if *root && matches!(name, "apiVersion" | "kind" | "metadata") {
                    return false;
                }
                let is_object =
                    n.get("type").and_then(Value::as_str) == Some("object") || n.get("properties").is_some();
                let open = n
                    .get("additionalProperties")
                    .is_some_and(|a| a.is_object() || a == true)
                    || n.get("x-kubernetes-preserve-unknown-fields")
                        .and_then(Value::as_bool)
                        == Some(true);
                is_object && !open && n.get("properties").and_then(|p| p.get(name)).is_none()
            }
            _ => false,
        }
    }

    /// Whether the field here keeps an explicit `null` (a custom resource's `nullable: true`).
    /// Elsewhere `null` means absent: a built-in's Go struct has no null, and a custom
    /// resource's schema drops nulls of non-nullable fields.
    pub fn nullable(&self) -> bool {
        match &self.at {
            At::Schema { node: Some(n), .. } => n.get("nullable").and_then(Value::as_bool) == Some(true),
            _ => false,
        }
    }

    /// Whether `name` is a declared field of the object here, rather than a key of a map. Apply
    /// owns a map's keys themselves (`f:labels` → `f:app`), but a struct's fields only through
    /// what is inside them.
    pub fn declared(&self, name: &str) -> bool {
        match &self.at {
            At::Builtin { .. } => true,
            At::Schema { root: true, .. } if matches!(name, "apiVersion" | "kind" | "metadata") => true,
            At::Schema { node, .. } => node
                .and_then(|n| n.get("properties"))
                .is_some_and(|p| p.get(name).is_some()),
        }
    }
}
