//! A pod's rate limits from its annotations (no I/O), as Kube-OVN maps them onto OVS: the pod's
//! `egress_rate` (and `egress_burst`) become the interface's ingress policing, its
//! `ingress_rate` (and `ingress_burst`) an htb QoS with one queue — directions turned around,
//! since what the pod sends is what OVS receives.
//!
//! The annotations are read with the `api` crate's [`Bandwidth`], the same reader the
//! controller validates a pod with before allocating: whole Mbit/s and Mbit, so a value the
//! controller refuses (`2.5`) is never applied here either, and the largest accepted value
//! converts to OVS's units without overflow.

use std::collections::BTreeMap;

use kube_ovn_api::annotations::{
    AnnotationError, Bandwidth, Mbit, Mbps, Problem, htb_burst_bits, htb_max_rate_bps, policing_burst_kbit,
    policing_rate_kbit,
};

/// OVS rate limits for one interface, already turned around to the switch's point of view:
/// what the pod sends is what OVS receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QosPlan {
    /// `Interface.ingress_policing_rate`, kbit/s, from the pod's `egress_rate` (Mbit/s); 0 = off.
    pub policing_rate_kbps: i64,
    /// `Interface.ingress_policing_burst`, kbit, from `egress_burst` (Kube-OVN: 80 % of the
    /// rate unless given).
    pub policing_burst_kb: i64,
    /// `Queue.other_config:max-rate` of a `linux-htb` QoS, bit/s, from the pod's
    /// `ingress_rate` (Mbit/s); `None` = no QoS row.
    pub htb_max_rate_bps: Option<i64>,
    /// `Queue.other_config:burst`, bits, from the pod's `ingress_burst` (Mbit); only with
    /// `htb_max_rate_bps`. `None`: OVS's default burst.
    pub htb_burst_bits: Option<i64>,
}

impl QosPlan {
    /// The htb queue's `other_config`, when there is a queue.
    pub fn queue_config(&self) -> Option<BTreeMap<String, String>> {
        let rate = self.htb_max_rate_bps?;
        let mut config = BTreeMap::from([("max-rate".to_owned(), rate.to_string())]);
        if let Some(burst) = self.htb_burst_bits {
            config.insert("burst".to_owned(), burst.to_string());
        }
        Some(config)
    }
}

/// The rate limits the pod's annotations ask for (`ingress_rate`, `egress_rate` in Mbit/s,
/// `ingress_burst`, `egress_burst` in Mbit) on the NIC of `provider`; a malformed value is an
/// error naming the key.
pub fn qos_plan(
    annotations: Option<&BTreeMap<String, String>>,
    provider: &str,
) -> Result<QosPlan, AnnotationError> {
    let bandwidth = Bandwidth::read(annotations, provider)?;
    let key = |name: &str| format!("{provider}.kubernetes.io/{name}");
    // Parsed values are at most MAX_BANDWIDTH_MBPS, which converts without overflow: these
    // errors guard the arithmetic, they do not fire on anything the parser accepts.
    let too_large = |name: &str, value: u64| AnnotationError {
        key: key(name),
        value: value.to_string(),
        problem: Problem::OutOfRange(value.to_string()),
        expected: "a rate OVS can hold",
    };
    let egress = bandwidth.egress_rate.unwrap_or(Mbps(0));
    let policing_rate_kbps = policing_rate_kbit(egress).ok_or_else(|| too_large("egress_rate", egress.0))?;
    let policing_burst_kb = policing_burst_kbit(egress, bandwidth.egress_burst)
        .ok_or_else(|| too_large("egress_burst", bandwidth.egress_burst.map_or(0, |b| b.0)))?;
    let ingress = bandwidth.ingress_rate.filter(|r| r.0 > 0);
    let htb_max_rate_bps = ingress
        .map(|r| htb_max_rate_bps(r).ok_or_else(|| too_large("ingress_rate", r.0)))
        .transpose()?;
    let htb_burst_bits = match (htb_max_rate_bps, bandwidth.ingress_burst) {
        (Some(_), Some(Mbit(b))) => {
            Some(htb_burst_bits(Mbit(b)).ok_or_else(|| too_large("ingress_burst", b))?)
        }
        _ => None,
    };
    Ok(QosPlan {
        policing_rate_kbps,
        policing_burst_kb,
        htb_max_rate_bps,
        htb_burst_bits,
    })
}

#[cfg(test)]
mod tests {
    use kube_ovn_api::annotations::MAX_BANDWIDTH_MBPS;

    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn qos_turns_directions_around() {
        let ann = annotations(&[
            ("ovn.kubernetes.io/egress_rate", "5"),
            ("ovn.kubernetes.io/ingress_rate", "10"),
        ]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!(
            qos,
            QosPlan {
                policing_rate_kbps: 5000,
                policing_burst_kb: 4000,
                htb_max_rate_bps: Some(10_000_000),
                htb_burst_bits: None,
            }
        );
        let ann = annotations(&[
            ("ovn.kubernetes.io/egress_rate", "3"),
            ("ovn.kubernetes.io/egress_burst", "1"),
        ]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!(
            (
                qos.policing_rate_kbps,
                qos.policing_burst_kb,
                qos.htb_max_rate_bps
            ),
            (3000, 1000, None)
        );
        assert_eq!(qos_plan(None, "ovn").unwrap(), QosPlan::default());
        let ann = annotations(&[("ovn.kubernetes.io/ingress_rate", "0")]);
        assert_eq!(
            qos_plan(Some(&ann), "ovn").unwrap().htb_max_rate_bps,
            None,
            "0 means no limit"
        );
    }

    #[test]
    fn ingress_burst_goes_to_the_htb_queue_in_bits() {
        let ann = annotations(&[
            ("ovn.kubernetes.io/ingress_rate", "10"),
            ("ovn.kubernetes.io/ingress_burst", "2"),
        ]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!(qos.htb_burst_bits, Some(2_000_000));
        assert_eq!(
            qos.queue_config().unwrap(),
            BTreeMap::from([
                ("burst".to_owned(), "2000000".to_owned()),
                ("max-rate".to_owned(), "10000000".to_owned())
            ])
        );
        // Without a rate there is no queue to hold a burst.
        let ann = annotations(&[("ovn.kubernetes.io/ingress_burst", "2")]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!((qos.htb_burst_bits, qos.queue_config()), (None, None));
    }

    #[test]
    fn what_the_controller_refuses_is_refused_here_too() {
        // The controller refuses these before allocating (Mbps/Mbit); the daemon used to parse
        // floats and applied 2.5 live while every reconcile of the pod failed.
        for (key, value) in [
            ("ovn.kubernetes.io/egress_rate", "2.5"),
            ("ovn.kubernetes.io/ingress_rate", "1e3"),
            ("ovn.kubernetes.io/ingress_burst", "0.5"),
            ("ovn.kubernetes.io/egress_burst", "-1"),
            ("ovn.kubernetes.io/egress_rate", "9223372036855"),
        ] {
            let ann = annotations(&[(key, value)]);
            let err = qos_plan(Some(&ann), "ovn").unwrap_err();
            assert_eq!((err.key.as_str(), err.value.as_str()), (key, value));
        }
    }

    #[test]
    fn the_largest_accepted_rate_converts_without_overflow() {
        let max = MAX_BANDWIDTH_MBPS.to_string();
        let ann = annotations(&[
            ("ovn.kubernetes.io/egress_rate", &max),
            ("ovn.kubernetes.io/ingress_rate", &max),
            ("ovn.kubernetes.io/ingress_burst", &max),
        ]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!(
            qos,
            QosPlan {
                policing_rate_kbps: 9_223_372_036_854_000,
                policing_burst_kb: 7_378_697_629_483_200,
                htb_max_rate_bps: Some(9_223_372_036_854_000_000),
                htb_burst_bits: Some(9_223_372_036_854_000_000),
            }
        );
    }
}
