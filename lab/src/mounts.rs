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
/// its user does). How many there were. A mount that went with another one (a peer's unmount
/// propagates to it under shared propagation, a lazy unmount takes the mounts under it) is
/// not an error: only one that is still there after its `umount` failed is.
pub fn unmount_under(dir: &Path) -> Result<usize, CommandError> {
    let mounts = mounts_under(dir);
    for m in &mounts {
        if let Err(e) = run("umount", &["--lazy", &m.path.display().to_string()])
            && mounts_under(&m.path).iter().any(|left| left.path == m.path)
        {
            return Err(e);
        }
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

    /// `down` after containerd left mounts behind: `b` is a peer of `a` (a bind of a shared
    /// mount), so unmounting `a/m` takes `b/m` with it before its own turn comes. Needs root,
    /// like every lab test; the directory is made a private mount first so nothing propagates
    /// out of it.
    #[test]
    fn a_mount_that_went_with_its_peer_is_not_an_error() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let d = dir.path().to_owned();
        let path = |p: &str| d.join(p).display().to_string();
        let mount = |args: &[&str]| run("mount", args).expect("mount (the test needs root)");
        mount(&["--bind", &path(""), &path("")]);
        mount(&["--make-private", &path("")]);
        for sub in ["a", "b"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        mount(&["-t", "tmpfs", "lab-test", &path("a")]);
        mount(&["--make-shared", &path("a")]);
        mount(&["--bind", &path("a"), &path("b")]);
        std::fs::create_dir(d.join("a/m")).unwrap();
        mount(&["-t", "tmpfs", "lab-test", &path("a/m")]);
        let before = mounts_under(&d);
        assert!(
            before.iter().any(|m| m.path == d.join("b/m")),
            "the peer's mount propagated: {before:?}"
        );
        assert_eq!(unmount_under(&d).expect("unmounting all of it"), before.len());
        assert_eq!(mounts_under(&d), []);
    }
}
