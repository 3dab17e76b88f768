//! Conversions of the apimachinery meta/v1 messages (ObjectMeta, DeleteOptions, label selectors);
//! the scalar-like ones (Time, Quantity, IntOrString, FieldsV1) are in `convert`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as oa;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb;

use super::convert::convert;

convert! {
    pb::Condition => oa::Condition {
        status, observed_generation, last_transition_time, reason, message
        ; rename { r#type => type_ }
    }
    pb::DeleteOptions => oa::DeleteOptions {
        grace_period_seconds, preconditions, orphan_dependents, propagation_policy, dry_run,
        ignore_store_read_error_with_cluster_breaking_potential
        ; absent { api_version, kind }
    }
    pb::LabelSelector => oa::LabelSelector {
        match_labels, match_expressions
    }
    pb::LabelSelectorRequirement => oa::LabelSelectorRequirement {
        key, operator, values
    }
    pb::ManagedFieldsEntry => oa::ManagedFieldsEntry {
        manager, operation, api_version, time, fields_type, fields_v1, subresource
    }
    pb::ObjectMeta => oa::ObjectMeta {
        name, generate_name, namespace, self_link, uid, resource_version, creation_timestamp,
        deletion_timestamp, deletion_grace_period_seconds, labels, annotations, owner_references,
        finalizers, managed_fields
        ; omit_zero { generation }
    }
    pb::OwnerReference => oa::OwnerReference {
        api_version, kind, name, uid, controller, block_owner_deletion
    }
    pb::Preconditions => oa::Preconditions {
        uid, resource_version
    }
}
