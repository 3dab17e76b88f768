//! Host veth names and the pod interface names ADD accepts (no I/O). The host end of a pod's
//! veth is also its OVS port and interface name, so two NICs on a node must never share one:
//! a second ADD under a name in use replaces the first NIC's veth and port. Every name here is
//! unique per (container ID, interface name) and fits Linux's IFNAMSIZ.

/// Linux interface names hold at most 15 bytes (IFNAMSIZ - 1).
const IFNAME_MAX: usize = 15;

/// Why a pod interface name (`CNI_IFNAME`) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("interface name {name:?} (CNI_IFNAME) {problem}")]
pub struct IfnameError {
    /// The name as requested.
    pub name: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// Checks a pod interface name before anything is made: Linux's rules (at most 15 bytes, not
/// `.` or `..`, no `/`, `:` or whitespace — `dev_valid_name`, and the CNI spec's for
/// `CNI_IFNAME`), and ASCII only, which Linux allows but nothing in Kubernetes needs and which
/// tools and our own names handle badly.
pub fn check_ifname(name: &str) -> Result<(), IfnameError> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.len() > IFNAME_MAX {
        "is longer than 15 bytes (Linux's IFNAMSIZ)"
    } else if !name.is_ascii() {
        "is not ASCII"
    } else if name == "." || name == ".." {
        "must not be . or .."
    } else if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b.is_ascii_control())
    {
        "must not contain /, :, whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(IfnameError {
        name: name.to_owned(),
        problem,
    })
}

/// The host end of a pod's veth (also its OVS port and interface name), unique on the node
/// for every (container ID, interface name) and at most 15 bytes; never panics, whatever the
/// input (ADD checks the interface name first with [`check_ifname`]; DEL and GC only look names
/// up).
///
/// - `eth0` of a container whose ID starts with 12 lowercase hex digits (every CRI runtime's
///   IDs are random 256-bit hex) keeps Kube-OVN's name, `<id[:12]>_h`: those 48 random bits
///   already tell containers apart, and the name stays what `crictl ps` shows and what a
///   node upgraded from Kube-OVN has.
/// - Every other NIC is `<id[:5]>_<hash>_h`, `hash` being 7 hex digits of a hash of the whole
///   container ID and the interface name. Deviation from Kube-OVN, whose
///   `<id[:12-len(ifname)]>_<ifname>_h` keeps fewer ID characters the longer the interface
///   name: none for KubeVirt's 14-byte `pod<11 hex>` secondary interfaces (named from the
///   network alone), so two VMs on one network got one host veth and the second ADD took the
///   first VM's port away. The `_` after at most 5 characters keeps these names apart from
///   the `eth0` ones (whose first 12 characters hold no `_`).
pub fn host_nic_name(container_id: &str, ifname: &str) -> String {
    if ifname == "eth0"
        && container_id.len() >= 12
        && container_id.as_bytes()[..12]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return format!("{}_h", &container_id[..12]);
    }
    let prefix: String = container_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .collect();
    format!("{prefix}_{:07x}_h", name_hash(container_id, ifname) >> 36)
}

/// The host veth name this daemon gave before names carried a hash (Kube-OVN's shape, cut to
/// 15 bytes): GC keeps those of live sandboxes too, so a node upgraded with pods running does
/// not remove their secondary NICs' ports. `None` when it equals [`host_nic_name`].
pub fn legacy_host_nic_name(container_id: &str, ifname: &str) -> Option<String> {
    let id: String = container_id.chars().filter(char::is_ascii_alphanumeric).collect();
    let legacy = if ifname == "eth0" {
        format!("{}_h", take(&id, 12))
    } else {
        let keep = 12usize.saturating_sub(ifname.len());
        let name = format!("{}_{}_h", take(&id, keep), ifname);
        if name.len() <= IFNAME_MAX {
            name
        } else {
            let room = IFNAME_MAX.saturating_sub(keep + 3);
            format!("{}_{}_h", take(&id, keep), take(ifname, room))
        }
    };
    (legacy != host_nic_name(container_id, ifname)).then_some(legacy)
}

/// At most `n` bytes of `text`, cut at a character boundary.
fn take(text: &str, n: usize) -> &str {
    let mut end = text.len().min(n);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// 64-bit FNV-1a of the container ID, a NUL (which neither may contain, so the pair is
/// unambiguous) and the interface name. Written out rather than `std`'s hasher, whose output
/// may change between Rust releases: DEL and GC recompute the name from the same inputs, maybe
/// in a newer daemon.
fn name_hash(container_id: &str, ifname: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    container_id
        .bytes()
        .chain([0])
        .chain(ifname.bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A containerd sandbox ID (64 lowercase hex digits).
    const SANDBOX_A: &str = "3f2a9c0e7b41d5a8c6e90f1b2d3c4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f";
    const SANDBOX_B: &str = "3f2a9c0e7b4200aa11bb22cc33dd44ee55ff66778899aabbccddeeff00112233";

    #[test]
    fn eth0_keeps_kube_ovns_name() {
        assert_eq!(host_nic_name(SANDBOX_A, "eth0"), "3f2a9c0e7b41_h");
        assert_eq!(legacy_host_nic_name(SANDBOX_A, "eth0"), None);
    }

    #[test]
    fn kubevirt_secondary_nics_of_two_vms_on_one_network_get_their_own_veth() {
        // KubeVirt names a secondary interface `pod` + 11 hex digits of sha256(network name):
        // both VMs' launcher pods on network `tenant-net` have the same one.
        let ifname = "podb1e4f6c8a1f";
        let a = host_nic_name(SANDBOX_A, ifname);
        let b = host_nic_name(SANDBOX_B, ifname);
        assert_ne!(a, b);
        // Before: both were `_podb1e4f6c8a_h`, no container ID left.
        assert_eq!(
            legacy_host_nic_name(SANDBOX_A, ifname).as_deref(),
            Some("_podb1e4f6c8a_h")
        );
        assert_eq!(
            legacy_host_nic_name(SANDBOX_B, ifname).as_deref(),
            Some("_podb1e4f6c8a_h")
        );
        for name in [&a, &b] {
            assert!(name.len() <= IFNAME_MAX && check_ifname(name).is_ok(), "{name}");
            assert!(name.starts_with("3f2a9_") && name.ends_with("_h"), "{name}");
        }
        // The ordinal scheme of older KubeVirt (`net1`, `net2`) and a pod's second NIC.
        let names: std::collections::BTreeSet<String> = [
            host_nic_name(SANDBOX_A, "eth0"),
            host_nic_name(SANDBOX_A, "net1"),
            host_nic_name(SANDBOX_A, "net2"),
            host_nic_name(SANDBOX_B, "net1"),
            host_nic_name(SANDBOX_A, ifname),
            host_nic_name(SANDBOX_B, ifname),
        ]
        .into();
        assert_eq!(names.len(), 6, "{names:?}");
    }

    #[test]
    fn names_are_stable_across_releases() {
        // DEL and GC of a newer daemon must find what an older one made: pinned values
        // (computed independently with a few lines of Python of FNV-1a).
        assert_eq!(host_nic_name(SANDBOX_A, "net1"), "3f2a9_df9e0f3_h");
        assert_eq!(host_nic_name(SANDBOX_A, "podb1e4f6c8a1f"), "3f2a9_8a71e57_h");
        assert_eq!(host_nic_name("abc", "eth0"), "abc_540c4ae_h");
    }

    #[test]
    fn any_input_gives_a_short_name_and_no_panic() {
        for (id, ifname) in [
            ("", ""),
            ("abc", "eth0"),
            ("ABCDEF0123456789", "eth0"),
            ("c-1.x_y", "net1"),
            (SANDBOX_A, "aéééééé"),
            (SANDBOX_A, "ééééééééééééééééé"),
            ("ééééééééééééé", "ethé"),
        ] {
            let name = host_nic_name(id, ifname);
            assert!(
                name.len() <= IFNAME_MAX && name.is_ascii(),
                "{id:?} {ifname:?}: {name}"
            );
            if let Some(legacy) = legacy_host_nic_name(id, ifname) {
                assert!(legacy.len() <= IFNAME_MAX, "{legacy}");
            }
        }
        // Different IDs that read the same once filtered stay apart.
        assert_ne!(host_nic_name("abc-1", "eth0"), host_nic_name("abc1", "eth0"));
    }

    #[test]
    fn interface_names_linux_or_we_refuse_are_errors_naming_the_problem() {
        for ok in ["eth0", "net1", "podb1e4f6c8a1f", "a23456789012345", "veth-x_y.1"] {
            assert_eq!(check_ifname(ok), Ok(()), "{ok}");
        }
        for (bad, problem) in [
            ("", "is empty"),
            ("a234567890123456", "is longer than 15 bytes (Linux's IFNAMSIZ)"),
            ("aéééééé", "is not ASCII"),
            ("ethé", "is not ASCII"),
            (".", "must not be . or .."),
            ("..", "must not be . or .."),
            ("a/b", "must not contain /, :, whitespace or control characters"),
            (
                "eth0:1",
                "must not contain /, :, whitespace or control characters",
            ),
            ("eth 0", "must not contain /, :, whitespace or control characters"),
            (
                "eth\t0",
                "must not contain /, :, whitespace or control characters",
            ),
        ] {
            let err = check_ifname(bad).unwrap_err();
            assert_eq!(err.problem, problem, "{bad:?}");
            assert!(err.to_string().contains("CNI_IFNAME"), "{err}");
        }
    }
}
