use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::ovs::mirror::MirrorRow;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn owner<'a>(
    port: &'a str,
    pod: &str,
    provider: &'a str,
    a: Option<&'a BTreeMap<String, String>>,
) -> PortOwner<'a> {
    PortOwner {
        port,
        pod: pod.to_owned(),
        provider,
        annotations: a,
    }
}

fn ports(list: &[&str]) -> Selection {
    Selection::Ports(list.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn the_annotation_is_true_false_or_refused_by_key() {
    assert_eq!(pod_wants_mirror(None, "ovn"), Ok(false));
    assert_eq!(pod_wants_mirror(Some(&ann(&[])), "ovn"), Ok(false));
    let on = ann(&[("ovn.kubernetes.io/mirror", "true")]);
    assert_eq!(pod_wants_mirror(Some(&on), "ovn"), Ok(true));
    assert_eq!(
        pod_wants_mirror(Some(&ann(&[("ovn.kubernetes.io/mirror", "false")])), "ovn"),
        Ok(false)
    );
    // An attachment's port reads its own provider's key, not the primary one.
    assert_eq!(pod_wants_mirror(Some(&on), "net1.ns1.ovn"), Ok(false));
    let attachment = ann(&[("net1.ns1.ovn.kubernetes.io/mirror", "true")]);
    assert_eq!(pod_wants_mirror(Some(&attachment), "net1.ns1.ovn"), Ok(true));
    // Kube-OVN mirrors only on the exact "true"; anything else is said, not guessed.
    let err = pod_wants_mirror(Some(&ann(&[("ovn.kubernetes.io/mirror", "yes")])), "ovn").unwrap_err();
    assert!(
        err.contains("ovn.kubernetes.io/mirror") && err.contains("\"yes\""),
        "{err}"
    );
    assert!(pod_wants_mirror(Some(&ann(&[("ovn.kubernetes.io/mirror", "True")])), "ovn").is_err());
}

#[test]
fn global_mirrors_everything_else_only_annotated_pods_of_the_cache() {
    let on = ann(&[("ovn.kubernetes.io/mirror", "true")]);
    let off = ann(&[]);
    let bad = ann(&[("ovn.kubernetes.io/mirror", "1")]);
    let owners = [
        owner("a_h", "ns/a", "ovn", Some(&on)),
        owner("b_h", "ns/b", "ovn", Some(&off)),
        owner("c_h", "ns/c", "ovn", Some(&bad)),
        // Annotated, but its pod left the cache: DEL is coming.
        owner("d_h", "ns/d", "ovn", None),
    ];
    let (want, refused) = desired(false, &owners);
    assert_eq!(want, Some(ports(&["a_h"])));
    assert_eq!(refused.keys().collect::<Vec<_>>(), ["ns/c"]);
    assert!(refused["ns/c"].contains("\"1\""));

    let (want, refused) = desired(true, &owners);
    assert_eq!(want, Some(Selection::All));
    assert!(refused.is_empty(), "annotations do not matter to a global mirror");

    let (want, _) = desired(false, &owners[1..]);
    assert_eq!(want, None, "no annotated pod: no mirror, no port");
    assert_eq!(desired(false, &[]).0, None);
}

#[test]
fn steps_converge_from_whatever_is_there() {
    let none = MirrorState::default();
    assert_eq!(step(None, &none, "mirror0"), Step::Keep);
    assert_eq!(
        step(Some(&Selection::All), &none, "mirror0"),
        Step::Apply(Selection::All)
    );

    let global = MirrorState {
        port: true,
        mirror: Some(MirrorRow {
            select_all: true,
            src: BTreeSet::new(),
            dst: BTreeSet::new(),
            output: Some("mirror0".into()),
        }),
    };
    assert_eq!(step(Some(&Selection::All), &global, "mirror0"), Step::Keep);
    // A daemon restarted with --enable-mirror=false: the global mirror goes, or narrows.
    assert_eq!(step(None, &global, "mirror0"), Step::Remove);
    assert_eq!(
        step(Some(&ports(&["a_h"])), &global, "mirror0"),
        Step::Apply(ports(&["a_h"]))
    );
    // The port deleted by hand (the mirror's output is gone with it): made again.
    let no_port = MirrorState {
        port: false,
        ..global.clone()
    };
    assert_eq!(
        step(Some(&Selection::All), &no_port, "mirror0"),
        Step::Apply(Selection::All)
    );
    // Only the port left (a mirror removed by hand, nothing annotated): removed.
    let port_only = MirrorState {
        port: true,
        mirror: None,
    };
    assert_eq!(step(None, &port_only, "mirror0"), Step::Remove);
}
