//! `BgpAdvertisement`s as the run loop keeps them (issue 27, plan §3.5): each object validated
//! ([`policy::validate`]) before any of it is used; when a new generation is invalid, the last accepted spec of that
//! name stays in effect (kept in memory: a speaker that starts with an invalid one has none);
//! and the status every speaker computes alike, written only when it differs from the stored one.
//!
//! Status, and why it does not storm: every speaker watches every advertisement and would write
//! the same `Accepted` condition, so a speaker writes only when the stored status differs from
//! what it computed, with the object's resourceVersion as a precondition (a 409 means another
//! speaker wrote first: the watch brings its result and the comparison is made again). The
//! Warning event `InvalidBgpAdvertisement` goes with the write that turns `Accepted` False for a
//! generation, so a bad generation makes one event however many speakers there are, and every
//! speaker logs it once. `Conflict` depends on the node (which prefixes and peers it has): the
//! speaker that set it True owns it (its message starts `on node <node>:`) until it clears it;
//! the others leave an owned True alone, so two nodes never take turns rewriting it. (A node
//! whose speaker went away for good leaves its finding until the next generation.) The same
//! holds for `Accepted` True with reason `PartiallyApplied`: an aggregation length that this
//! node's members cannot take (policy's `Evaluation::refused`), with a Warning event
//! `BgpAggregationRefused`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource};
use kube_ovn_api::bgp_advertisement::{BgpAdvertisement, BgpAdvertisementStatus};
use kube_ovn_api::crd::condition::{find_condition, set_condition};
use kube_ovn_api::crd::{Condition, ConditionStatus};
use kube_ovn_support::Watched;
use tokio::sync::watch;

use crate::crd::CrdError;
use crate::policy::{self, ValidatedAdvertisement};

/// Condition type: the spec passed validation.
pub const ACCEPTED: &str = "Accepted";
/// Condition type: another advertisement's value won for some prefix and peer.
pub const CONFLICT: &str = "Conflict";
/// The Warning event's reason for an invalid advertisement.
pub const INVALID_REASON: &str = "InvalidBgpAdvertisement";
/// The Warning event's reason for an aggregation refused for some member on some node.
pub const AGGREGATION_REFUSED_REASON: &str = "BgpAggregationRefused";
/// `Accepted` False: the spec is invalid.
const INVALID: &str = "Invalid";
/// `Accepted` True, but this node announces some members unaggregated.
const PARTIALLY_APPLIED: &str = "PartiallyApplied";

/// One advertisement's validation result for the generation the speaker saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub generation: Option<i64>,
    /// `None`: accepted.
    pub error: Option<CrdError>,
}

/// What one pass over the advertisements gives the routes task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// The specs in effect: each object's current one when valid, else its last accepted one.
    pub in_effect: Vec<ValidatedAdvertisement>,
    /// By name, for the status task.
    pub verdicts: BTreeMap<String, Verdict>,
    /// Invalid generations this speaker had not seen before: log each once.
    pub newly_invalid: Vec<(String, CrdError)>,
}

/// The last accepted spec of each advertisement, by name.
#[derive(Debug, Default)]
pub struct Kept {
    accepted: BTreeMap<String, ValidatedAdvertisement>,
    /// Invalid (name, generation) already logged.
    logged: BTreeSet<(String, Option<i64>)>,
}

impl Kept {
    /// Validates every object; keeps what is accepted; forgets names that are gone.
    pub fn update(&mut self, objects: &[Arc<BgpAdvertisement>]) -> Pass {
        let mut pass = Pass::default();
        let names: BTreeSet<&str> = objects
            .iter()
            .filter_map(|o| o.metadata.name.as_deref())
            .collect();
        self.accepted.retain(|name, _| names.contains(name.as_str()));
        self.logged.retain(|(name, _)| names.contains(name.as_str()));
        for object in objects {
            let Some(name) = object.metadata.name.clone() else {
                continue;
            };
            let generation = object.metadata.generation;
            let error = match policy::validate(object) {
                Ok(v) => {
                    self.accepted.insert(name.clone(), v);
                    None
                }
                Err(e) => {
                    if self.logged.insert((name.clone(), generation)) {
                        pass.newly_invalid.push((name.clone(), e.clone()));
                    }
                    Some(e)
                }
            };
            pass.verdicts.insert(name, Verdict { generation, error });
        }
        pass.in_effect = self.accepted.values().cloned().collect();
        pass
    }
}

/// What this node's evaluation found about one advertisement (they depend on the node's
/// prefixes and peers, unlike the verdict).
#[derive(Debug, Clone, Copy, Default)]
pub struct Findings<'a> {
    /// Another advertisement's value won for some prefix and peer.
    pub conflict: Option<&'a str>,
    /// Its aggregation was refused for some member (the error names the field).
    pub refused: Option<&'a CrdError>,
}

/// A node-dependent condition another node set and still owns: the same `status` and `reason`
/// as `wanted` would be rewritten by every node that sees it differently, so the node named at
/// the start of its message keeps it until it clears it itself.
fn owned_elsewhere(stored: Option<&Condition>, reason: &str, generation: Option<i64>, owner: &str) -> bool {
    stored.is_some_and(|c| {
        c.reason.as_deref() == Some(reason)
            && c.observed_generation == generation
            && !c.message.as_deref().unwrap_or_default().starts_with(owner)
    })
}

/// The status this speaker would store for an advertisement, or `None` when the stored one
/// already says it.
pub fn desired_status(
    stored: Option<&BgpAdvertisementStatus>,
    verdict: &Verdict,
    findings: Findings<'_>,
    node: &str,
    now: &Time,
) -> Option<BgpAdvertisementStatus> {
    let mut status = stored.cloned().unwrap_or_default();
    let generation = verdict.generation;
    let owner = format!("on node {node}: ");
    let accepted = match (&verdict.error, findings.refused) {
        (Some(e), _) => Some(Condition::new(
            ACCEPTED,
            ConditionStatus::False,
            INVALID,
            &format!("{e}; the previously accepted spec, if any, stays in effect"),
        )),
        _ if owned_elsewhere(
            find_condition(&status.conditions, ACCEPTED),
            PARTIALLY_APPLIED,
            generation,
            &owner,
        ) =>
        {
            None
        }
        (None, Some(e)) => Some(Condition::new(
            ACCEPTED,
            ConditionStatus::True,
            PARTIALLY_APPLIED,
            &format!("{owner}{e}; those members are announced unaggregated"),
        )),
        (None, None) => Some(Condition::new(
            ACCEPTED,
            ConditionStatus::True,
            "Accepted",
            "the spec is in effect",
        )),
    };
    let mut changed = false;
    if let Some(c) = accepted {
        let c = Condition {
            observed_generation: generation,
            ..c
        };
        changed |= set_condition(&mut status.conditions, c, now);
    }
    let conflict = match findings.conflict {
        _ if owned_elsewhere(
            find_condition(&status.conditions, CONFLICT),
            "Conflict",
            generation,
            &owner,
        ) =>
        {
            None
        }
        Some(message) => Some(Condition::new(
            CONFLICT,
            ConditionStatus::True,
            "Conflict",
            &format!("{owner}{message}"),
        )),
        None => Some(Condition::new(
            CONFLICT,
            ConditionStatus::False,
            "NoConflict",
            "no other advertisement's value wins over this one's",
        )),
    };
    if let Some(c) = conflict {
        let c = Condition {
            observed_generation: generation,
            ..c
        };
        changed |= set_condition(&mut status.conditions, c, now);
    }
    if status.observed_generation != generation {
        status.observed_generation = generation;
        changed = true;
    }
    changed.then_some(status)
}

/// The Warning event a status write calls for: the first write of a reason and message of
/// `Accepted` that is a problem (`Invalid`, `PartiallyApplied`).
fn event_for(
    before: Option<&BgpAdvertisementStatus>,
    after: &BgpAdvertisementStatus,
) -> Option<(&'static str, String)> {
    let now = find_condition(&after.conditions, ACCEPTED)?;
    let was = before.and_then(|s| find_condition(&s.conditions, ACCEPTED));
    let same = was.is_some_and(|w| {
        w.reason == now.reason && w.message == now.message && w.observed_generation == now.observed_generation
    });
    let reason = match now.reason.as_deref() {
        Some(INVALID) => INVALID_REASON,
        Some(PARTIALLY_APPLIED) => AGGREGATION_REFUSED_REASON,
        _ => return None,
    };
    (!same).then(|| (reason, now.message.clone().unwrap_or_default()))
}

/// What the routes task hands the status task after each pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub verdicts: BTreeMap<String, Verdict>,
    /// Advertisement name → this node's conflict message.
    pub conflicts: BTreeMap<String, String>,
    /// Advertisement name → this node's refused aggregation.
    pub refused: BTreeMap<String, CrdError>,
}

fn now() -> Time {
    let seconds = Timestamp::now().as_second();
    Time(Timestamp::from_second(seconds).unwrap_or_else(|_| Timestamp::now()))
}

/// Writes each advertisement's status when it differs from what this speaker computed (see the
/// module's docs), and the Warning event with the write that turns `Accepted` False.
pub async fn status_task(
    kube: kube::Client,
    node: String,
    objects: Watched<BgpAdvertisement>,
    mut reports: watch::Receiver<Arc<Report>>,
) {
    let api: Api<BgpAdvertisement> = Api::all(kube.clone());
    let recorder = Recorder::new(
        kube,
        Reporter {
            controller: "kube-ovn-speaker".into(),
            instance: Some(node.clone()),
        },
    );
    let mut object_changes = objects.changes();
    let mut failures = 0u32;
    loop {
        let report = reports.borrow_and_update().clone();
        let mut failed = false;
        for object in objects.all() {
            let Some(name) = object.metadata.name.as_deref() else {
                continue;
            };
            // Only a verdict on the generation stored now (the cache may be newer than the pass).
            let Some(verdict) = report
                .verdicts
                .get(name)
                .filter(|v| v.generation == object.metadata.generation)
            else {
                continue;
            };
            let findings = Findings {
                conflict: report.conflicts.get(name).map(String::as_str),
                refused: report.refused.get(name),
            };
            let Some(status) = desired_status(object.status.as_ref(), verdict, findings, &node, &now())
            else {
                continue;
            };
            let patch = serde_json::json!({
                "metadata": { "resourceVersion": object.metadata.resource_version },
                "status": status,
            });
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    if let Some((reason, message)) = event_for(object.status.as_ref(), &status) {
                        warn(&recorder, &object, reason, message).await;
                    }
                }
                // Another speaker wrote first, or the object is gone: the watch brings it.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(bgp_advertisement = %name, error = %e, "status not written; will retry");
                    failed = true;
                }
            }
        }
        let retry = if failed {
            failures += 1;
            Some(Duration::from_secs(1 << failures.min(5)))
        } else {
            failures = 0;
            None
        };
        tokio::select! {
            changed = reports.changed() => if changed.is_err() {
                return;
            },
            _ = object_changes.changed() => {}
            () = async {
                match retry {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

async fn warn(recorder: &Recorder, object: &BgpAdvertisement, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &object.object_ref(&())).await {
        tracing::debug!(bgp_advertisement = ?object.metadata.name, error = %e, "cannot publish event");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(name: &str, generation: i64, spec: &serde_json::Value) -> Arc<BgpAdvertisement> {
        let mut o: BgpAdvertisement = serde_json::from_value(json!({
            "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpAdvertisement",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap();
        o.metadata.generation = Some(generation);
        Arc::new(o)
    }

    #[test]
    fn an_invalid_generation_keeps_the_last_accepted_spec_and_names_the_field() {
        let mut kept = Kept::default();
        let good = object("a", 1, &json!({"advertise": ["PodIPs"], "localPref": 200}));
        let pass = kept.update(std::slice::from_ref(&good));
        assert_eq!(pass.in_effect.len(), 1);
        assert_eq!(pass.in_effect[0].local_pref, Some(200));
        assert!(pass.verdicts["a"].error.is_none());

        let bad = object(
            "a",
            2,
            &json!({"advertise": ["PodIPs"], "localPref": 300, "communities": ["65000:1", "70000:1"]}),
        );
        let pass = kept.update(std::slice::from_ref(&bad));
        assert_eq!(
            pass.in_effect[0].local_pref,
            Some(200),
            "the last accepted spec stays"
        );
        let error = pass.verdicts["a"].error.clone().unwrap();
        assert_eq!(error.field, "spec.communities[1]");
        assert_eq!(pass.newly_invalid.len(), 1);
        assert!(
            kept.update(std::slice::from_ref(&bad)).newly_invalid.is_empty(),
            "logged once per generation"
        );

        // A speaker that starts with the invalid one has nothing of it in effect.
        let pass = Kept::default().update(std::slice::from_ref(&bad));
        assert!(pass.in_effect.is_empty());
        // A deleted advertisement is forgotten.
        assert!(kept.update(&[]).in_effect.is_empty());
    }

    #[test]
    fn the_status_is_written_only_when_it_differs_and_conflict_has_one_owner() {
        let t = Time(Timestamp::from_second(1_000).unwrap());
        let later = Time(Timestamp::from_second(2_000).unwrap());
        let ok = Verdict {
            generation: Some(1),
            error: None,
        };
        let first = desired_status(None, &ok, none(), "n1", &t).unwrap();
        assert_eq!(first.observed_generation, Some(1));
        let accepted = find_condition(&first.conditions, ACCEPTED).unwrap();
        assert_eq!(accepted.status, ConditionStatus::True);
        // Every other speaker computes the same: nothing to write.
        assert_eq!(desired_status(Some(&first), &ok, none(), "n2", &later), None);

        // n1 sees a conflict: it owns the condition; n2, without one, leaves it alone.
        let conflicted = desired_status(
            Some(&first),
            &ok,
            conflict("10.0.0.0/24 to 1.1.1.1: b wins"),
            "n1",
            &t,
        )
        .unwrap();
        let c = find_condition(&conflicted.conditions, CONFLICT).unwrap();
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(
            c.message.as_deref(),
            Some("on node n1: 10.0.0.0/24 to 1.1.1.1: b wins")
        );
        assert_eq!(desired_status(Some(&conflicted), &ok, none(), "n2", &later), None);
        assert_eq!(
            desired_status(Some(&conflicted), &ok, conflict("other"), "n2", &later),
            None
        );
        // Its owner clears it.
        let cleared = desired_status(Some(&conflicted), &ok, none(), "n1", &later).unwrap();
        assert_eq!(
            find_condition(&cleared.conditions, CONFLICT).unwrap().status,
            ConditionStatus::False
        );

        // An invalid generation: Accepted False naming the field, with the new generation.
        let bad = Verdict {
            generation: Some(2),
            error: Some(CrdError::new(
                "spec.communities[1]",
                "\"70000:1\" is not a community",
            )),
        };
        let refused = desired_status(Some(&cleared), &bad, none(), "n1", &later).unwrap();
        let accepted = find_condition(&refused.conditions, ACCEPTED).unwrap();
        assert_eq!(accepted.status, ConditionStatus::False);
        assert!(
            accepted
                .message
                .as_deref()
                .unwrap()
                .starts_with("spec.communities[1]: ")
        );
        assert_eq!(accepted.observed_generation, Some(2));
        assert_eq!(refused.observed_generation, Some(2));
        assert_eq!(desired_status(Some(&refused), &bad, none(), "n2", &later), None);
        let (reason, message) = event_for(Some(&cleared), &refused).unwrap();
        assert_eq!(reason, INVALID_REASON);
        assert!(message.starts_with("spec.communities[1]: "), "{message}");
        assert_eq!(event_for(Some(&refused), &refused), None, "once per generation");
    }

    #[test]
    fn a_refused_aggregation_is_accepted_partially_by_one_owner() {
        let t = Time(Timestamp::from_second(1_000).unwrap());
        let ok = Verdict {
            generation: Some(3),
            error: None,
        };
        let error = CrdError::new(
            "spec.aggregationLengthV4",
            "10.16.0.0/14 leaves subnet s1 (10.16.0.0/16)",
        );
        let partial = Findings {
            conflict: None,
            refused: Some(&error),
        };
        let first = desired_status(None, &ok, none(), "n1", &t).unwrap();
        let n1 = desired_status(Some(&first), &ok, partial, "n1", &t).unwrap();
        let accepted = find_condition(&n1.conditions, ACCEPTED).unwrap();
        assert_eq!(
            (accepted.status, accepted.reason.as_deref()),
            (ConditionStatus::True, Some(PARTIALLY_APPLIED))
        );
        assert!(
            accepted
                .message
                .as_deref()
                .unwrap()
                .starts_with("on node n1: spec.aggregationLengthV4: "),
            "{accepted:?}"
        );
        assert_eq!(
            event_for(Some(&first), &n1).map(|e| e.0),
            Some(AGGREGATION_REFUSED_REASON)
        );
        // n2 (nothing refused there) leaves n1's finding alone; n1 clears it when it is gone.
        assert_eq!(desired_status(Some(&n1), &ok, none(), "n2", &t), None);
        let back = desired_status(Some(&n1), &ok, none(), "n1", &t).unwrap();
        assert_eq!(
            find_condition(&back.conditions, ACCEPTED)
                .unwrap()
                .reason
                .as_deref(),
            Some("Accepted")
        );
        assert_eq!(event_for(Some(&n1), &back), None);
    }

    fn none() -> Findings<'static> {
        Findings::default()
    }

    fn conflict(message: &str) -> Findings<'_> {
        Findings {
            conflict: Some(message),
            refused: None,
        }
    }
}
