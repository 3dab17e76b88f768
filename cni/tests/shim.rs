//! The `kube-ovn` binary driven exactly as a container runtime drives it: a clean environment
//! with `CNI_*` variables, the network config on stdin, stdout parsed as the CNI result or
//! error. A fake daemon on a unix socket in a temp dir stands in for kube-ovn-daemon.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use kube_ovn_lab::cni_runtime as runtime;

const SHIM: &str = env!("CARGO_BIN_EXE_kube-ovn");
/// How long the fake daemon waits for the shim's connection and request.
const FAKE_DAEMON_WAIT: Duration = Duration::from_secs(10);

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// stdout as exactly one JSON document (nothing before or after it).
    fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("stdout is not one JSON value: {self:?}"))
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {} stdout {:?} stderr {:?}",
            self.status, self.stdout, self.stderr
        )
    }
}

fn run_shim(env: &[(&str, &str)], stdin: &str) -> Result<Run> {
    let mut child = Command::new(SHIM)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(stdin.as_bytes())?;
    let out = runtime::output_within(child, Duration::from_secs(30), "the shim")?;
    let run = Run {
        status: out.status.code().context("killed by a signal")?,
        stdout: String::from_utf8(out.stdout)?,
        stderr: String::from_utf8(out.stderr)?,
    };
    // A panic would print "panicked at" on stderr even though stdout stays clean.
    if run.stderr.contains("panicked") {
        bail!("the shim panicked: {run:?}");
    }
    Ok(run)
}

fn add_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "0123456789abcdef"),
        ("CNI_NETNS", "/var/run/netns/cni-test"),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=0123456789abcdef",
        ),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn config(version: &str, socket: &Path) -> String {
    json!({
        "cniVersion": version,
        "name": "kube-ovn",
        "type": "kube-ovn",
        "server_socket": socket,
    })
    .to_string()
}

/// A daemon that answers each of `answers` (status line + body) to one connection, in order,
/// and hands back what it was sent.
struct FakeDaemon {
    socket: PathBuf,
    served: mpsc::Receiver<Result<Vec<(String, Value)>>>,
}

impl FakeDaemon {
    fn start(dir: &Path, answers: Vec<(&'static str, String)>) -> Result<Self> {
        let socket = dir.join("kube-ovn-daemon.sock");
        let listener = UnixListener::bind(&socket)?;
        let (done, served) = mpsc::channel();
        std::thread::spawn(move || {
            let serve = || -> Result<Vec<(String, Value)>> {
                let mut seen = Vec::new();
                for (status, body) in answers {
                    let (stream, _) = listener.accept()?;
                    stream.set_read_timeout(Some(FAKE_DAEMON_WAIT))?;
                    let mut reader = BufReader::new(stream);
                    let mut request_line = String::new();
                    reader.read_line(&mut request_line)?;
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line)?;
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse()?;
                        }
                    }
                    let mut request_body = vec![0; length];
                    reader.read_exact(&mut request_body)?;
                    seen.push((
                        request_line.trim().to_owned(),
                        serde_json::from_slice(&request_body)?,
                    ));
                    let mut stream = reader.into_inner();
                    write!(
                        stream,
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )?;
                }
                Ok(seen)
            };
            let _ = done.send(serve());
        });
        Ok(Self { socket, served })
    }

    /// What the daemon was sent, once every answer went out; an error if the shim did not
    /// make every expected request within [`FAKE_DAEMON_WAIT`] (the thread then stays blocked
    /// in `accept` until the test process ends).
    fn requests(self) -> Result<Vec<(String, Value)>> {
        self.served
            .recv_timeout(FAKE_DAEMON_WAIT)
            .context("the fake daemon did not get every expected request")?
    }
}

fn assert_error(run: &Run, code: u64, msg_part: &str) -> Result<()> {
    assert_eq!(run.status, 1, "{run:?}");
    let got = run.json()?;
    assert_eq!(got["code"], code, "{run:?}");
    let msg = got["msg"].as_str().context("msg")?;
    assert!(msg.contains(msg_part), "msg {msg:?} lacks {msg_part:?}: {run:?}");
    assert!(got["cniVersion"].is_string(), "{run:?}");
    Ok(())
}

#[test]
fn version_lists_every_supported_version() -> Result<()> {
    let run = run_shim(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#)?;
    assert_eq!(run.status, 0, "{run:?}");
    assert_eq!(
        run.json()?,
        json!({"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    // Runtimes may also send nothing at all.
    let run = run_shim(&[("CNI_COMMAND", "VERSION")], "")?;
    assert_eq!(run.json()?["cniVersion"], "1.1.0");
    Ok(())
}

/// (what, environment, stdin, expected code, part of the expected msg)
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u64, &'a str);

#[test]
fn bad_inputs_give_spec_errors() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let absent = dir.path().join("absent.sock");
    let good = config("1.0.0", &absent);
    let full = add_env();
    let without =
        |name: &str| -> Vec<(&str, &str)> { full.iter().copied().filter(|(k, _)| *k != name).collect() };
    let with = |name: &'static str, value: &'static str| -> Vec<(&str, &str)> {
        full.iter()
            .copied()
            .map(|(k, v)| if k == name { (k, value) } else { (k, v) })
            .collect()
    };
    let cases: Vec<Case> = vec![
        (
            "no CNI_COMMAND",
            without("CNI_COMMAND"),
            good.clone(),
            4,
            "CNI_COMMAND",
        ),
        (
            "unknown command",
            with("CNI_COMMAND", "PLUG"),
            good.clone(),
            4,
            "CNI_COMMAND",
        ),
        (
            "no CNI_NETNS on ADD",
            without("CNI_NETNS"),
            good.clone(),
            4,
            "CNI_NETNS",
        ),
        (
            "no CNI_CONTAINERID",
            without("CNI_CONTAINERID"),
            good.clone(),
            4,
            "CNI_CONTAINERID",
        ),
        (
            "no pod name",
            with("CNI_ARGS", "K8S_POD_NAMESPACE=default"),
            good.clone(),
            4,
            "K8S_POD_NAME",
        ),
        (
            "malformed CNI_ARGS",
            with("CNI_ARGS", "K8S_POD_NAME"),
            good.clone(),
            4,
            "CNI_ARGS",
        ),
        (
            "malformed JSON",
            full.clone(),
            "{\"cniVersion\":".into(),
            6,
            "not JSON",
        ),
        ("empty stdin", full.clone(), String::new(), 6, "not JSON"),
        (
            "unknown cniVersion",
            full.clone(),
            config("0.2.0", &absent),
            1,
            r#"cniVersion "0.2.0""#,
        ),
        (
            "not our type",
            full.clone(),
            json!({"cniVersion":"1.0.0","name":"n","type":"bridge"}).to_string(),
            7,
            "bridge",
        ),
        (
            "CHECK on 0.3.1",
            with("CNI_COMMAND", "CHECK"),
            config("0.3.1", &absent),
            1,
            "CHECK",
        ),
        (
            "daemon socket absent",
            full.clone(),
            good.clone(),
            11,
            "absent.sock",
        ),
        (
            "STATUS with the daemon absent",
            vec![("CNI_COMMAND", "STATUS")],
            config("1.1.0", &absent),
            50,
            "absent.sock",
        ),
    ];
    for (what, env, stdin, code, msg_part) in cases {
        let run = run_shim(&env, &stdin).with_context(|| what.to_owned())?;
        assert_error(&run, code, msg_part).with_context(|| what.to_owned())?;
    }
    Ok(())
}

#[test]
fn error_is_labelled_with_the_config_version() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let run = run_shim(
        &[("CNI_COMMAND", "ADD")],
        &config("0.3.1", &dir.path().join("x.sock")),
    )?;
    assert_error(&run, 4, "CNI_CONTAINERID")?;
    assert_eq!(run.json()?["cniVersion"], "0.3.1");
    Ok(())
}

#[test]
fn daemon_500_carries_the_daemons_message() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = FakeDaemon::start(
        dir.path(),
        vec![(
            "500 Internal Server Error",
            json!({"error": "no address allocated to pod default/web-0, see kube-ovn-controller logs"})
                .to_string(),
        )],
    )?;
    let run = run_shim(&add_env(), &config("1.0.0", &daemon.socket))?;
    assert_error(&run, 11, "no address allocated to pod default/web-0")?;
    assert!(
        run.json()?["details"]
            .as_str()
            .context("details")?
            .contains("500"),
        "{run:?}"
    );
    daemon.requests()?;
    Ok(())
}

#[test]
fn daemon_400_is_an_invalid_config() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = FakeDaemon::start(
        dir.path(),
        vec![(
            "400 Bad Request",
            json!({"error": "provider x is not bound to any subnet"}).to_string(),
        )],
    )?;
    let run = run_shim(&add_env(), &config("1.0.0", &daemon.socket))?;
    assert_error(&run, 7, "not bound to any subnet")?;
    daemon.requests()?;
    Ok(())
}

#[test]
fn add_and_del_against_a_fake_daemon() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let answer = json!({
        "ips": [{"protocol": "IPv4", "ip": "10.16.0.5", "cidr": "10.16.0.0/16", "gateway": "10.16.0.1"}],
        "mac_address": "00:00:00:aa:bb:cc",
        "routes": null,
        "mtu": 1400,
        "nicname": "eth0",
        "dns": {},
        "error": ""
    });
    let daemon = FakeDaemon::start(
        dir.path(),
        vec![("200 OK", answer.to_string()), ("204 No Content", String::new())],
    )?;
    let conf = config("1.1.0", &daemon.socket);
    let run = run_shim(&add_env(), &conf)?;
    assert_eq!(run.status, 0, "{run:?}");
    assert_eq!(
        run.json()?,
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "00:00:00:aa:bb:cc", "mtu": 1400, "sandbox": "/var/run/netns/cni-test"}],
            "ips": [{"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.16.0.1"}],
            "dns": {}
        })
    );
    let mut del_env = add_env();
    del_env[0] = ("CNI_COMMAND", "DEL");
    let run = run_shim(&del_env, &conf)?;
    assert_eq!(run.status, 0, "{run:?}");
    assert_eq!(run.stdout, "", "DEL prints nothing on success");

    let requests = daemon.requests()?;
    assert_eq!(requests[0].0, "POST /api/v1/add HTTP/1.1");
    assert_eq!(requests[1].0, "POST /api/v1/del HTTP/1.1");
    let sent = &requests[0].1;
    for (key, want) in [
        ("cni_type", "kube-ovn"),
        ("pod_name", "web-0"),
        ("pod_namespace", "default"),
        ("container_id", "0123456789abcdef"),
        ("net_ns", "/var/run/netns/cni-test"),
        ("if_name", "eth0"),
        ("provider", "ovn"),
    ] {
        assert_eq!(sent[key], want, "{key} in {sent}");
    }
    Ok(())
}

/// The binary answers ADD in the version the config asks for, for every version it speaks:
/// `ips[].version` up to 0.4.0, `interfaces[].mtu` from 1.1.0 only.
#[test]
fn add_answers_in_every_config_version() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let answer = json!({
        "ips": [{"protocol": "IPv4", "ip": "10.16.0.5", "cidr": "10.16.0.0/16", "gateway": "10.16.0.1"}],
        "mac_address": "00:00:00:aa:bb:cc", "routes": null, "mtu": 1400, "nicname": "eth0",
        "dns": {}, "error": ""
    })
    .to_string();
    let versions = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    let daemon = FakeDaemon::start(
        dir.path(),
        versions.iter().map(|_| ("200 OK", answer.clone())).collect(),
    )?;
    for version in versions {
        let run = run_shim(&add_env(), &config(version, &daemon.socket))?;
        assert_eq!(run.status, 0, "{version}: {run:?}");
        let got = run.json()?;
        assert_eq!(got["cniVersion"], version);
        let ip = &got["ips"][0];
        assert_eq!(
            (&ip["address"], &ip["interface"]),
            (&json!("10.16.0.5/16"), &json!(0))
        );
        let has_ip_version = ip.get("version").is_some();
        assert_eq!(has_ip_version, version.starts_with("0."), "{version}: {got}");
        if has_ip_version {
            assert_eq!(ip["version"], "4");
        }
        let mtu = got["interfaces"][0].get("mtu").cloned();
        assert_eq!(mtu, (version == "1.1.0").then(|| json!(1400)), "{version}: {got}");
    }
    assert_eq!(daemon.requests()?.len(), versions.len());
    Ok(())
}

#[test]
fn check_against_a_daemon_without_the_endpoint_passes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = FakeDaemon::start(dir.path(), vec![("404 Not Found", "{}".into())])?;
    let mut env = add_env();
    env[0] = ("CNI_COMMAND", "CHECK");
    let run = run_shim(&env, &config("1.0.0", &daemon.socket))?;
    assert_eq!((run.status, run.stdout.as_str()), (0, ""), "{run:?}");
    assert_eq!(daemon.requests()?[0].0, "POST /api/v1/check HTTP/1.1");
    Ok(())
}

/// The bound every plugin run in these tests has: a process that never exits is killed and
/// reported, not waited for.
#[test]
fn a_plugin_that_hangs_is_killed_at_the_bound() -> Result<()> {
    let child = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let err = runtime::output_within(child, Duration::from_millis(200), "sleep 30").unwrap_err();
    assert!(err.to_string().contains("did not finish within"), "{err}");
    Ok(())
}
