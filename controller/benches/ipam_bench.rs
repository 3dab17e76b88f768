//! IPAM benchmark: allocate every address of a /16 (and of a dual-stack /16 + /112), then release
//! them all; nanoseconds per operation and heap bytes per allocated address.
//!
//! Run: `cargo bench -p kube-ovn-controller --bench ipam_bench`. Prints a Markdown table.

#![allow(
    unsafe_code,
    reason = "a counting global allocator is the only way to measure heap bytes"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kube_ovn_controller::ipam::{Ipam, Request, SubnetConfig};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout, same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(label: &str, cidrs: &str) {
    let mut ipam = Ipam::with_seed(1);
    let config = SubnetConfig {
        cidrs: cidrs.split(',').map(|c| c.parse().unwrap()).collect(),
        gateways: vec![],
        exclude_ips: vec![],
    };
    ipam.add_or_update_subnet("bench", &config).unwrap();
    let n = usize::try_from(ipam.subnet_usage("bench").unwrap().v4_available).unwrap();
    let keys: Vec<String> = (0..n).map(|i| format!("pod-{i}.bench")).collect();
    let before = LIVE.load(Ordering::Relaxed);
    let start = Instant::now();
    for k in &keys {
        ipam.allocate("bench", k, &Request::default()).unwrap();
    }
    let alloc_time = start.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    assert_eq!(ipam.subnet_usage("bench").unwrap().v4_available, 0);
    let start = Instant::now();
    for k in &keys {
        ipam.release("bench", k).unwrap();
    }
    let release_time = start.elapsed();
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let per = |d: std::time::Duration| d.as_nanos() as f64 / n as f64;
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let bytes_per = bytes as f64 / n as f64;
    println!(
        "| {label} | {n} | {:.0} ns | {:.0} ns | {bytes_per:.0} B |",
        per(alloc_time),
        per(release_time)
    );
}

fn main() {
    println!("| subnet | addresses | allocate / op | release / op | heap per allocated NIC |");
    println!("|---|---|---|---|---|");
    run("IPv4 /16", "10.16.0.0/16");
    run("dual-stack /16 + /112", "10.16.0.0/16,fd00:10:16::/112");
}
