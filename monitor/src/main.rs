//! kube-ovn-monitor's process: flags, logs, the collection loop and the endpoints (the crate's
//! library has the rest).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::Parser;
use kube_ovn_support::Supervisor;
use kube_ovn_support::endpoints::Endpoints;

use kube_ovn_monitor::collect::Collector;
use kube_ovn_monitor::flags::{self, Flags};
use kube_ovn_monitor::metrics::Metrics;

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.klog.init_logs();
    let config = flags.config()?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), ?config, "kube-ovn-monitor");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(config))
}

async fn run(config: flags::Config) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let collected = Arc::new(AtomicBool::new(false));
    let supervisor = Supervisor::new();
    let listen = config.listen.clone();
    let enable_metrics = config.enable_metrics;
    if enable_metrics {
        let collector = Collector::start(config.clone())?;
        let (metrics, collected) = (metrics.clone(), collected.clone());
        supervisor.spawn("collector", async move {
            collector.wait_ready().await;
            loop {
                let snapshot = collector.collect().await;
                metrics.apply(&snapshot);
                collected.store(true, Ordering::Release);
                tokio::time::sleep(config.poll_interval).await;
            }
        });
    } else {
        tracing::info!("metrics are disabled (--enable-metrics=false): health endpoints only");
    }

    let scrape = {
        let metrics = metrics.clone();
        move || {
            let metrics = metrics.clone();
            async move { metrics.encode() }
        }
    };
    // Ready once the first collection is in (or at once without metrics): a scrape before it
    // would only show empty gauges.
    let ready = move || {
        if !enable_metrics || collected.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("the first collection from OVN is not done yet".to_owned())
        }
    };
    let mut endpoints = Endpoints::new(scrape, ready).supervised(&supervisor);
    if !enable_metrics {
        endpoints = endpoints.without_metrics();
    }
    for addr in listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--metrics-port)"))?;
        let endpoints = endpoints.clone();
        supervisor.spawn(format!("endpoints {addr}"), async move {
            if let Err(error) = endpoints.serve(listener).await {
                tracing::error!(%error, "metrics endpoint stopped");
            }
        });
    }
    kube_ovn_support::shutdown_signal()?.await;
    supervisor.shutdown().await;
    Ok(())
}
