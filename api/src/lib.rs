//! kubeovn.io/v1 API types.
