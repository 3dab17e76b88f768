//! The condition type every Kube-OVN status shares, and the small pure helpers controllers use
//! to maintain a condition list the way Kube-OVN does.
//!
//! Kube-OVN's `Condition` is its own type, not `metav1.Condition`: it has `lastUpdateTime` as
//! well as `lastTransitionTime`, and its CRDs declare `status` as a plain string (no enum) and
//! require nothing. We mirror that schema exactly. The transition rule in [`set_condition`]
//! follows Kube-OVN: `lastUpdateTime` moves on every write, `lastTransitionTime` only when the
//! status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::ExtraFields;

/// Condition type set once the object is fully reconciled.
pub const READY: &str = "Ready";
/// Condition type recording whether the spec passed validation.
pub const VALIDATED: &str = "Validated";
/// Condition type carrying the last reconcile error.
pub const ERROR: &str = "Error";
/// Reason Kube-OVN puts on conditions it has just initialised to `Unknown`.
pub const REASON_INIT: &str = "Init";

/// `True`, `False` or `Unknown`, as in every Kubernetes condition.
///
/// The CRD schema keeps this a plain string (as Kube-OVN's does). A value outside the three
/// reads as `Unknown` rather than failing the whole object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    #[serde(other)]
    Unknown,
}

/// One entry of a Kube-OVN `status.conditions` list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = no_schema_defaults)]
pub struct Condition {
    /// What this condition is about, e.g. `Ready`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// Whether the condition holds. A condition written without a status reads as `Unknown`.
    #[serde(default)]
    #[schemars(with = "String")]
    pub status: ConditionStatus,
    /// Machine-readable reason for the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the condition was last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}

/// `type` and `status` read leniently (`#[serde(default)]`), but that is our decoding choice,
/// not something the CRD should advertise: keep schemars from turning it into schema defaults.
fn no_schema_defaults(schema: &mut Schema) {
    if let Some(props) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for prop in props.values_mut() {
            if let Some(prop) = prop.as_object_mut() {
                prop.remove("default");
            }
        }
    }
}

/// A ProviderNetwork condition: the shared fields plus the node it reports on (the provider
/// network keeps one condition per node).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderNetworkCondition {
    /// The condition itself.
    #[serde(flatten)]
    pub condition: Condition,
    /// Node the condition describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Condition {
    /// A condition with the given type, status, reason and message and no timestamps.
    pub fn new(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Self {
        Self {
            type_: type_.to_owned(),
            status,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            ..Self::default()
        }
    }
}

/// The condition of type `type_`, if the list has one.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Writes `update` into `conditions` (replacing the entry of the same type or appending one),
/// stamping `lastUpdateTime = now`, and `lastTransitionTime = now` only when the status differs
/// from the previous entry's (or there was none). Returns whether anything but
/// `lastUpdateTime` changed, so a caller can skip a no-op status write.
pub fn set_condition(conditions: &mut Vec<Condition>, mut update: Condition, now: &Time) -> bool {
    update.last_update_time = Some(now.clone());
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == update.type_) else {
        update.last_transition_time = Some(now.clone());
        conditions.push(update);
        return true;
    };
    let flipped = existing.status != update.status;
    update.last_transition_time = if flipped {
        Some(now.clone())
    } else {
        existing.last_transition_time.clone()
    };
    let changed = flipped
        || existing.reason != update.reason
        || existing.message != update.message
        || existing.observed_generation != update.observed_generation;
    *existing = update;
    changed
}

/// Adds `Ready`, `Validated` and `Error` as `Unknown` with reason `Init` where missing, as
/// Kube-OVN does before a first reconcile. Returns whether any was added.
pub fn ensure_standard_conditions(conditions: &mut Vec<Condition>, now: &Time) -> bool {
    let mut added = false;
    for type_ in [READY, VALIDATED, ERROR] {
        if find_condition(conditions, type_).is_none() {
            let c = Condition::new(type_, ConditionStatus::Unknown, REASON_INIT, "Not Observed");
            set_condition(conditions, c, now);
            added = true;
        }
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut list = Vec::new();
        assert!(set_condition(
            &mut list,
            Condition::new(READY, ConditionStatus::False, "A", "a"),
            &at(10)
        ));
        assert!(set_condition(
            &mut list,
            Condition::new(READY, ConditionStatus::False, "B", "b"),
            &at(20)
        ));
        assert_eq!(list[0].last_transition_time, Some(at(10)));
        assert_eq!(list[0].last_update_time, Some(at(20)));
        assert!(!set_condition(
            &mut list,
            Condition::new(READY, ConditionStatus::False, "B", "b"),
            &at(25)
        ));
        assert!(set_condition(
            &mut list,
            Condition::new(READY, ConditionStatus::True, "B", "b"),
            &at(30)
        ));
        assert_eq!(list[0].last_transition_time, Some(at(30)));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn standard_conditions_are_added_once() {
        let mut list = Vec::new();
        assert!(ensure_standard_conditions(&mut list, &at(1)));
        assert!(!ensure_standard_conditions(&mut list, &at(2)));
        let types: Vec<_> = list.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [READY, VALIDATED, ERROR]);
        assert!(list.iter().all(|c| c.status == ConditionStatus::Unknown));
    }

    #[test]
    fn unknown_status_values_read_as_unknown_and_json_keys_match() {
        let c: Condition = serde_json::from_str(
            r#"{"type":"Ready","status":"Maybe","observedGeneration":3,"lastTransitionTime":"2024-05-01T10:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(c.status, ConditionStatus::Unknown);
        assert_eq!(c.observed_generation, Some(3));
        let c = Condition::new(READY, ConditionStatus::True, "Ok", "fine");
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"Ready","status":"True","reason":"Ok","message":"fine"})
        );
    }

    #[test]
    fn provider_network_condition_keeps_node() {
        let text = r#"{"type":"Ready","status":"True","node":"n1","lastUpdateTime":"2024-05-01T10:00:00Z"}"#;
        let c: ProviderNetworkCondition = serde_json::from_str(text).unwrap();
        assert_eq!(c.node.as_deref(), Some("n1"));
        assert!(c.condition.extra.is_empty());
        let back: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(back, serde_json::from_str::<serde_json::Value>(text).unwrap());
    }
}
