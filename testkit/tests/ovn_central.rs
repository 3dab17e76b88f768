//! The OVN central fixture and the ovn-trace oracle, on a topology built with ovn-nbctl.

use kube_ovn_testkit::OvnCentral;

#[test]
fn traces_delivery_and_acl_drop() {
    let ovn = OvnCentral::start().unwrap();
    for args in [
        vec!["ls-add", "ls1"],
        vec!["lsp-add", "ls1", "p1"],
        vec!["lsp-set-addresses", "p1", "0a:00:00:00:00:01 10.0.0.1"],
        vec!["lsp-add", "ls1", "p2"],
        vec!["lsp-set-addresses", "p2", "0a:00:00:00:00:02 10.0.0.2"],
    ] {
        ovn.nbctl(&args).unwrap();
    }
    let flow = "inport==\"p1\" && eth.src==0a:00:00:00:00:01 && eth.dst==0a:00:00:00:00:02 && \
                ip4.src==10.0.0.1 && ip4.dst==10.0.0.2 && ip.ttl==64 && icmp4.type==8";
    let t = ovn.trace("ls1", flow).unwrap();
    assert!(t.delivers_to("p2"), "{}", t.text);
    ovn.nbctl(&[
        "acl-add",
        "ls1",
        "to-lport",
        "1000",
        "outport==\"p2\" && ip4.src==10.0.0.1",
        "drop",
    ])
    .unwrap();
    let t = ovn.trace("ls1", flow).unwrap();
    assert!(!t.delivers_to("p2"), "{}", t.text);
    // ovn-trace exits 0 for an unknown port; the oracle must still refuse it.
    let err = ovn.trace("ls1", "inport==\"nope\" && ip.ttl==64").unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}
