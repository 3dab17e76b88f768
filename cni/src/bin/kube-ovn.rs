//! `kube-ovn`: the CNI plugin binary a container runtime runs from `/opt/cni/bin`.
//!
//! It takes no flags (the CNI protocol is environment plus stdin), forwards ADD, DEL, CHECK,
//! STATUS and GC to kube-ovn-daemon over its unix socket, answers VERSION itself, prints only
//! the result or the spec's error JSON on stdout, and logs to stderr, which runtimes keep.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use kube_ovn_cni::error::{CniError, ErrorCode};
use kube_ovn_cni::http::{self, HttpResponse};
use kube_ovn_cni::shim::{self, Transport, TransportError};
use kube_ovn_cni::version::CniVersion;

/// How long a write to the daemon may stall. Reads have no limit: an ADD waits on the
/// controller and on ovn-controller, and the runtime already bounds the whole call.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

struct UnixTransport;

impl Transport for UnixTransport {
    fn post(&mut self, socket: &Path, path: &str, body: &[u8]) -> Result<HttpResponse, TransportError> {
        let mut stream = UnixStream::connect(socket).map_err(|source| TransportError::Connect {
            socket: socket.to_owned(),
            source,
        })?;
        let io = |source| TransportError::Io {
            socket: socket.to_owned(),
            source,
        };
        stream.set_write_timeout(Some(WRITE_TIMEOUT)).map_err(io)?;
        stream.write_all(&http::encode_post(path, body)).map_err(io)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(io)?;
        Ok(http::parse_response(&raw)?)
    }
}

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    // Only the message crosses into the unwind guard (io::Error is not UnwindSafe).
    let read = std::io::stdin()
        .read_to_end(&mut stdin)
        .map_err(|e| e.to_string());
    // A panic must still leave the runtime a parseable error, not a Rust backtrace on stdout
    // (the default hook writes to stderr, which is where we want it).
    let outcome = std::panic::catch_unwind(|| {
        if let Err(e) = read {
            return shim::Outcome {
                cni_version: CniVersion::LATEST.as_str(),
                result: Err(CniError::new(ErrorCode::IoFailure, "cannot read stdin").with_details(e)),
                log: Vec::new(),
            };
        }
        shim::run(|name| std::env::var(name).ok(), &stdin, &mut UnixTransport)
    })
    .unwrap_or_else(|_| shim::Outcome {
        cni_version: CniVersion::LATEST.as_str(),
        result: Err(CniError::new(
            ErrorCode::Internal,
            "kube-ovn shim panicked; see its stderr",
        )),
        log: Vec::new(),
    });
    for line in &outcome.log {
        eprintln!("kube-ovn: {line}");
    }
    let (text, code) = match &outcome.result {
        Ok(Some(json)) => (Some(json.clone()), ExitCode::SUCCESS),
        Ok(None) => (None, ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("kube-ovn: {e}");
            (Some(e.to_json(outcome.cni_version)), ExitCode::FAILURE)
        }
    };
    if let Some(text) = text {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
            // Nowhere left to report it but stderr and the exit status.
            eprintln!("kube-ovn: cannot write to stdout");
            return ExitCode::FAILURE;
        }
    }
    code
}
