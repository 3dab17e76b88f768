//! Policy routing: `ip rule from <src> lookup <table> priority <n>` and default routes in
//! tables other than main, the pair `externalEgressGateway` needs.
//!
//! Both are tagged with our routing protocol number, [`PROTOCOL`], so that the daemon can find
//! and remove the ones it made without touching anyone else's (`ip rule show` prints `proto
//! 150`; `ip route show table all proto 150` lists the routes).
//!
//! [`PolicyRule`] and [`TableRoute`] are also what the gateway planner
//! (`kube_ovn_gateway::routing`) plans, so a plan is applied as it is, with no copy to convert.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage, RouteProtocol, RouteType};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::{IpVersion, RouteMessageBuilder};

use crate::error::{Error, Result};
use crate::link::Netlink;

/// The protocol number of our rules and routes (unassigned in iproute2's `rt_protos`).
pub const PROTOCOL: u8 = 150;

const MAIN_TABLE: u32 = 254;
const LOCAL_TABLE: u32 = 255;

/// `from <src> [fwmark <mark>/<mark>] lookup <table> priority <priority>`; a `/0` source is
/// `from all`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyRule {
    pub priority: u32,
    pub src: IpNet,
    pub table: u32,
    /// Only packets with this mark, matched under the mark itself as the mask.
    pub fwmark: Option<u32>,
}

/// `default via <gateway> table <table>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableRoute {
    pub table: u32,
    pub gateway: IpAddr,
}

fn parse_rule(message: &RuleMessage) -> Option<PolicyRule> {
    let mut src = None;
    let mut priority = 0;
    let mut table = u32::from(message.header.table);
    let mut ours = false;
    let (mut mark, mut mask) = (None, None);
    for attribute in &message.attributes {
        match attribute {
            RuleAttribute::Source(ip) => src = Some(*ip),
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Protocol(p) => ours = u8::from(*p) == PROTOCOL,
            RuleAttribute::FwMark(m) => mark = Some(*m),
            RuleAttribute::FwMask(m) => mask = Some(*m),
            _ => {}
        }
    }
    // `from all` carries no source: the family's unspecified address, /0.
    let src = match src {
        Some(ip) => ip,
        None if message.header.src_len == 0 => match message.header.family {
            AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        },
        None => return None,
    };
    let src = IpNet::new(src, message.header.src_len).ok()?;
    // We only ever match a mark under itself as the mask; any other is not a rule of ours.
    let fwmark = match (mark, mask) {
        (None, _) => None,
        (Some(m), Some(k)) if m == k => Some(m),
        (Some(_), _) => return None,
    };
    ours.then_some(PolicyRule {
        priority,
        src,
        table,
        fwmark,
    })
}

fn rule_message(rule: &PolicyRule) -> RuleMessage {
    let mut message = RuleMessage::default();
    message.header.family = if rule.src.addr().is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    message.header.src_len = rule.src.prefix_len();
    message.header.action = RuleAction::ToTable;
    if let Ok(table) = u8::try_from(rule.table) {
        message.header.table = table;
    }
    message.attributes = vec![
        RuleAttribute::Priority(rule.priority),
        RuleAttribute::Table(rule.table),
        RuleAttribute::Protocol(RouteProtocol::from(PROTOCOL)),
    ];
    if rule.src.prefix_len() > 0 {
        message.attributes.push(RuleAttribute::Source(rule.src.addr()));
    }
    if let Some(mark) = rule.fwmark {
        message.attributes.push(RuleAttribute::FwMark(mark));
        message.attributes.push(RuleAttribute::FwMask(mark));
    }
    message
}

fn describe_rule(rule: &PolicyRule) -> String {
    let mark = rule
        .fwmark
        .map(|m| format!(" fwmark {m:#x}/{m:#x}"))
        .unwrap_or_default();
    format!(
        "rule from {}{mark} lookup {} priority {}",
        rule.src, rule.table, rule.priority
    )
}

fn route_message(route: &TableRoute) -> RouteMessage {
    let protocol = RouteProtocol::from(PROTOCOL);
    match route.gateway {
        IpAddr::V4(gw) => RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(gw)
            .table_id(route.table)
            .protocol(protocol)
            .build(),
        IpAddr::V6(gw) => RouteMessageBuilder::<Ipv6Addr>::new()
            .gateway(gw)
            .table_id(route.table)
            .protocol(protocol)
            .build(),
    }
}

fn parse_table_route(message: &RouteMessage) -> Option<TableRoute> {
    if u8::from(message.header.protocol) != PROTOCOL
        || message.header.kind != RouteType::Unicast
        || message.header.destination_prefix_length != 0
    {
        return None;
    }
    let mut table = u32::from(message.header.table);
    let mut gateway = None;
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Gateway(a) => gateway = crate::route::address(a),
            RouteAttribute::Via(rtnetlink::packet_route::route::RouteVia::Inet6(v6)) => {
                gateway = Some(IpAddr::V6(*v6));
            }
            _ => {}
        }
    }
    (table != MAIN_TABLE && table != LOCAL_TABLE).then_some(TableRoute {
        table,
        gateway: gateway?,
    })
}

impl Netlink {
    /// Our policy rules of one family.
    pub async fn policy_rules(&self, ipv6: bool) -> Result<Vec<PolicyRule>> {
        let _turn = self.dump_turn().await;
        let version = if ipv6 { IpVersion::V6 } else { IpVersion::V4 };
        let messages: Vec<RuleMessage> = self
            .handle
            .rule()
            .get(version)
            .execute()
            .try_collect()
            .await
            .map_err(self.fail("list rules"))?;
        Ok(messages.iter().filter_map(parse_rule).collect())
    }

    /// Adds a rule; one that exists already is fine.
    pub async fn add_policy_rule(&self, rule: &PolicyRule) -> Result<()> {
        let mut request = self.handle.rule().add();
        *request.message_mut() = rule_message(rule);
        match request.execute().await {
            Ok(()) => Ok(()),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("add {}", describe_rule(rule)),
                    ns: self.ns.clone(),
                    source,
                };
                if err.is_exists() { Ok(()) } else { Err(err) }
            }
        }
    }

    /// Deletes a rule; `Ok(false)` when it was not there.
    pub async fn delete_policy_rule(&self, rule: &PolicyRule) -> Result<bool> {
        let result = self.handle.rule().del(rule_message(rule)).execute().await;
        self.deleted(format!("delete {}", describe_rule(rule)), result)
    }

    /// Our default routes in tables other than main and local, of one family.
    pub async fn table_routes(&self, ipv6: bool) -> Result<Vec<TableRoute>> {
        let messages = self.route_messages(ipv6).await?;
        Ok(messages.iter().filter_map(parse_table_route).collect())
    }

    /// Adds or replaces the default route of `route.table`.
    pub async fn replace_table_route(&self, route: &TableRoute) -> Result<()> {
        self.handle
            .route()
            .add(route_message(route))
            .replace()
            .execute()
            .await
            .map_err(self.fail(format!("add default via {} table {}", route.gateway, route.table)))
    }

    /// Deletes the default route of `route.table`; `Ok(false)` when it was not there.
    pub async fn delete_table_route(&self, route: &TableRoute) -> Result<bool> {
        match self.handle.route().del(route_message(route)).execute().await {
            Ok(()) => Ok(true),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("delete default via {} table {}", route.gateway, route.table),
                    ns: self.ns.clone(),
                    source,
                };
                if err.is_not_found() { Ok(false) } else { Err(err) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip_through_their_message_and_foreign_ones_are_skipped() {
        let rule = PolicyRule {
            priority: 1000,
            src: "10.22.0.5/32".parse().unwrap(),
            table: 1000,
            fwmark: None,
        };
        let message = rule_message(&rule);
        assert_eq!(message.header.action, RuleAction::ToTable);
        assert_eq!(parse_rule(&message), Some(rule.clone()));
        let mut foreign = message;
        foreign
            .attributes
            .retain(|a| !matches!(a, RuleAttribute::Protocol(_)));
        assert_eq!(parse_rule(&foreign), None);
        let route = TableRoute {
            table: 1000,
            gateway: "fd00::1".parse().unwrap(),
        };
        assert_eq!(parse_table_route(&route_message(&route)), Some(route));
        // `from all fwmark 0x400000/0x400000`: no source attribute, the family's /0 back.
        for all in ["0.0.0.0/0", "::/0"] {
            let marked = PolicyRule {
                priority: 150,
                src: all.parse().unwrap(),
                table: 4_000_150,
                fwmark: Some(0x40_0000),
            };
            let message = rule_message(&marked);
            assert!(
                !message
                    .attributes
                    .iter()
                    .any(|a| matches!(a, RuleAttribute::Source(_)))
            );
            assert_eq!(parse_rule(&message), Some(marked));
        }
    }
}
