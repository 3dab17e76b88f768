//! Conversions of the core/v1 messages the emulator decodes (Pod and everything a PodSpec holds,
//! Namespace, Service, ConfigMap, Secret, ServiceAccount); see `convert` for the rules.

use k8s_openapi::api::core::v1 as oa;
use k8s_pb::api::core::v1 as pb;

use super::convert::convert;

convert! {
    pb::Affinity => oa::Affinity {
        node_affinity, pod_affinity, pod_anti_affinity
    }
    pb::AppArmorProfile => oa::AppArmorProfile {
        localhost_profile
        ; rename { r#type => type_ }
    }
    pb::AwsElasticBlockStoreVolumeSource => oa::AWSElasticBlockStoreVolumeSource {
        volume_id, fs_type, partition, read_only
    }
    pb::AzureDiskVolumeSource => oa::AzureDiskVolumeSource {
        disk_name, disk_uri, caching_mode, fs_type, read_only, kind
    }
    pb::AzureFileVolumeSource => oa::AzureFileVolumeSource {
        secret_name, share_name, read_only
    }
    pb::CSIVolumeSource => oa::CSIVolumeSource {
        driver, read_only, fs_type, volume_attributes, node_publish_secret_ref
    }
    pb::Capabilities => oa::Capabilities {
        add, drop
    }
    pb::CephFsVolumeSource => oa::CephFSVolumeSource {
        monitors, path, user, secret_file, secret_ref, read_only
    }
    pb::CinderVolumeSource => oa::CinderVolumeSource {
        volume_id, fs_type, read_only, secret_ref
    }
    pb::ClientIpConfig => oa::ClientIPConfig {
        timeout_seconds
    }
    pb::ClusterTrustBundleProjection => oa::ClusterTrustBundleProjection {
        name, signer_name, label_selector, optional, path
    }
    pb::ConfigMap => oa::ConfigMap {
        metadata, immutable, data, binary_data
    }
    pb::ConfigMapEnvSource => oa::ConfigMapEnvSource {
        optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::ConfigMapKeySelector => oa::ConfigMapKeySelector {
        key, optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::ConfigMapProjection => oa::ConfigMapProjection {
        items, optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::ConfigMapVolumeSource => oa::ConfigMapVolumeSource {
        items, default_mode, optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::Container => oa::Container {
        name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy,
        restart_policy, volume_mounts, volume_devices, liveness_probe, readiness_probe,
        startup_probe, lifecycle, termination_message_path, termination_message_policy,
        image_pull_policy, security_context
        ; omit_zero { stdin, stdin_once, tty }
        ; newer { restart_policy_rules }
    }
    pb::ContainerPort => oa::ContainerPort {
        name, container_port, protocol, host_ip
        ; omit_zero { host_port }
    }
    pb::ContainerResizePolicy => oa::ContainerResizePolicy {
        resource_name, restart_policy
    }
    pb::ContainerState => oa::ContainerState {
        waiting, running, terminated
    }
    pb::ContainerStateRunning => oa::ContainerStateRunning {
        started_at
    }
    pb::ContainerStateTerminated => oa::ContainerStateTerminated {
        exit_code, reason, message, started_at, finished_at, container_id
        ; omit_zero { signal }
    }
    pb::ContainerStateWaiting => oa::ContainerStateWaiting {
        reason, message
    }
    pb::ContainerStatus => oa::ContainerStatus {
        name, state, last_state, ready, restart_count, image, image_id, container_id, started,
        allocated_resources, resources, volume_mounts, user, allocated_resources_status, stop_signal
    }
    pb::ContainerUser => oa::ContainerUser {
        linux
    }
    pb::DownwardAPIProjection => oa::DownwardAPIProjection {
        items
    }
    pb::DownwardAPIVolumeFile => oa::DownwardAPIVolumeFile {
        path, field_ref, resource_field_ref, mode
    }
    pb::DownwardAPIVolumeSource => oa::DownwardAPIVolumeSource {
        items, default_mode
    }
    pb::EmptyDirVolumeSource => oa::EmptyDirVolumeSource {
        medium, size_limit
    }
    pb::EnvFromSource => oa::EnvFromSource {
        prefix, config_map_ref, secret_ref
    }
    pb::EnvVar => oa::EnvVar {
        name, value, value_from
    }
    pb::EnvVarSource => oa::EnvVarSource {
        field_ref, resource_field_ref, config_map_key_ref, secret_key_ref
        ; newer { file_key_ref }
    }
    pb::EphemeralContainer => oa::EphemeralContainer {
        target_container_name
        ; embed ephemeral_container_common: pb::EphemeralContainerCommon { name, image, command,
            args, working_dir, ports, env_from, env, resources, resize_policy, restart_policy,
            volume_mounts, volume_devices, liveness_probe, readiness_probe, startup_probe,
            lifecycle, termination_message_path, termination_message_policy, image_pull_policy,
            security_context } omit_zero { stdin, stdin_once, tty } newer { restart_policy_rules }
    }
    pb::EphemeralVolumeSource => oa::EphemeralVolumeSource {
        volume_claim_template
    }
    pb::ExecAction => oa::ExecAction {
        command
    }
    pb::FcVolumeSource => oa::FCVolumeSource {
        lun, fs_type, read_only, wwids
        ; rename { target_ww_ns => target_wwns }
    }
    pb::FlexVolumeSource => oa::FlexVolumeSource {
        driver, fs_type, secret_ref, read_only, options
    }
    pb::FlockerVolumeSource => oa::FlockerVolumeSource {
        dataset_name, dataset_uuid
    }
    pb::GcePersistentDiskVolumeSource => oa::GCEPersistentDiskVolumeSource {
        pd_name, fs_type, partition, read_only
    }
    pb::GitRepoVolumeSource => oa::GitRepoVolumeSource {
        repository, revision, directory
    }
    pb::GlusterfsVolumeSource => oa::GlusterfsVolumeSource {
        endpoints, path, read_only
    }
    pb::GrpcAction => oa::GRPCAction {
        port, service
    }
    pb::HostAlias => oa::HostAlias {
        ip, hostnames
    }
    pb::HostIp => oa::HostIP {
        ip
    }
    pb::HostPathVolumeSource => oa::HostPathVolumeSource {
        path
        ; rename { r#type => type_ }
    }
    pb::HttpGetAction => oa::HTTPGetAction {
        path, port, host, scheme, http_headers
    }
    pb::HttpHeader => oa::HTTPHeader {
        name, value
    }
    pb::ImageVolumeSource => oa::ImageVolumeSource {
        reference, pull_policy
    }
    pb::IscsiVolumeSource => oa::ISCSIVolumeSource {
        target_portal, iqn, lun, iscsi_interface, fs_type, read_only, portals, chap_auth_discovery,
        chap_auth_session, secret_ref, initiator_name
    }
    pb::KeyToPath => oa::KeyToPath {
        key, path, mode
    }
    pb::Lifecycle => oa::Lifecycle {
        post_start, pre_stop, stop_signal
    }
    pb::LifecycleHandler => oa::LifecycleHandler {
        exec, http_get, tcp_socket, sleep
    }
    pb::LinuxContainerUser => oa::LinuxContainerUser {
        uid, gid, supplemental_groups
    }
    pb::LoadBalancerIngress => oa::LoadBalancerIngress {
        ip, hostname, ip_mode, ports
    }
    pb::LoadBalancerStatus => oa::LoadBalancerStatus {
        ingress
    }
    pb::LocalObjectReference => oa::LocalObjectReference {
        name
    }
    pb::Namespace => oa::Namespace {
        metadata, spec, status
    }
    pb::NamespaceCondition => oa::NamespaceCondition {
        status, last_transition_time, reason, message
        ; rename { r#type => type_ }
    }
    pb::NamespaceSpec => oa::NamespaceSpec {
        finalizers
    }
    pb::NamespaceStatus => oa::NamespaceStatus {
        phase, conditions
    }
    pb::NfsVolumeSource => oa::NFSVolumeSource {
        server, path, read_only
    }
    pb::NodeAffinity => oa::NodeAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    pb::NodeSelector => oa::NodeSelector {
        node_selector_terms
    }
    pb::NodeSelectorRequirement => oa::NodeSelectorRequirement {
        key, operator, values
    }
    pb::NodeSelectorTerm => oa::NodeSelectorTerm {
        match_expressions, match_fields
    }
    pb::ObjectFieldSelector => oa::ObjectFieldSelector {
        api_version, field_path
    }
    pb::ObjectReference => oa::ObjectReference {
        kind, namespace, name, uid, api_version, resource_version, field_path
    }
    pb::PersistentVolumeClaimSpec => oa::PersistentVolumeClaimSpec {
        access_modes, selector, resources, volume_name, storage_class_name, volume_mode,
        data_source, data_source_ref, volume_attributes_class_name
    }
    pb::PersistentVolumeClaimTemplate => oa::PersistentVolumeClaimTemplate {
        metadata, spec
    }
    pb::PersistentVolumeClaimVolumeSource => oa::PersistentVolumeClaimVolumeSource {
        claim_name, read_only
    }
    pb::PhotonPersistentDiskVolumeSource => oa::PhotonPersistentDiskVolumeSource {
        pd_id, fs_type
    }
    pb::Pod => oa::Pod {
        metadata, spec, status
    }
    pb::PodAffinity => oa::PodAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    pb::PodAffinityTerm => oa::PodAffinityTerm {
        label_selector, namespaces, topology_key, namespace_selector, match_label_keys,
        mismatch_label_keys
    }
    pb::PodAntiAffinity => oa::PodAntiAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    pb::PodCondition => oa::PodCondition {
        status, last_probe_time, last_transition_time, reason, message
        ; rename { r#type => type_ }
        ; omit_zero { observed_generation }
    }
    pb::PodDnsConfig => oa::PodDNSConfig {
        nameservers, searches, options
    }
    pb::PodDnsConfigOption => oa::PodDNSConfigOption {
        name, value
    }
    pb::PodIp => oa::PodIP {
        ip
    }
    pb::PodOs => oa::PodOS {
        name
    }
    pb::PodReadinessGate => oa::PodReadinessGate {
        condition_type
    }
    pb::PodResourceClaim => oa::PodResourceClaim {
        name, resource_claim_name, resource_claim_template_name
    }
    pb::PodResourceClaimStatus => oa::PodResourceClaimStatus {
        name, resource_claim_name
    }
    pb::PodSchedulingGate => oa::PodSchedulingGate {
        name
    }
    pb::PodSecurityContext => oa::PodSecurityContext {
        se_linux_options, windows_options, run_as_user, run_as_group, run_as_non_root,
        supplemental_groups, supplemental_groups_policy, fs_group, sysctls, fs_group_change_policy,
        seccomp_profile, app_armor_profile, se_linux_change_policy
    }
    pb::PodSpec => oa::PodSpec {
        volumes, init_containers, containers, ephemeral_containers, restart_policy,
        termination_grace_period_seconds, active_deadline_seconds, dns_policy, node_selector,
        service_account_name, service_account, automount_service_account_token, node_name,
        share_process_namespace, security_context, image_pull_secrets, hostname, subdomain,
        affinity, scheduler_name, tolerations, host_aliases, priority_class_name, priority,
        dns_config, readiness_gates, runtime_class_name, enable_service_links, preemption_policy,
        overhead, topology_spread_constraints, set_hostname_as_fqdn, os, host_users,
        scheduling_gates, resource_claims, resources
        ; omit_zero { host_network, host_pid, host_ipc }
        ; newer { hostname_override, workload_ref }
    }
    pb::PodStatus => oa::PodStatus {
        phase, conditions, message, reason, nominated_node_name, host_ip, host_ips, pod_ip, pod_ips,
        start_time, init_container_statuses, container_statuses, qos_class,
        ephemeral_container_statuses, resize, resource_claim_statuses
        ; omit_zero { observed_generation }
        ; newer { extended_resource_claim_status, allocated_resources, resources }
    }
    pb::PodTemplateSpec => oa::PodTemplateSpec {
        metadata, spec
    }
    pb::PortStatus => oa::PortStatus {
        port, protocol, error
    }
    pb::PortworxVolumeSource => oa::PortworxVolumeSource {
        volume_id, fs_type, read_only
    }
    pb::PreferredSchedulingTerm => oa::PreferredSchedulingTerm {
        weight, preference
    }
    pb::Probe => oa::Probe {
        termination_grace_period_seconds
        ; omit_zero { initial_delay_seconds, timeout_seconds, period_seconds, success_threshold, failure_threshold }
        ; embed handler: pb::ProbeHandler { exec, http_get, tcp_socket, grpc }
    }
    pb::ProjectedVolumeSource => oa::ProjectedVolumeSource {
        sources, default_mode
    }
    pb::QuobyteVolumeSource => oa::QuobyteVolumeSource {
        registry, volume, read_only, user, group, tenant
    }
    pb::RbdVolumeSource => oa::RBDVolumeSource {
        monitors, image, fs_type, pool, user, keyring, secret_ref, read_only
    }
    pb::ResourceClaim => oa::ResourceClaim {
        name, request
    }
    pb::ResourceFieldSelector => oa::ResourceFieldSelector {
        container_name, resource, divisor
    }
    pb::ResourceHealth => oa::ResourceHealth {
        resource_id, health
    }
    pb::ResourceRequirements => oa::ResourceRequirements {
        limits, requests, claims
    }
    pb::ResourceStatus => oa::ResourceStatus {
        name, resources
    }
    pb::ScaleIoVolumeSource => oa::ScaleIOVolumeSource {
        gateway, system, secret_ref, ssl_enabled, protection_domain, storage_pool, storage_mode,
        volume_name, fs_type, read_only
    }
    pb::SeLinuxOptions => oa::SELinuxOptions {
        user, role, level
        ; rename { r#type => type_ }
    }
    pb::SeccompProfile => oa::SeccompProfile {
        localhost_profile
        ; rename { r#type => type_ }
    }
    pb::Secret => oa::Secret {
        metadata, immutable, data, string_data
        ; rename { r#type => type_ }
    }
    pb::SecretEnvSource => oa::SecretEnvSource {
        optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::SecretKeySelector => oa::SecretKeySelector {
        key, optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::SecretProjection => oa::SecretProjection {
        items, optional
        ; embed local_object_reference: pb::LocalObjectReference { name }
    }
    pb::SecretVolumeSource => oa::SecretVolumeSource {
        secret_name, items, default_mode, optional
    }
    pb::SecurityContext => oa::SecurityContext {
        capabilities, privileged, se_linux_options, windows_options, run_as_user, run_as_group,
        run_as_non_root, read_only_root_filesystem, allow_privilege_escalation, proc_mount,
        seccomp_profile, app_armor_profile
    }
    pb::Service => oa::Service {
        metadata, spec, status
    }
    pb::ServiceAccount => oa::ServiceAccount {
        metadata, secrets, image_pull_secrets, automount_service_account_token
    }
    pb::ServiceAccountTokenProjection => oa::ServiceAccountTokenProjection {
        audience, expiration_seconds, path
    }
    pb::ServicePort => oa::ServicePort {
        name, protocol, app_protocol, port, target_port
        ; omit_zero { node_port }
    }
    pb::ServiceSpec => oa::ServiceSpec {
        ports, selector, cluster_ip, cluster_ips, external_ips, session_affinity, load_balancer_ip,
        load_balancer_source_ranges, external_name, external_traffic_policy,
        session_affinity_config, ip_families, ip_family_policy, allocate_load_balancer_node_ports,
        load_balancer_class, internal_traffic_policy, traffic_distribution
        ; rename { r#type => type_ }
        ; omit_zero { health_check_node_port, publish_not_ready_addresses }
    }
    pb::ServiceStatus => oa::ServiceStatus {
        load_balancer, conditions
    }
    pb::SessionAffinityConfig => oa::SessionAffinityConfig {
        client_ip
    }
    pb::SleepAction => oa::SleepAction {
        seconds
    }
    pb::StorageOsVolumeSource => oa::StorageOSVolumeSource {
        volume_name, volume_namespace, fs_type, read_only, secret_ref
    }
    pb::Sysctl => oa::Sysctl {
        name, value
    }
    pb::TcpSocketAction => oa::TCPSocketAction {
        port, host
    }
    pb::Toleration => oa::Toleration {
        key, operator, value, effect, toleration_seconds
    }
    pb::TopologySpreadConstraint => oa::TopologySpreadConstraint {
        max_skew, topology_key, when_unsatisfiable, label_selector, min_domains,
        node_affinity_policy, node_taints_policy, match_label_keys
    }
    pb::TypedLocalObjectReference => oa::TypedLocalObjectReference {
        api_group, kind, name
    }
    pb::TypedObjectReference => oa::TypedObjectReference {
        api_group, kind, name, namespace
    }
    pb::Volume => oa::Volume {
        name
        ; embed volume_source: pb::VolumeSource { host_path, empty_dir, gce_persistent_disk,
            aws_elastic_block_store, git_repo, secret, nfs, iscsi, glusterfs,
            persistent_volume_claim, rbd, flex_volume, cinder, cephfs, flocker, downward_api, fc,
            azure_file, config_map, vsphere_volume, quobyte, azure_disk, photon_persistent_disk,
            projected, portworx_volume, scale_io, storageos, csi, ephemeral, image }
    }
    pb::VolumeDevice => oa::VolumeDevice {
        name, device_path
    }
    pb::VolumeMount => oa::VolumeMount {
        name, recursive_read_only, mount_path, sub_path, mount_propagation, sub_path_expr
        ; omit_zero { read_only }
    }
    pb::VolumeMountStatus => oa::VolumeMountStatus {
        name, mount_path, read_only, recursive_read_only
    }
    pb::VolumeProjection => oa::VolumeProjection {
        secret, downward_api, config_map, service_account_token, cluster_trust_bundle
        ; newer { pod_certificate }
    }
    pb::VolumeResourceRequirements => oa::VolumeResourceRequirements {
        limits, requests
    }
    pb::VsphereVirtualDiskVolumeSource => oa::VsphereVirtualDiskVolumeSource {
        volume_path, fs_type, storage_policy_name, storage_policy_id
    }
    pb::WeightedPodAffinityTerm => oa::WeightedPodAffinityTerm {
        weight, pod_affinity_term
    }
    pb::WindowsSecurityContextOptions => oa::WindowsSecurityContextOptions {
        gmsa_credential_spec_name, gmsa_credential_spec, run_as_user_name, host_process
    }
}
