//! The `routes` annotation: extra routes for a pod NIC as JSON, `[{"dst":"CIDR","gw":"IP"}]`.
//!
//! An absent or empty `dst` means the default route of `gw`'s family. Kube-OVN omits empty
//! members when it writes the JSON; we do too, so `{"dst":"","gw":"10.0.0.1"}` reads as a default
//! route and is written back as `{"gw":"10.0.0.1"}`. The same [`Route`] shape is used in the
//! daemon wire types ([`crate::wire`]).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize};

use super::addr::IpFamily;
use super::{AnnotationValue, Problem};

/// One route: destination prefix (none = default route) via a gateway (none = on-link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Route {
    /// Destination; `None` is the default route.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub dst: Option<IpNet>,
    /// Next hop; `None` routes on-link.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub gw: Option<IpAddr>,
}

impl Route {
    /// The route's family, from its destination or else its gateway (`None` if it has neither).
    pub fn family(&self) -> Option<IpFamily> {
        match (self.dst, self.gw) {
            (Some(IpNet::V4(_)), _) | (None, Some(IpAddr::V4(_))) => Some(IpFamily::V4),
            (Some(IpNet::V6(_)), _) | (None, Some(IpAddr::V6(_))) => Some(IpFamily::V6),
            (None, None) => None,
        }
    }
}

/// Reads `""` (and `null`) as `None`, any other string through `T`'s parser.
fn empty_as_none<'de, D: Deserializer<'de>, T: std::str::FromStr>(d: D) -> Result<Option<T>, D::Error>
where
    T::Err: fmt::Display,
{
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

/// The whole `routes` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Routes(pub Vec<Route>);

impl fmt::Display for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&serde_json::to_string(&self.0).map_err(|_| fmt::Error)?)
    }
}

impl AnnotationValue for Routes {
    const EXPECTED: &'static str = r#"a JSON list like [{"dst":"10.0.0.0/8","gw":"10.16.0.1"}]"#;

    fn parse_value(value: &str) -> Result<Self, Problem> {
        let routes: Vec<Route> = serde_json::from_str(value).map_err(|e| Problem::Json(e.to_string()))?;
        for route in &routes {
            if let (Some(dst), Some(gw)) = (route.dst, route.gw)
                && dst.addr().is_ipv4() != gw.is_ipv4()
            {
                return Err(Problem::MixedFamilies(format!("{dst} via {gw}")));
            }
            if route.dst.is_none() && route.gw.is_none() {
                return Err(Problem::Json("a route needs a dst or a gw".to_owned()));
            }
        }
        Ok(Self(routes))
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn default_route_forms() {
        let r: Routes = parse("k", r#"[{"dst":"","gw":"10.16.0.1"},{"gw":"fd00::1"}]"#).unwrap();
        assert_eq!(
            r.0[0],
            Route {
                dst: None,
                gw: Some("10.16.0.1".parse().unwrap())
            }
        );
        assert_eq!(r.0[0].family(), Some(IpFamily::V4));
        assert_eq!(r.0[1].family(), Some(IpFamily::V6));
        assert_eq!(r.to_string(), r#"[{"gw":"10.16.0.1"},{"gw":"fd00::1"}]"#);
    }

    #[test]
    fn canonical_text_round_trips() {
        let text = r#"[{"dst":"192.168.0.0/16","gw":"10.16.0.254"},{"dst":"fd00:1::/64"}]"#;
        let r: Routes = parse("k", text).unwrap();
        assert_eq!(r.to_string(), text);
        assert_eq!(parse::<Routes>("k", "[]").unwrap().to_string(), "[]");
    }
}
