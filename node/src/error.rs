//! Why a daemon request failed, with the pod, the object and the field in the message; and
//! which HTTP status the shim gets (400: the request or the pod's annotations are wrong and a
//! retry will not help; 500: try again).

/// Errors of the node daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The request is unusable as sent.
    #[error("{0}")]
    BadRequest(String),
    /// The controller's annotation on the pod is malformed.
    #[error("pod {pod}: {source}")]
    Annotation {
        /// `namespace/name`.
        pod: String,
        /// Key, value and what was expected.
        source: kube_ovn_api::annotations::AnnotationError,
    },
    /// A bounded wait ran out.
    #[error("pod {pod}: {what}")]
    Timeout {
        /// `namespace/name`.
        pod: String,
        /// What never happened, and where to look.
        what: String,
    },
    /// The pod's network cannot be made now; a retry may succeed (a node label or a subnet
    /// status written by others, the gateway not answering).
    #[error("pod {pod}: {what}")]
    NotReady {
        /// `namespace/name`.
        pod: String,
        /// What is missing or wrong, naming the object and field.
        what: String,
    },
    /// The pod went away while ADD waited for it.
    #[error("pod {0} was deleted while its network was being set up")]
    PodGone(String),
    /// The local Open_vSwitch database refused or failed.
    #[error("{op}: {source}")]
    Ovsdb {
        /// What we asked, with the object.
        op: String,
        /// The client's error.
        source: Box<kube_ovn_ovsdb::Error>,
    },
    /// ovs-vswitchd could not use an interface.
    #[error("OVS interface {iface}: {error}")]
    Interface {
        /// Interface name.
        iface: String,
        /// `Interface.error`, or why it has no OpenFlow port.
        error: String,
    },
    /// A kernel operation failed.
    #[error(transparent)]
    Dataplane(#[from] kube_ovn_dataplane::Error),
    /// The Kubernetes API failed.
    #[error("{op}: {source}")]
    Kube {
        /// What we asked.
        op: String,
        /// kube's error.
        source: Box<kube::Error>,
    },
    /// The egress NAT tables are not what was applied (read back from the kernel).
    #[error("{0}")]
    Gateway(String),
    /// A provider network could not be set up or given back on this node; the message names
    /// the provider network, the NIC and the step.
    #[error("{0}")]
    ProviderNetwork(String),
    /// CHECK found the NIC differs from what it should be.
    #[error("pod {pod}: {problem}")]
    CheckFailed {
        /// `namespace/name`.
        pod: String,
        /// The first difference found.
        problem: String,
    },
}

impl DaemonError {
    /// The HTTP status for the shim.
    pub fn status(&self) -> u16 {
        match self {
            Self::BadRequest(_) | Self::Annotation { .. } | Self::CheckFailed { .. } => 400,
            _ => 500,
        }
    }

    pub(crate) fn ovsdb(op: impl Into<String>) -> impl FnOnce(kube_ovn_ovsdb::Error) -> Self {
        let op = op.into();
        move |source| Self::Ovsdb {
            op,
            source: Box::new(source),
        }
    }
}
