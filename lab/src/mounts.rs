//! The mounts under a directory, from `/proc/self/mountinfo`, and their removal: the lab's
//! shared directory ([`crate::cluster::containerd`]), `down`, and the image builder's rootfs
//! ([`crate::runtime::component_image`]) all need them. Depends only on `kube_ovn_testkit::run`.

use std::path::{Path, PathBuf};

use kube_ovn_testkit::{CommandError, run};

/// A mount, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    pub fstype: String,
}

/// The mounts at or under `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(dir: &Path) -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<Mount> = parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.path.starts_with(dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
    mounts
}

/// Mount points and filesystem types of `/proc/<pid>/mountinfo` lines (field 5, and the first
/// field after ` - `), with the kernel's octal escapes (`\040` for a space) decoded.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let path = head.split(' ').nth(4)?;
            let fstype = tail.split(' ').next()?;
            Some(Mount {
                path: PathBuf::from(unescape(path)),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        if let Some(byte) = code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            out.push(char::from(byte));
            rest = &rest[at + 4..];
        } else {
            out.push('\\');
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// Unmounts everything at or under `dir`, deepest first (lazily: a mount still in use goes once
/// its user does). How many there were.
pub fn unmount_under(dir: &Path) -> Result<usize, CommandError> {
    let mounts = mounts_under(dir);
    for m in &mounts {
        run("umount", &["--lazy", &m.path.display().to_string()])?;
    }
    Ok(mounts.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_paths_and_types() {
        let text = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 36 0:4 net:[4026532] /lab/x/state/netns/cni-1 rw shared:5 - nsfs nsfs rw\n\
                    garbage\n";
        assert_eq!(
            parse_mountinfo(text),
            [
                Mount {
                    path: "/mnt/a b".into(),
                    fstype: "ext3".into()
                },
                Mount {
                    path: "/lab/x/state/netns/cni-1".into(),
                    fstype: "nsfs".into()
                }
            ]
        );
        assert_eq!(unescape("a\\134b\\x"), "a\\b\\x");
    }
}
