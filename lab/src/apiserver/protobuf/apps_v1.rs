//! Conversions of apps/v1 Deployment and autoscaling/v1 Scale (what `kubectl scale` reads and
//! writes through a Deployment's `/scale`).

use k8s_openapi::api::apps::v1 as oa;
use k8s_openapi::api::autoscaling::v1 as oa_autoscaling;
use k8s_pb::api::apps::v1 as pb;
use k8s_pb::api::autoscaling::v1 as pb_autoscaling;

use super::convert::convert;

convert! {
    pb::Deployment => oa::Deployment {
        metadata, spec, status
    }
    pb::DeploymentCondition => oa::DeploymentCondition {
        status, last_update_time, last_transition_time, reason, message
        ; rename { r#type => type_ }
    }
    pb::DeploymentSpec => oa::DeploymentSpec {
        replicas, selector, template, strategy, revision_history_limit, progress_deadline_seconds
        ; omit_zero { min_ready_seconds, paused }
    }
    pb::DeploymentStatus => oa::DeploymentStatus {
        terminating_replicas, conditions, collision_count
        ; omit_zero { observed_generation, replicas, updated_replicas, ready_replicas, available_replicas, unavailable_replicas }
    }
    pb::DeploymentStrategy => oa::DeploymentStrategy {
        rolling_update
        ; rename { r#type => type_ }
    }
    pb::RollingUpdateDeployment => oa::RollingUpdateDeployment {
        max_unavailable, max_surge
    }
    pb_autoscaling::Scale => oa_autoscaling::Scale {
        metadata, spec, status
    }
    pb_autoscaling::ScaleSpec => oa_autoscaling::ScaleSpec {
        replicas
    }
    pb_autoscaling::ScaleStatus => oa_autoscaling::ScaleStatus {
        replicas, selector
    }
}
