//! kube-ovn-pinger: network-quality probes from every node (pods, nodes, external address, DNS,
//! API server, OVS and ovn-controller) with Kube-OVN's metric names. `--mode=server` (the
//! DaemonSet) probes every `--interval` and serves `/metrics`; `--mode=job` (`kubectl ko
//! diagnose`) runs one round and exits with `--exit-code` when something failed.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use kube_ovn_pinger::config::{Config, Flags, Mode};
use kube_ovn_pinger::metrics::Metrics;
use kube_ovn_pinger::ovs::Databases;
use kube_ovn_pinger::probes;
use kube_ovn_pinger::round::{Peers, Prober};
use kube_ovn_support::Supervisor;
use kube_ovn_support::endpoints::{Endpoints, encode};

fn main() -> ExitCode {
    let flags = Flags::parse();
    flags.klog.init_logs();
    let config = match Config::from_flags(flags) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("kube-ovn-pinger: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kube-ovn-pinger: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "kube-ovn-pinger failed");
            eprintln!("kube-ovn-pinger: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything a round needs, owned, for the probe task.
struct State {
    config: Config,
    kube: kube::Client,
    peers: Peers,
    databases: Option<Databases>,
    metrics: Arc<Metrics>,
}

impl State {
    async fn round(&self) -> kube_ovn_pinger::round::Report {
        Prober {
            config: &self.config,
            kube: &self.kube,
            peers: &self.peers,
            databases: self.databases.as_ref(),
            metrics: &self.metrics,
        }
        .round()
        .await
    }
}

async fn run(config: Config) -> anyhow::Result<u8> {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), mode = ?config.flags.mode, "kube-ovn-pinger");
    let kube = kube_ovn_support::kube_client(config.flags.kubeconfig.as_deref()).await?;
    let peers = Peers::discover(&kube, &config)
        .await
        .map_err(anyhow::Error::msg)?;
    tracing::info!(selector = %peers.selector, namespace = %peers.namespace, "peers");
    let databases = if config.kube_ovn_mode() {
        let flags = &config.flags;
        Some(
            Databases::start(
                &flags.database_vswitch_socket_remote,
                &flags.database_vswitch_name,
                config.sb_remote.as_deref(),
                config.ovs_timeout,
            )
            .context("--database.vswitch.socket.remote or --ovn-sb-address")?,
        )
    } else {
        None
    };
    let state = Arc::new(State {
        config,
        kube,
        peers,
        databases,
        metrics: Arc::new(Metrics::new()),
    });
    let flags = &state.config.flags;
    if flags.mode == Mode::Job {
        let report = state.round().await;
        for failure in &report.failures {
            println!("failed: {failure}");
        }
        return Ok(report.exit_code(flags.exit_code));
    }

    let supervisor = Supervisor::new();
    let metrics = state.metrics.clone();
    // Ready as soon as it serves, as Kube-OVN's readiness probe (GET /metrics) has it: a pinger
    // whose probes fail is doing its job, and must stay behind the Service to be scraped.
    let mut endpoints = Endpoints::new(
        move || {
            let text = encode(metrics.registry());
            async move { text }
        },
        || Ok(()),
    )
    .supervised(&supervisor);
    if !flags.enable_metrics {
        endpoints = endpoints.without_metrics();
    }
    // Kube-OVN listens on every address: Prometheus and the kubelet's probes reach the pod IP.
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", flags.port))
        .await
        .with_context(|| format!("--port {}", flags.port))?;
    supervisor.spawn("metrics endpoint", async move {
        if let Err(e) = endpoints.serve(listener).await {
            tracing::error!(error = %e, "metrics endpoint");
        }
    });
    if flags.enable_verbose_conn_check {
        let tcp = tokio::net::TcpListener::bind(("0.0.0.0", flags.tcp_conn_check_port))
            .await
            .with_context(|| format!("--tcp-conn-check-port {}", flags.tcp_conn_check_port))?;
        let udp = tokio::net::UdpSocket::bind(("0.0.0.0", flags.udp_conn_check_port))
            .await
            .with_context(|| format!("--udp-conn-check-port {}", flags.udp_conn_check_port))?;
        supervisor.spawn("conn-check answerers", async move {
            if let Err(e) = probes::serve_conn_check(tcp, udp).await {
                tracing::error!(error = %e, "conn-check answerers");
            }
        });
    }
    let probing = state.clone();
    supervisor.spawn("probes", async move {
        loop {
            probing.round().await;
            tokio::time::sleep(probing.config.interval).await;
        }
    });
    kube_ovn_support::shutdown_signal()?.await;
    supervisor.shutdown().await;
    Ok(0)
}
