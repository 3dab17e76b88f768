//! `kube-ovn-speaker`: flags with Kube-OVN's names, JSON logs, then the speaker; or
//! `kube-ovn-speaker routes ...`, which prints what a running speaker sends one peer.

use anyhow::Context as _;
use kube_ovn_dataplane::Netns;
use kube_ovn_speaker::config::{Command, Flags};
use kube_ovn_speaker::run::{self, BgpPlace};
use kube_ovn_support::kube_ovn_flags;

fn main() -> anyhow::Result<()> {
    // Kube-OVN's speaker flags we do not implement, and klog's, are accepted (speaker.yaml passes
    // `--logtostderr=false --log_file=…`) and named once as ignored where they have no effect.
    let (flags, ignored) = kube_ovn_flags::parse::<Flags>(kube_ovn_flags::tables::SPEAKER);
    if let Some(Command::Routes(args)) = &flags.command {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let text = runtime.block_on(run::routes_command::run(args, flags.kubeconfig.as_deref()))?;
        print!("{text}");
        return Ok(());
    }
    flags.klog.init_logs_with("kube-ovn-speaker", &ignored);
    let config = flags.validate()?;
    // BGP's sockets must be made by threads inside the node's namespace: a runtime built on a
    // thread that entered it spawns its workers there (threads inherit the namespace).
    let netns = if config.flags.bgp_netns.is_empty() {
        Netns::current()?
    } else {
        Netns::open(&config.flags.bgp_netns).context("--bgp-netns")?
    };
    let bgp_runtime = netns
        .run(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("bgp")
                .enable_all()
                .build()
        })?
        .context("the BGP runtime")?;
    let main_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let place = BgpPlace {
        runtime: bgp_runtime.handle().clone(),
        netns,
    };
    main_runtime.block_on(async move {
        let kube = kube_ovn_support::kube_client(config.flags.kubeconfig.as_deref()).await?;
        let shutdown = kube_ovn_support::shutdown_signal().context("installing the SIGTERM handler")?;
        run::run(config, kube, place, shutdown).await?;
        anyhow::Ok(())
    })?;
    bgp_runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(())
}
