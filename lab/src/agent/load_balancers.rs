//! The lab's LoadBalancer IP allocator: what MetalLB or a cloud's controller does on a real
//! cluster, so `kubectl expose --type=LoadBalancer` gets an address here too.
//!
//! A Service of `type: LoadBalancer` without `spec.loadBalancerClass` (a class names another
//! implementation) and without an ingress IP gets one in `status.loadBalancer.ingress`: the
//! address `spec.loadBalancerIP` asks for when it is in the pool and free (else a Warning Event
//! and nothing), or the lowest free one of the pool. An ingress IP already there is kept, in the
//! pool or not (a user or a test may set one). A Service that stops being of type LoadBalancer
//! loses the pool's address. The addresses in use are read from the Services themselves, so a
//! restarted agent rebuilds the allocation.
//!
//! Nothing here makes the address reachable: the speaker announces it (the Service needs
//! `ovn.kubernetes.io/bgp: "true"`, as Kube-OVN's), the controller puts it in the load
//! balancers and each node routes it into OVN.
//!
//! [`plan`] is the decision, without I/O; [`run`] feeds it from a cache.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::events::EventRecorder;
use super::informer::{Pass, Passes, WarnedOnce, informer, oldest_first, ready, run_passes};

/// What the allocator reads of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbView {
    /// `namespace/name`.
    pub key: String,
    pub uid: String,
    /// `type: LoadBalancer` without a `loadBalancerClass`.
    pub wants: bool,
    /// `spec.loadBalancerIP`.
    pub requested: Option<String>,
    /// The IPs in `status.loadBalancer.ingress`.
    pub ingress: Vec<String>,
}

impl LbView {
    pub fn of(svc: &Service) -> Self {
        let spec = svc.spec.as_ref();
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.clone())
            .collect();
        Self {
            key: format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()),
            uid: svc.uid().unwrap_or_default(),
            wants: spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                && spec.and_then(|s| s.load_balancer_class.as_ref()).is_none(),
            requested: spec
                .and_then(|s| s.load_balancer_ip.clone())
                .filter(|ip| !ip.is_empty()),
            ingress,
        }
    }
}

/// What to do with one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write `ip` as the only ingress IP.
    Set { key: String, uid: String, ip: IpAddr },
    /// Remove the ingress IPs (the pool's address of a Service no longer of type LoadBalancer).
    Clear { key: String, uid: String },
    /// Leave the Service as it is and tell its owner why.
    Warn {
        key: String,
        uid: String,
        message: String,
    },
}

/// The decisions for `services` (oldest first: the older claim wins an address), given
/// addresses written whose Services the cache does not show with them yet (`pending`, by uid).
pub fn plan<S: std::hash::BuildHasher>(
    pool: &IpNet,
    services: &[LbView],
    pending: &HashMap<String, IpAddr, S>,
) -> Vec<Decision> {
    let in_pool = |text: &String| text.parse::<IpAddr>().ok().filter(|ip| pool.contains(ip));
    let mut used: HashMap<IpAddr, &str> = pending.values().map(|ip| (*ip, "")).collect();
    for svc in services.iter().filter(|s| s.wants) {
        for ip in svc.ingress.iter().filter_map(in_pool) {
            used.entry(ip).or_insert(&svc.key);
        }
    }
    let mut decisions = Vec::new();
    for svc in services {
        if pending.contains_key(&svc.uid) {
            continue;
        }
        if !svc.wants {
            if svc.ingress.iter().any(|ip| in_pool(ip).is_some()) {
                decisions.push(Decision::Clear {
                    key: svc.key.clone(),
                    uid: svc.uid.clone(),
                });
            }
            continue;
        }
        let warn = |message: String| Decision::Warn {
            key: svc.key.clone(),
            uid: svc.uid.clone(),
            message,
        };
        let set = |ip: IpAddr| Decision::Set {
            key: svc.key.clone(),
            uid: svc.uid.clone(),
            ip,
        };
        match &svc.requested {
            Some(text) if !svc.ingress.contains(text) => {
                let Ok(ip) = text.parse::<IpAddr>() else {
                    decisions.push(warn(format!(
                        "spec.loadBalancerIP: Invalid value: {text:?}: must be a valid IP address"
                    )));
                    continue;
                };
                if !pool.contains(&ip) {
                    decisions.push(warn(format!(
                        "spec.loadBalancerIP: {ip} is not in the lab's pool {pool}"
                    )));
                } else if let Some(owner) = used.get(&ip).filter(|o| **o != svc.key) {
                    decisions.push(warn(format!(
                        "spec.loadBalancerIP: {ip} is already allocated{}",
                        if owner.is_empty() {
                            String::new()
                        } else {
                            format!(" to {owner}")
                        }
                    )));
                } else {
                    used.insert(ip, &svc.key);
                    decisions.push(set(ip));
                }
            }
            Some(_) => {}
            None if !svc.ingress.is_empty() => {}
            None => match lowest_free(pool, &used) {
                Some(ip) => {
                    used.insert(ip, &svc.key);
                    decisions.push(set(ip));
                }
                None => decisions.push(warn(format!("no free address in the lab's pool {pool}"))),
            },
        }
    }
    decisions
}

/// The pool's lowest address not in `used`, its network and (IPv4) broadcast addresses aside.
fn lowest_free(pool: &IpNet, used: &HashMap<IpAddr, &str>) -> Option<IpAddr> {
    pool.hosts()
        .find(|ip| *ip != pool.network() && !used.contains_key(ip))
}

/// Allocates from `pool` until dropped.
pub async fn run(client: Client, pool: IpNet) {
    let services = informer(Api::<Service>::all(client.clone()), watcher::Config::default());
    let mut allocator = Allocator {
        events: EventRecorder::new(client.clone(), "kube-ovn-lab-load-balancers", None),
        client,
        pool,
        services: services.store,
        pending: HashMap::new(),
        warned: WarnedOnce::default(),
    };
    run_passes(services.changes, &mut allocator).await;
}

struct Allocator {
    client: Client,
    events: EventRecorder,
    pool: IpNet,
    services: Store<Service>,
    /// Addresses written whose Services the cache does not show with them yet, by uid.
    pending: HashMap<String, IpAddr>,
    warned: WarnedOnce,
}

impl Passes for Allocator {
    fn ready(&self) -> bool {
        ready(&self.services)
    }

    async fn pass(&mut self) -> Pass {
        let services = oldest_first(&self.services);
        let views: Vec<LbView> = services.iter().map(|s| LbView::of(s)).collect();
        // A pending address is done once the cache shows it (or the Service went).
        self.pending.retain(|uid, ip| {
            views
                .iter()
                .find(|v| &v.uid == uid)
                .is_some_and(|v| !v.ingress.contains(&ip.to_string()))
        });
        let live: HashSet<&str> = views.iter().map(|v| v.uid.as_str()).collect();
        self.warned.keep_only(&live);
        let mut outcome = Pass::Done;
        for decision in plan(&self.pool, &views, &self.pending) {
            let (key, uid, status, ip) = match decision {
                Decision::Set { key, uid, ip } => (
                    key,
                    uid,
                    json!({"loadBalancer": {"ingress": [{"ip": ip.to_string()}]}}),
                    Some(ip),
                ),
                Decision::Clear { key, uid } => (key, uid, json!({"loadBalancer": {"ingress": null}}), None),
                Decision::Warn { key, uid, message } => {
                    if self.warned.first_time(&uid, &message) {
                        tracing::warn!(service = %key, %message, "no LoadBalancer IP given");
                        if let Some(svc) = services.iter().find(|s| s.uid().as_deref() == Some(uid.as_str()))
                        {
                            let reference = EventRecorder::reference(svc.as_ref());
                            self.events
                                .warning(&reference, "LoadBalancerIPNotAllocated", &message)
                                .await;
                        }
                    }
                    continue;
                }
            };
            let Some(svc) = services.iter().find(|s| s.uid().as_deref() == Some(uid.as_str())) else {
                continue;
            };
            let span = tracing::info_span!("service", service = %key);
            let api: Api<Service> =
                Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
            let patch = json!({"metadata": {"resourceVersion": svc.resource_version()}, "status": status});
            match api
                .patch_status(&svc.name_any(), &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    span.in_scope(|| tracing::info!(ip = ?ip, "LoadBalancer ingress IP written"));
                    if let Some(ip) = ip {
                        self.pending.insert(uid, ip);
                    }
                }
                // Changed or gone meanwhile: the next pass sees the new state.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                Err(e) => {
                    span.in_scope(|| tracing::warn!(error = %e, "could not write the LoadBalancer IP"));
                    outcome = Pass::Retry;
                }
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(key: &str, requested: Option<&str>, ingress: &[&str]) -> LbView {
        LbView {
            key: key.into(),
            uid: format!("uid-{key}"),
            wants: true,
            requested: requested.map(Into::into),
            ingress: ingress.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn pool() -> IpNet {
        "203.0.113.0/30".parse().unwrap()
    }

    fn set(key: &str, ip: &str) -> Decision {
        Decision::Set {
            key: key.into(),
            uid: format!("uid-{key}"),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn lowest_free_addresses_go_oldest_first_and_kept_ones_stay() {
        let services = [
            lb("a/kept", None, &["203.0.113.1"]),
            lb("a/new", None, &[]),
            lb("a/outside-pool", None, &["192.0.2.9"]),
            lb("a/none-left", None, &[]),
        ];
        let got = plan(&pool(), &services, &HashMap::new());
        assert_eq!(got[0], set("a/new", "203.0.113.2"));
        assert!(
            matches!(&got[1], Decision::Warn { key, message, .. }
                if key == "a/none-left" && message.contains("no free address")),
            "{got:?}"
        );
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn requested_addresses_are_honoured_only_in_the_pool_and_when_free() {
        let services = [
            lb("a/holder", None, &["203.0.113.1"]),
            lb("a/wants-held", Some("203.0.113.1"), &[]),
            lb("a/wants-free", Some("203.0.113.2"), &[]),
            lb("a/wants-outside", Some("198.51.100.1"), &[]),
            lb("a/bad", Some("not-an-ip"), &[]),
            lb("a/has-it", Some("203.0.113.3"), &["203.0.113.3"]),
        ];
        let got = plan(&"203.0.113.0/29".parse().unwrap(), &services, &HashMap::new());
        let warned = |key: &str, what: &str| {
            got.iter().any(
                |d| matches!(d, Decision::Warn { key: k, message, .. } if k == key && message.contains(what)),
            )
        };
        assert!(warned("a/wants-held", "already allocated to a/holder"), "{got:?}");
        assert!(got.contains(&set("a/wants-free", "203.0.113.2")), "{got:?}");
        assert!(
            warned("a/wants-outside", "not in the lab's pool 203.0.113.0/29"),
            "{got:?}"
        );
        assert!(warned("a/bad", "must be a valid IP address"), "{got:?}");
        assert_eq!(got.len(), 4, "a/has-it needs nothing: {got:?}");
    }

    #[test]
    fn pending_addresses_are_taken_and_type_changes_give_the_address_back() {
        let mut changed = lb("a/was-lb", None, &["203.0.113.1"]);
        changed.wants = false;
        let mut foreign = lb("a/cluster-ip", None, &["192.0.2.1"]);
        foreign.wants = false;
        let services = [
            changed,
            foreign,
            lb("a/written", None, &[]),
            lb("a/next", None, &[]),
        ];
        let pending = HashMap::from([("uid-a/written".to_owned(), "203.0.113.2".parse().unwrap())]);
        let got = plan(&pool(), &services, &pending);
        assert_eq!(
            got,
            vec![
                Decision::Clear {
                    key: "a/was-lb".into(),
                    uid: "uid-a/was-lb".into()
                },
                // .1 is still on a/was-lb in the cache only if it wants it; it does not.
                set("a/next", "203.0.113.1"),
            ]
        );
    }
}
