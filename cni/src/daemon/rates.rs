//! A pod's rate limits from its annotations (no I/O), as Kube-OVN maps them onto OVS: the pod's
//! `egress_rate` (and `egress_burst`) become the interface's ingress policing, its `ingress_rate`
//! an htb QoS with one queue — directions turned around, since what the pod sends is what OVS
//! receives.

use std::collections::BTreeMap;

use kube_ovn_api::annotations::{AnnotationError, provider_key};

/// OVS rate limits for one interface, already turned around to the switch's point of view:
/// what the pod sends is what OVS receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QosPlan {
    /// `Interface.ingress_policing_rate`, kbit/s, from the pod's `egress_rate` (Mbit/s); 0 = off.
    pub policing_rate_kbps: i64,
    /// `Interface.ingress_policing_burst`, kbit (Kube-OVN: 80 % of the rate unless given).
    pub policing_burst_kb: i64,
    /// `Queue.other_config:max-rate` of a `linux-htb` QoS, bit/s, from the pod's
    /// `ingress_rate` (Mbit/s); `None` = no QoS row.
    pub htb_max_rate_bps: Option<i64>,
}

/// The rate limits the pod's annotations ask for (`ingress_rate`, `egress_rate` in Mbit/s,
/// `egress_burst` in Mbit); malformed values are errors naming the key.
pub fn qos_plan(
    annotations: Option<&BTreeMap<String, String>>,
    provider: &str,
) -> Result<QosPlan, AnnotationError> {
    let key = |name: &str| {
        provider_key(provider, name).unwrap_or_else(|_| format!("{provider}.kubernetes.io/{name}"))
    };
    let rate = |name: &str| -> Result<Option<f64>, AnnotationError> {
        let k = key(name);
        match annotations.and_then(|a| a.get(&k)) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
                _ => Err(AnnotationError {
                    key: k,
                    value: v.clone(),
                    problem: kube_ovn_api::annotations::Problem::NotANumber(v.clone()),
                    expected: "a rate in Mbit/s such as 10 or 2.5",
                }),
            },
        }
    };
    let egress = rate("egress_rate")?.unwrap_or(0.0);
    let burst = rate("egress_burst")?;
    let ingress = rate("ingress_rate")?.filter(|r| *r > 0.0);
    #[allow(clippy::cast_possible_truncation)] // rates are far below i64::MAX kbit/s
    let kbit = |mbit: f64| (mbit * 1000.0).round() as i64;
    let policing_rate_kbps = kbit(egress);
    Ok(QosPlan {
        policing_rate_kbps,
        policing_burst_kb: if policing_rate_kbps == 0 {
            0
        } else {
            burst.map_or(policing_rate_kbps * 8 / 10, kbit)
        },
        #[allow(clippy::cast_possible_truncation)]
        htb_max_rate_bps: ingress.map(|r| (r * 1_000_000.0).round() as i64),
    })
}

#[cfg(test)]
mod tests {
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
                htb_max_rate_bps: Some(10_000_000)
            }
        );
        let ann = annotations(&[
            ("ovn.kubernetes.io/egress_rate", "2.5"),
            ("ovn.kubernetes.io/egress_burst", "1"),
        ]);
        let qos = qos_plan(Some(&ann), "ovn").unwrap();
        assert_eq!(
            (
                qos.policing_rate_kbps,
                qos.policing_burst_kb,
                qos.htb_max_rate_bps
            ),
            (2500, 1000, None)
        );
        assert_eq!(qos_plan(None, "ovn").unwrap(), QosPlan::default());
        let ann = annotations(&[("ovn.kubernetes.io/ingress_rate", "0")]);
        assert_eq!(
            qos_plan(Some(&ann), "ovn").unwrap().htb_max_rate_bps,
            None,
            "0 means no limit"
        );
    }
}
