//! The traced source as OVN has it. Kube-OVN's plugin traces with what the pod's annotations
//! say; but a pod's annotations can be edited by whoever may edit the pod (its tenant), and a
//! trace from an address or switch the pod does not really have shows a path no packet of the
//! pod takes. The logical switch port `<pod>.<namespace>` in the northbound database is written
//! by the controller alone and is what OVN forwards by, so its switch, MAC and addresses win;
//! where an annotation disagrees, the trace says so. Pure.

use std::net::IpAddr;

use super::Endpoint;
use super::request::is_mac;

/// A logical switch port as the northbound database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPort {
    /// The logical switch that holds the port.
    pub switch: String,
    /// The port's `addresses` entries (`"MAC IP…"`, `router`, `unknown`, `dynamic`).
    pub addresses: Vec<String>,
}

/// `ep` corrected by `port` (the northbound database's record of `ep.port`), with one line per
/// annotation that disagreed. `dst` picks the source address's family.
pub fn corrected(
    mut ep: Endpoint,
    port: &RecordedPort,
    dst: IpAddr,
) -> anyhow::Result<(Endpoint, Vec<String>)> {
    let mut notes = Vec::new();
    let mut note = |annotation: &str, said: &str, recorded: &str| {
        notes.push(format!(
            "{}: annotation {annotation} says {said:?}, OVN's port {} has {recorded:?}: tracing with OVN's \
             (annotations can be edited by whoever may edit the object)",
            ep.what, ep.port
        ));
    };
    if port.switch != ep.switch {
        note(super::keys::LOGICAL_SWITCH, &ep.switch, &port.switch);
        ep.switch.clone_from(&port.switch);
    }
    let entry = port
        .addresses
        .iter()
        .map(|a| a.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.first().is_some_and(|m| is_mac(m)));
    let Some(words) = entry else {
        anyhow::bail!(
            "{}: OVN's port {} has no static MAC and address ({:?}): the controller has not set it up (yet)",
            ep.what,
            ep.port,
            port.addresses
        );
    };
    let mac = words[0].to_ascii_lowercase();
    if !mac.eq_ignore_ascii_case(&ep.mac) {
        note(super::keys::MAC_ADDRESS, &ep.mac, &mac);
        ep.mac = mac;
    }
    let ips: Vec<IpAddr> = words[1..].iter().filter_map(|w| w.parse().ok()).collect();
    match ips.iter().find(|ip| ip.is_ipv4() == dst.is_ipv4()) {
        Some(ip) if *ip != ep.src => {
            note(super::keys::IP_ADDRESS, &ep.src.to_string(), &ip.to_string());
            ep.src = *ip;
        }
        Some(_) => {}
        None => anyhow::bail!(
            "{}: OVN's port {} has no IPv{} address ({:?}) to reach {dst}",
            ep.what,
            ep.port,
            if dst.is_ipv4() { 4 } else { 6 },
            port.addresses
        ),
    }
    Ok((ep, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated() -> Endpoint {
        Endpoint {
            what: "pod demo/a".into(),
            node: "node1".into(),
            port: "a.demo".into(),
            switch: "ovn-default".into(),
            src: "10.16.0.10".parse().unwrap(),
            mac: "00:00:00:00:00:0a".into(),
            cidr: "10.16.0.0/16".into(),
            router: None,
        }
    }

    fn recorded(switch: &str, addresses: &str) -> RecordedPort {
        RecordedPort {
            switch: switch.into(),
            addresses: vec![addresses.into()],
        }
    }

    #[test]
    fn agreeing_annotations_trace_unchanged() {
        let port = recorded("ovn-default", "00:00:00:00:00:0A 10.16.0.10 fd00:10:16::a");
        let (ep, notes) = corrected(annotated(), &port, "10.17.0.5".parse().unwrap()).unwrap();
        assert_eq!(ep, annotated());
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn an_edited_annotation_loses_to_ovns_record_and_is_named() {
        // The tenant pointed the pod's annotations at another tenant's switch and address.
        let mut ep = annotated();
        ep.switch = "tenant-b".into();
        ep.src = "10.99.0.7".parse().unwrap();
        let port = recorded("ovn-default", "00:00:00:00:00:0a 10.16.0.10");
        let (ep, notes) = corrected(ep, &port, "10.17.0.5".parse().unwrap()).unwrap();
        assert_eq!(
            (ep.switch.as_str(), ep.src),
            ("ovn-default", "10.16.0.10".parse().unwrap())
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("ovn.kubernetes.io/logical_switch says \"tenant-b\""),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("ovn.kubernetes.io/ip_address says \"10.99.0.7\""),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("OVN's port a.demo has \"10.16.0.10\""),
            "{notes:?}"
        );
    }

    #[test]
    fn a_port_without_addresses_of_the_family_is_an_error() {
        let port = recorded("ovn-default", "00:00:00:00:00:0a 10.16.0.10");
        let e = corrected(annotated(), &port, "fd00::1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("has no IPv6 address"), "{e}");
        let port = recorded("ovn-default", "dynamic");
        let e = corrected(annotated(), &port, "10.17.0.5".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("has no static MAC and address"), "{e}");
    }
}
