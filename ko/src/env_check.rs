//! `kubectl ko env-check`: each node's environment, from its kube-ovn-cni pod (host network,
//! host PID, the node's CNI directory), for what Kube-OVN's plugin checks (its image's
//! `env-check.sh`): other CNI configurations, `tcp_mtu_probing` off, `tcp_tw_recycle` on,
//! checksum errors, a `.com` DNS search domain, firewall or security agents running; and ours,
//! IPv4 forwarding (the node routes pod traffic). The node's facts are gathered by one
//! read-only shell script ([`SCRIPT`]) and judged here ([`judge`], pure).

use std::process::ExitCode;

use crate::kubectl;

/// Arguments of `kubectl ko env-check`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kubectl ko env-check\n\nWarnings are advice (exit 0); a node that cannot be checked fails (exit 1)."
)]
pub struct EnvCheckArgs {}

/// The conflist the node daemon installs (its `--cni-conf-name` default).
const OUR_CONFLIST: &str = "01-kube-ovn.conflist";

/// Prints each fact after a `### name` line; read-only, with the tools of our image.
pub const SCRIPT: &str = "\
echo '### cni'; ls -1 /etc/cni/net.d 2>/dev/null
echo '### tcp_mtu_probing'; cat /proc/sys/net/ipv4/tcp_mtu_probing 2>/dev/null
echo '### tcp_tw_recycle'; cat /proc/sys/net/ipv4/tcp_tw_recycle 2>/dev/null
echo '### ip_forward'; cat /proc/sys/net/ipv4/ip_forward 2>/dev/null
echo '### snmp'; cat /proc/net/snmp 2>/dev/null
echo '### resolv'; cat /etc/resolv.conf 2>/dev/null
echo '### processes'; cat /proc/[0-9]*/comm 2>/dev/null
true";

/// The text of section `name` of the script's output.
fn section<'a>(output: &'a str, name: &str) -> &'a str {
    let marker = format!("### {name}\n");
    let Some(start) = output.find(&marker).map(|i| i + marker.len()) else {
        return "";
    };
    let rest = &output[start..];
    rest.find("### ").map_or(rest, |end| &rest[..end])
}

/// Checksum errors counted by the kernel (`InCsumErrors` of `/proc/net/snmp`'s Ip/Tcp/Udp lines).
fn checksum_errors(snmp: &str) -> u64 {
    let lines: Vec<&str> = snmp.lines().collect();
    lines
        .windows(2)
        .filter_map(|pair| {
            let (header, values) = (pair[0], pair[1]);
            let (h_name, h_rest) = header.split_once(':')?;
            let (v_name, v_rest) = values.split_once(':')?;
            if h_name != v_name {
                return None;
            }
            let at = h_rest.split_whitespace().position(|f| f == "InCsumErrors")?;
            v_rest.split_whitespace().nth(at)?.parse::<u64>().ok()
        })
        .sum()
}

/// Process names that Kube-OVN's check flags as able to drop traffic.
const AGENTS: [&str; 6] = ["firewalld", "security", "qax", "safe", "defence", "vmsec"];

/// The warnings for one node's facts (the script's output).
pub fn judge(output: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    for file in section(output, "cni")
        .lines()
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        if file != OUR_CONFLIST {
            warnings.push(format!(
                "CNI: /etc/cni/net.d/{file} is not ours ({OUR_CONFLIST}): the runtime uses the first file by name; remove it if it is another network's"
            ));
        }
    }
    if section(output, "tcp_mtu_probing").trim() == "0" {
        warnings.push(
            "sysctl: net.ipv4.tcp_mtu_probing is 0: with a tunnel's smaller MTU, consider 1".to_owned(),
        );
    }
    if section(output, "tcp_tw_recycle").trim() == "1" {
        warnings.push(
            "sysctl: net.ipv4.tcp_tw_recycle is 1: it breaks NodePort Services behind NAT; set 0".to_owned(),
        );
    }
    if section(output, "ip_forward").trim() == "0" {
        warnings
            .push("sysctl: net.ipv4.ip_forward is 0: the node cannot route pod traffic; set 1".to_owned());
    }
    let errors = checksum_errors(section(output, "snmp"));
    if errors > 0 {
        warnings.push(format!(
            "checksum: the kernel counted {errors} InCsumErrors; if it grows, turn TX checksum offload off on the traffic NIC (ethtool -K <nic> tx off)"
        ));
    }
    for line in section(output, "resolv").lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("search") {
            for domain in words.filter(|d| d.trim_end_matches('.').to_ascii_lowercase().ends_with(".com")) {
                warnings.push(format!(
                    "DNS: search domain {domain} in /etc/resolv.conf: a wildcard record there answers for cluster names; make sure it is meant"
                ));
            }
        }
    }
    let mut seen = Vec::new();
    for name in section(output, "processes").lines().map(str::trim) {
        if AGENTS.iter().any(|a| name.contains(a)) && !seen.contains(&name) {
            seen.push(name);
            warnings.push(format!(
                "firewall: process {name} runs; make sure it does not drop traffic between nodes and pods"
            ));
        }
    }
    warnings
}

pub fn run(_args: &EnvCheckArgs) -> anyhow::Result<ExitCode> {
    let pods = kubectl::component_pods("kube-ovn-cni")?;
    if pods.is_empty() {
        anyhow::bail!(
            "no kube-ovn-cni pod (app=kube-ovn-cni) in namespace {}",
            kubectl::namespace()
        );
    }
    let mut failed = false;
    for pod in pods {
        println!("************************************************");
        println!("Environment check of node {} (pod {})", pod.node, pod.name);
        println!("************************************************");
        match kubectl::exec(&pod.name, "cni-server", &["sh", "-c", SCRIPT]) {
            Ok(output) => {
                let warnings = judge(&output);
                if warnings.is_empty() {
                    println!("no problems found");
                }
                for w in warnings {
                    println!("WARNING {w}");
                }
            }
            Err(e) => {
                failed = true;
                println!("ERROR the node could not be checked: {e:#}");
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives InCsumErrors\nIp: 1 64 100 0\nTcp: RtoAlgorithm InSegs InCsumErrors\nTcp: 1 500 3\nUdp: InDatagrams NoPorts InCsumErrors\nUdp: 10 0 4\n";

    fn facts(cni: &str, probing: &str, forward: &str, snmp: &str, resolv: &str, processes: &str) -> String {
        format!(
            "### cni\n{cni}### tcp_mtu_probing\n{probing}\n### tcp_tw_recycle\n### ip_forward\n{forward}\n### snmp\n{snmp}### resolv\n{resolv}### processes\n{processes}"
        )
    }

    #[test]
    fn a_clean_node_has_no_warnings() {
        let out = facts(
            "01-kube-ovn.conflist\n",
            "1",
            "1",
            "Tcp: InSegs InCsumErrors\nTcp: 5 0\n",
            "search cluster.local\nnameserver 10.96.0.10\n",
            "systemd\nkubelet\novs-vswitchd\n",
        );
        assert_eq!(judge(&out), Vec::<String>::new());
    }

    #[test]
    fn each_finding_is_named() {
        let out = facts(
            "01-kube-ovn.conflist\n10-flannel.conflist\n",
            "0",
            "0",
            SNMP,
            "search example.com cluster.local\n",
            "firewalld\nfirewalld\nsshd\n",
        );
        let warnings = judge(&out);
        let starts: Vec<&str> = warnings.iter().map(|w| w.split(':').next().unwrap()).collect();
        assert_eq!(
            starts,
            ["CNI", "sysctl", "sysctl", "checksum", "DNS", "firewall"],
            "{warnings:#?}"
        );
        assert!(warnings[0].contains("10-flannel.conflist"));
        assert!(warnings[3].contains("7 InCsumErrors"), "{}", warnings[3]);
        assert!(warnings[4].contains("example.com"));
    }

    /// The script itself, run by this machine's `sh` (what the node's `cni-server` runs): every
    /// section is there, the one-value ones hold a value, and the judge reads them.
    #[test]
    fn the_script_gathers_every_section_on_a_real_host() {
        let out = std::process::Command::new("sh")
            .args(["-c", SCRIPT])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        for name in [
            "cni",
            "tcp_mtu_probing",
            "tcp_tw_recycle",
            "ip_forward",
            "snmp",
            "resolv",
            "processes",
        ] {
            assert!(
                text.contains(&format!("### {name}\n")),
                "no section {name}: {text}"
            );
        }
        for name in ["tcp_mtu_probing", "ip_forward"] {
            let value = section(&text, name).trim();
            assert!(value.parse::<u8>().is_ok(), "{name} is {value:?}");
        }
        assert!(section(&text, "snmp").contains("InCsumErrors"));
        assert!(!section(&text, "processes").trim().is_empty());
        judge(&text);
    }

    #[test]
    fn checksum_errors_sum_the_columns_by_name() {
        assert_eq!(checksum_errors(SNMP), 7);
        assert_eq!(checksum_errors(""), 0);
    }
}
