//! Named points where a crash matters most, for the crash drill (`tests/crash.rs`): between a
//! plan's submission to the batcher and its commit, after the commit but before the reconciler
//! hears of it, between a pod's port write and its annotations, and between a release's port
//! removal and the rest of it.
//!
//! Only a build with the `crash-points` feature (the controller's own tests enable it) can stop
//! there: it reads `KUBE_OVN_CRASH_AT=<point>:<n>` once and aborts the process — no unwinding,
//! no cleanup, as SIGKILL — the `n`th time it reaches `<point>`. Any other build compiles
//! [`reached`] to nothing.

/// Every point, by name.
pub const POINTS: [&str; 4] = [NB_SUBMITTED, NB_COMMITTED, POD_PORT_WRITTEN, POD_PORT_REMOVED];
/// A plan is in the batcher's hands; its transaction has not been sent.
pub const NB_SUBMITTED: &str = "nb-submitted";
/// A transaction has committed; the reconcilers that submitted its plans have not been told.
pub const NB_COMMITTED: &str = "nb-committed";
/// A pod's port and IP CR are written; its annotations are not.
pub const POD_PORT_WRITTEN: &str = "pod-port-written";
/// A released pod's port is removed; its IP CR and its address in IPAM are not.
pub const POD_PORT_REMOVED: &str = "pod-port-removed";

/// The environment variable a `crash-points` build reads.
pub const ENV: &str = "KUBE_OVN_CRASH_AT";

#[cfg(feature = "crash-points")]
struct Armed {
    point: String,
    at: u64,
    seen: std::sync::atomic::AtomicU64,
}

#[cfg(feature = "crash-points")]
fn armed() -> Option<&'static Armed> {
    static ARMED: std::sync::OnceLock<Option<Armed>> = std::sync::OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(ENV).ok()?;
            let (point, at) = spec.rsplit_once(':').unwrap_or((spec.as_str(), "1"));
            let at = at
                .parse()
                .unwrap_or_else(|_| panic!("{ENV}={spec}: the count after ':' must be a number"));
            assert!(
                POINTS.contains(&point),
                "{ENV}={spec}: no crash point {point}; points: {POINTS:?}"
            );
            Some(Armed {
                point: point.to_owned(),
                at,
                seen: std::sync::atomic::AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Marks `point`; a `crash-points` build armed for it may die here (see the module doc).
#[cfg(feature = "crash-points")]
pub fn reached(point: &'static str) {
    let Some(a) = armed() else { return };
    if a.point == point && a.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == a.at {
        // The drill reads this line to know where the process died.
        eprintln!("crash point {point} reached ({} time); aborting", a.at);
        std::process::abort();
    }
}

/// Marks `point`; a `crash-points` build armed for it may die here (see the module doc).
#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn reached(_point: &'static str) {}
