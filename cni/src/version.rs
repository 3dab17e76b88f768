//! CNI spec versions the shim speaks, and the VERSION reply.

use serde::{Deserialize, Serialize};

use crate::error::{CniError, ErrorCode};

/// A spec version we support. 0.1.0 and 0.2.0 predate the result shape with `interfaces` and
/// `ips`; Kube-OVN's own conflist says 0.3.1, so 0.3.0 is the oldest worth keeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    /// 0.3.0
    V0_3_0,
    /// 0.3.1
    V0_3_1,
    /// 0.4.0: adds CHECK and `prevResult` on DEL.
    V0_4_0,
    /// 1.0.0: drops `ips[].version`.
    V1_0_0,
    /// 1.1.0: adds STATUS, GC and `interfaces[].mtu`.
    V1_1_0,
}

/// Every supported version, oldest first (the order libcni prints them in).
pub const SUPPORTED: [CniVersion; 5] = [
    CniVersion::V0_3_0,
    CniVersion::V0_3_1,
    CniVersion::V0_4_0,
    CniVersion::V1_0_0,
    CniVersion::V1_1_0,
];

impl CniVersion {
    /// The newest version we speak, used when the caller did not say.
    pub const LATEST: Self = Self::V1_1_0;

    /// The version string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_3_0 => "0.3.0",
            Self::V0_3_1 => "0.3.1",
            Self::V0_4_0 => "0.4.0",
            Self::V1_0_0 => "1.0.0",
            Self::V1_1_0 => "1.1.0",
        }
    }

    /// Parses a `cniVersion`; code 1 for anything we do not speak, naming the field, with the
    /// list in details.
    pub fn parse(s: &str) -> Result<Self, CniError> {
        s.parse().map_err(|e: UnsupportedVersion| {
            CniError::new(ErrorCode::IncompatibleVersion, e.to_string())
                .with_details(format!("supported versions: {}", supported_list().join(", ")))
        })
    }
}

/// A `cniVersion` we do not speak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("incompatible CNI version: cniVersion {} is not one kube-ovn speaks ({})", shown(.0), supported_list().join(", "))]
pub struct UnsupportedVersion(pub String);

fn shown(version: &str) -> String {
    if version.is_empty() {
        "(none)".to_owned()
    } else {
        format!("{version:?}")
    }
}

impl std::str::FromStr for CniVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SUPPORTED
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnsupportedVersion(s.to_owned()))
    }
}

impl std::fmt::Display for CniVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn supported_list() -> Vec<&'static str> {
    SUPPORTED.iter().map(|v| v.as_str()).collect()
}

/// The VERSION answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionReply {
    /// Version of this output.
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// Every version we speak.
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<String>,
}

/// Answers VERSION. Since 1.0 the runtime may send `{"cniVersion": "..."}` on stdin; we answer
/// in that version when we speak it and in the latest otherwise, because the point of VERSION
/// is to let a runtime discover a mismatch, which an error would hide.
pub fn version_reply(stdin: &[u8]) -> VersionReply {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "cniVersion", default)]
        cni_version: String,
    }
    let asked = serde_json::from_slice::<Probe>(stdin)
        .ok()
        .and_then(|p| CniVersion::parse(&p.cni_version).ok())
        .unwrap_or(CniVersion::LATEST);
    VersionReply {
        cni_version: asked.as_str().to_owned(),
        supported_versions: supported_list().into_iter().map(str::to_owned).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_known_and_unknown() {
        assert_eq!(CniVersion::parse("0.3.1").unwrap(), CniVersion::V0_3_1);
        let err = CniVersion::parse("0.2.0").unwrap_err();
        assert_eq!(err.code, ErrorCode::IncompatibleVersion);
        assert!(err.details.contains("1.1.0"), "{err}");
        assert!(err.msg.contains(r#"cniVersion "0.2.0""#), "{err}");
        assert!(
            CniVersion::parse("")
                .unwrap_err()
                .msg
                .contains("cniVersion (none)")
        );
    }

    #[test]
    fn version_reply_follows_the_probe() {
        let r = version_reply(br#"{"cniVersion":"0.4.0"}"#);
        assert_eq!(r.cni_version, "0.4.0");
        assert_eq!(
            r.supported_versions,
            ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
        );
        assert_eq!(version_reply(b"").cni_version, "1.1.0");
        assert_eq!(version_reply(br#"{"cniVersion":"9.9.9"}"#).cni_version, "1.1.0");
    }
}
