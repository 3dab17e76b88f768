//! The controller's errors; every one names the object or flag it is about.

use kube_ovn_api::annotations::AnnotationError;

use crate::ipam::IpamError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed: `doing` names the call and the object.
    #[error("{doing}: Kubernetes API: {source}")]
    Kube { doing: String, source: kube::Error },
    /// A northbound transaction failed: `doing` names the change and its object.
    #[error("{doing}: OVN northbound: {source}")]
    Ovn {
        doing: String,
        /// Boxed: an OVSDB error is large, and every `Result` of the controller carries this type.
        source: Box<kube_ovn_ovsdb::Error>,
    },
    #[error(transparent)]
    Ipam(#[from] IpamError),
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    #[error(transparent)]
    Flag(#[from] crate::config::FlagError),
    /// Input that will not work until someone changes it (a bad spec): reported, not retried fast.
    #[error("{0}")]
    Invalid(String),
    /// Something another reconciler or the cluster has not done yet: retried soon.
    #[error("waiting: {0}")]
    NotReady(String),
    #[error("leader election: {0}")]
    Lease(String),
    #[error("metrics and health endpoint {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Names what a failed call was doing and to which object, for the errors that carry no such
/// context themselves (a Kubernetes API error names neither; an OVSDB one names a table and row,
/// not the object they are for). Rows the controller cannot decode are skipped where they are read. `doing` is written only when there is an error.
pub trait Doing<T> {
    /// e.g. `.doing(format_args!("patch the annotations of pod {ns}/{name}"))`.
    fn doing(self, doing: impl std::fmt::Display) -> Result<T>;
}

impl<T> Doing<T> for Result<T, kube::Error> {
    fn doing(self, doing: impl std::fmt::Display) -> Result<T> {
        self.map_err(|source| Error::Kube {
            doing: doing.to_string(),
            source,
        })
    }
}

impl<T> Doing<T> for Result<T, kube_ovn_ovsdb::Error> {
    fn doing(self, doing: impl std::fmt::Display) -> Result<T> {
        self.map_err(|source| Error::Ovn {
            doing: doing.to_string(),
            source: Box::new(source),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_object_and_what_was_being_done() {
        let api = kube::Error::Api(
            kube::core::Status::failure("pods \"p\" is forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        );
        let e = Err::<(), _>(api)
            .doing(format_args!("patch the annotations of pod {}/{}", "ns", "p"))
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("patch the annotations of pod ns/p: Kubernetes API: ")
                && text.contains("forbidden"),
            "{text}"
        );
        let ovn = Err::<(), _>(kube_ovn_ovsdb::Error::Closed)
            .doing("write the port of pod ns/p")
            .unwrap_err();
        assert!(
            ovn.to_string()
                .starts_with("write the port of pod ns/p: OVN northbound: "),
            "{ovn}"
        );
    }
}
