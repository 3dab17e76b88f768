//! Our nftables tables in the node's namespace, kept equal to the plan: element updates over
//! netlink when only set contents changed, else the whole of both tables replaced in one `nft
//! -f` transaction; and a check, cheap when nothing changed, that restores them when someone
//! else flushed or edited them.
//!
//! What "nothing changed" means: nf_tables counts committed transactions per namespace (its
//! generation). After every apply the applier lists its tables, compares them with the plan,
//! and remembers the generation; as long as the generation stays there, nobody, us included,
//! has changed any table, and the check costs one netlink request. When it moved (kube-proxy
//! writes rules all the time), the tables are listed and compared again: the shape (sets,
//! chains, rules) with what nft listed right after our last full apply, the elements with the
//! plan.
//!
//! Replacing a table leaves conntrack alone: established flows keep their NAT bindings across
//! a re-apply, a daemon restart or a flush by someone else.

use std::collections::BTreeMap;

use kube_ovn_dataplane::Netns;
use kube_ovn_dataplane::nft::{self, ElementUpdate, NftFamily, NftNetlink};
use kube_ovn_gateway::listing::parse_listing;
use kube_ovn_gateway::{Family, Ruleset, SetUpdate, TABLE};

use crate::error::DaemonError;

/// What an apply did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The kernel already had the plan.
    Unchanged,
    /// This many sets had elements added or removed.
    Elements(usize),
    /// Both tables were replaced.
    Replaced,
}

/// The applier's memory of what it put in the kernel.
pub struct NftTables {
    ns: Netns,
    /// Opened at the first use and kept (see [`NftNetlink`] on why).
    netlink: Option<NftNetlink>,
    applied: Option<Ruleset>,
    /// Each family's table shape as nft listed it after the last full apply.
    shapes: BTreeMap<Family, String>,
    /// The generation at which the kernel was last seen holding `applied`.
    verified: Option<u32>,
}

fn nft_family(family: Family) -> NftFamily {
    match family {
        Family::V4 => NftFamily::Ipv4,
        Family::V6 => NftFamily::Ipv6,
    }
}

fn element_update(update: SetUpdate) -> ElementUpdate {
    ElementUpdate {
        family: nft_family(update.family),
        table: TABLE.to_owned(),
        set: update.set,
        delete: update.delete,
        add: update.add,
    }
}

/// How the kernel's tables differ from `plan`, or `None` when they do not.
async fn difference(
    ns: &Netns,
    plan: &Ruleset,
    shapes: &BTreeMap<Family, String>,
) -> Result<Option<String>, DaemonError> {
    for family in Family::ALL {
        let listed = nft::list_table_json(ns, nft_family(family), TABLE).await?;
        let table = plan.tables.get(&family);
        let keyword = nft_family(family).keyword();
        match (table, listed) {
            (None, None) => {}
            (None, Some(_)) => return Ok(Some(format!("table {keyword} {TABLE} should not exist"))),
            (Some(_), None) => return Ok(Some(format!("table {keyword} {TABLE} is missing"))),
            (Some(table), Some(json)) => {
                let listing = parse_listing(&json).map_err(|e| DaemonError::Gateway(e.to_string()))?;
                if shapes.get(&family).is_some_and(|s| *s != listing.shape) {
                    return Ok(Some(format!(
                        "the chains or rules of table {keyword} {TABLE} changed"
                    )));
                }
                if !listing.elements_match(table) {
                    return Ok(Some(format!(
                        "the set elements of table {keyword} {TABLE} changed"
                    )));
                }
            }
        }
    }
    Ok(None)
}

impl NftTables {
    async fn netlink(&mut self) -> Result<&NftNetlink, DaemonError> {
        if self.netlink.is_none() {
            self.netlink = Some(NftNetlink::open(&self.ns).await?);
        }
        Ok(self.netlink.as_ref().expect("opened above"))
    }

    async fn generation(&mut self) -> Result<u32, DaemonError> {
        Ok(self.netlink().await?.generation().await?)
    }

    /// Nothing applied yet: the first apply replaces whatever a previous run left.
    pub fn new(ns: Netns) -> Self {
        Self {
            ns,
            netlink: None,
            applied: None,
            shapes: BTreeMap::new(),
            verified: None,
        }
    }

    /// Makes the kernel's tables equal to `plan`.
    pub async fn apply(&mut self, plan: &Ruleset) -> Result<Applied, DaemonError> {
        if let Some(what) = self.drift().await? {
            tracing::debug!(%what, "replacing the egress NAT tables");
        } else if let Some(previous) = self.applied.clone() {
            if previous == *plan {
                return Ok(Applied::Unchanged);
            }
            // The updates are relative to what we applied, which the kernel was just seen to hold.
            if let Some(updates) = plan.updates_from(&previous) {
                let count = updates.len();
                let before = self.verified;
                let updates = updates.into_iter().map(element_update).collect();
                let result = self.netlink().await?.update_elements(updates).await;
                match result {
                    Ok(()) => {
                        self.applied = Some(plan.clone());
                        // One commit of ours moves the generation by one; more means someone
                        // else committed too, and the next check looks.
                        let after = self.generation().await?;
                        self.verified = before.filter(|g| after == g.wrapping_add(1)).map(|_| after);
                        return Ok(Applied::Elements(count));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "nft element update refused; replacing the tables instead");
                    }
                }
            }
        }
        self.replace(plan).await?;
        Ok(Applied::Replaced)
    }

    /// `None` when the kernel holds what was last applied (one netlink request when the
    /// generation has not moved since it was last seen so); else how it differs.
    async fn drift(&mut self) -> Result<Option<String>, DaemonError> {
        let Some(applied) = self.applied.clone() else {
            return Ok(Some("nothing applied by this process yet".into()));
        };
        let generation = self.generation().await?;
        if self.verified == Some(generation) {
            return Ok(None);
        }
        if let Some(what) = difference(&self.ns, &applied, &self.shapes).await? {
            self.verified = None;
            return Ok(Some(what));
        }
        // Seen as applied; if the generation moved meanwhile, the next look lists again.
        let after = self.generation().await?;
        self.verified = (after == generation).then_some(generation);
        Ok(None)
    }

    async fn replace(&mut self, plan: &Ruleset) -> Result<(), DaemonError> {
        // Until the listing below confirms it, nothing is known to be in the kernel.
        self.verified = None;
        nft::apply_script(&self.ns, plan.script()).await?;
        let generation = self.generation().await?;
        let mut shapes = BTreeMap::new();
        for (family, table) in &plan.tables {
            let json = nft::list_table_json(&self.ns, nft_family(*family), TABLE)
                .await?
                .ok_or_else(|| {
                    DaemonError::Gateway(format!("table {TABLE} is missing right after nft applied it"))
                })?;
            let listing = parse_listing(&json).map_err(|e| DaemonError::Gateway(e.to_string()))?;
            if !listing.elements_match(table) {
                return Err(DaemonError::Gateway(format!(
                    "table {} {TABLE} does not hold the planned set elements right after nft applied it",
                    nft_family(*family).keyword()
                )));
            }
            shapes.insert(*family, listing.shape);
        }
        let after = self.generation().await?;
        self.applied = Some(plan.clone());
        self.shapes = shapes;
        self.verified = (after == generation).then_some(after);
        Ok(())
    }

    /// Restores the last applied plan when the kernel no longer holds it; `true` when it did.
    pub async fn check(&mut self) -> Result<bool, DaemonError> {
        let Some(plan) = self.applied.clone() else {
            return Ok(false);
        };
        match self.drift().await? {
            None => Ok(false),
            Some(what) => {
                tracing::warn!(difference = %what, "egress NAT tables changed by someone else; restoring them");
                self.replace(&plan).await?;
                Ok(true)
            }
        }
    }
}
