//! The CNI error result: a code from the spec's table, a message and optional details, printed
//! as JSON on stdout with a non-zero exit status.
//!
//! Codes follow the CNI SPEC.md 1.1 "Error" section. The issue that asked for this crate listed
//! "2 incompatible version, 4 invalid config, 7 invalid env, 11 try again later"; that does not
//! match the spec (1 is the incompatible version, 2 an unsupported config field, 4 invalid
//! environment variables, 7 an invalid network config), and runtimes and tools act on the spec's
//! numbers, so the spec wins here. Codes 0-99 are reserved by the spec (50 and 51 are STATUS's
//! "not available" answers); 100 and up are free for plugins.

use serde::Serialize;

/// A well-known CNI error code (spec 1.1), or one of ours at 100 and above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 1: the config's `cniVersion` is not one we speak.
    IncompatibleVersion,
    /// 2: a network config field we do not support; the message names key and value.
    UnsupportedField,
    /// 3: container unknown; tells the runtime there is nothing to clean up.
    UnknownContainer,
    /// 4: a required `CNI_*` variable is missing or invalid; the message names it.
    InvalidEnvironment,
    /// 5: reading stdin or writing stdout failed.
    IoFailure,
    /// 6: stdin (or a daemon answer) is not the JSON we expect.
    DecodingFailure,
    /// 7: the network config decodes but is not valid.
    InvalidNetworkConfig,
    /// 11: transient; the runtime should retry (the daemon is not up yet, or is busy).
    TryAgainLater,
    /// 50: STATUS: the plugin cannot serve ADD now.
    NotAvailable,
    /// 51: STATUS: as 50, and existing containers may have limited connectivity.
    NotAvailableLimitedConnectivity,
    /// 100: a bug in the shim itself (it caught a panic), never expected.
    Internal,
}

impl ErrorCode {
    /// The number the spec assigns.
    pub fn number(self) -> u32 {
        match self {
            Self::IncompatibleVersion => 1,
            Self::UnsupportedField => 2,
            Self::UnknownContainer => 3,
            Self::InvalidEnvironment => 4,
            Self::IoFailure => 5,
            Self::DecodingFailure => 6,
            Self::InvalidNetworkConfig => 7,
            Self::TryAgainLater => 11,
            Self::NotAvailable => 50,
            Self::NotAvailableLimitedConnectivity => 51,
            Self::Internal => 100,
        }
    }
}

/// A failed CNI operation, as the runtime will see it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CNI error {}: {msg}{}", code.number(), if details.is_empty() { String::new() } else { format!(" ({details})") })]
pub struct CniError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// Short description.
    pub msg: String,
    /// Longer description; empty when there is nothing to add.
    pub details: String,
}

/// The JSON shape of an error result.
#[derive(Serialize)]
struct ErrorJson<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl CniError {
    /// An error with no details.
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// The same error with `details` set.
    #[must_use]
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// The spec's error JSON, labelled with `cni_version` (the config's version when known, so
    /// the runtime decodes it with the same rules as a result).
    pub fn to_json(&self, cni_version: &str) -> String {
        let json = ErrorJson {
            cni_version,
            code: self.code.number(),
            msg: &self.msg,
            details: &self.details,
        };
        // Serializing borrowed strings and a number cannot fail.
        serde_json::to_string(&json).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_spec_json_and_omits_empty_details() {
        let err = CniError::new(ErrorCode::TryAgainLater, "daemon down");
        assert_eq!(
            err.to_json("1.1.0"),
            r#"{"cniVersion":"1.1.0","code":11,"msg":"daemon down"}"#
        );
        let err = err.with_details("connect: No such file");
        assert_eq!(
            err.to_json("0.3.1"),
            r#"{"cniVersion":"0.3.1","code":11,"msg":"daemon down","details":"connect: No such file"}"#
        );
    }

    #[test]
    fn spec_numbers() {
        let table = [
            (ErrorCode::IncompatibleVersion, 1),
            (ErrorCode::UnsupportedField, 2),
            (ErrorCode::UnknownContainer, 3),
            (ErrorCode::InvalidEnvironment, 4),
            (ErrorCode::IoFailure, 5),
            (ErrorCode::DecodingFailure, 6),
            (ErrorCode::InvalidNetworkConfig, 7),
            (ErrorCode::TryAgainLater, 11),
            (ErrorCode::NotAvailable, 50),
            (ErrorCode::NotAvailableLimitedConnectivity, 51),
            (ErrorCode::Internal, 100),
        ];
        for (code, number) in table {
            assert_eq!(code.number(), number, "{code:?}");
        }
    }
}
