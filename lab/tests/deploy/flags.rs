//! The command lines Kubernetes would run from deploy/'s pod specs, parsed with each binary's
//! own `Flags` (clap) and checked with its `validate()`: a misspelt flag or a bad value stops the
//! test as it would stop the binary, and so does a `$(VAR)` that names no variable.
//!
//! The kubelet's rules, as far as they matter here: `$(VAR)` in args expands from the container's
//! env (earlier entries) and the Service variables of the pod's namespace (unless
//! `enableServiceLinks: false`); an unknown `$(VAR)` stays as written; `$$` is a `$`. Values from
//! the downward API get placeholders of the right shape. A process also reads its flags from the
//! environment (every flag has a variable), so each variable the container gets that is a flag's
//! is added as that flag unless the args give it.

use std::collections::BTreeMap;

use clap::{CommandFactory, Parser};
use serde_json::Value;

/// The binaries whose flags are checked, by the command's file name.
const BINARIES: &[&str] = &[
    "kube-ovn-controller",
    "kube-ovn-daemon",
    "kube-ovn-speaker",
    "kube-ovn-monitor",
];

pub fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.as_str().expect("args are strings").to_owned())
        .collect()
}

/// The downward API field an env var comes from.
pub fn env_field<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?
        .pointer("/valueFrom/fieldRef/fieldPath")?
        .as_str()
}

/// A container running one of [`BINARIES`]: its workload, the binary and the command line the
/// kubelet would start (variables expanded, flag variables added as flags).
pub struct CommandLine {
    pub workload: String,
    pub binary: String,
    pub argv: Vec<String>,
}

/// The command line of every container that runs one of [`BINARIES`].
pub fn command_lines(docs: &[Value]) -> Result<Vec<CommandLine>, String> {
    let mut out = Vec::new();
    for doc in docs {
        if !matches!(
            doc["kind"].as_str(),
            Some("Deployment" | "DaemonSet" | "StatefulSet")
        ) {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        let spec = &doc["spec"]["template"]["spec"];
        for c in spec["containers"].as_array().into_iter().flatten() {
            let Some(binary) = c["command"][0]
                .as_str()
                .and_then(|cmd| cmd.rsplit('/').next())
                .filter(|b| BINARIES.contains(b))
            else {
                continue;
            };
            let links = spec["enableServiceLinks"].as_bool() != Some(false);
            let env = environment(docs, ns, c, links).map_err(|e| format!("{name}: {e}"))?;
            let argv = command_line(binary, &args(c), &env);
            // Kubernetes passes an unknown `$(VAR)` on as written; a flag value holding one is a
            // mistake here even where the binary would take the text (a host name, say).
            if let Some(a) = argv.iter().find(|a| a.contains("$(")) {
                return Err(format!(
                    "{name}: {binary}: {a:?} names a variable the container does not have"
                ));
            }
            out.push(CommandLine {
                workload: name.to_owned(),
                binary: binary.to_owned(),
                argv,
            });
        }
    }
    Ok(out)
}

/// Checks every container that runs one of [`BINARIES`]; the names of their workloads, sorted.
pub fn check_all(docs: &[Value]) -> Result<Vec<String>, String> {
    let mut checked = Vec::new();
    for line in command_lines(docs)? {
        parse(&line.binary, &line.argv).map_err(|e| {
            format!(
                "{}: {} {}: {e}",
                line.workload,
                line.binary,
                line.argv[1..].join(" ")
            )
        })?;
        checked.push(line.workload);
    }
    checked.sort();
    Ok(checked)
}

/// The variables the container's process gets, in the order they are defined.
fn environment(
    docs: &[Value],
    ns: &str,
    c: &Value,
    service_links: bool,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    // `kubernetes` in default is always there; the rest are the pod namespace's Services.
    env.extend(service_variables(
        "kubernetes",
        "10.96.0.1",
        &[(443, "https", "TCP")],
    ));
    if service_links {
        let services = docs.iter().filter(|d| {
            d["kind"] == "Service" && d["metadata"]["namespace"].as_str().unwrap_or("default") == ns
        });
        for (i, svc) in services.enumerate() {
            let ports: Vec<(u64, &str, &str)> = svc["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["port"].as_u64().unwrap_or_default(),
                        p["name"].as_str().unwrap_or_default(),
                        p["protocol"].as_str().unwrap_or("TCP"),
                    )
                })
                .collect();
            let ip = format!("10.96.1.{}", i + 1);
            env.extend(service_variables(
                svc["metadata"]["name"].as_str().unwrap_or_default(),
                &ip,
                &ports,
            ));
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"]
            .as_str()
            .ok_or("an env entry without a name")?
            .to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            Some(expand(v, &env))
        } else if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
            Some(downward(path).ok_or_else(|| format!("env {name}: fieldRef {path} is not one we know"))?)
        } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            let (map, key) = (
                r["name"].as_str().unwrap_or_default(),
                r["key"].as_str().unwrap_or_default(),
            );
            let found = docs
                .iter()
                .find(|d| {
                    d["kind"] == "ConfigMap"
                        && d["metadata"]["name"] == map
                        && d["metadata"]["namespace"].as_str().unwrap_or("default") == ns
                })
                .and_then(|d| d["data"][key].as_str());
            match (found, r["optional"].as_bool()) {
                (Some(v), _) => Some(v.to_owned()),
                (None, Some(true)) => None,
                (None, _) => return Err(format!("env {name}: ConfigMap {ns}/{map} has no key {key:?}")),
            }
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            // Secrets are the user's to create; only an optional one may be absent here.
            if r["optional"].as_bool() != Some(true) {
                return Err(format!("env {name}: a Secret that is not optional"));
            }
            None
        } else {
            return Err(format!("env {name}: a source this check does not know"));
        };
        if let Some(v) = value {
            env.insert(name, v);
        }
    }
    Ok(env)
}

/// Docker-link style variables of one Service, as the kubelet sets them.
fn service_variables(name: &str, ip: &str, ports: &[(u64, &str, &str)]) -> Vec<(String, String)> {
    let prefix = name.to_ascii_uppercase().replace('-', "_");
    let mut out = vec![(format!("{prefix}_SERVICE_HOST"), ip.to_owned())];
    let Some((first, _, first_proto)) = ports.first() else {
        return out;
    };
    out.push((format!("{prefix}_SERVICE_PORT"), first.to_string()));
    out.push((
        format!("{prefix}_PORT"),
        format!("{}://{ip}:{first}", first_proto.to_ascii_lowercase()),
    ));
    for (port, port_name, proto) in ports {
        if !port_name.is_empty() {
            let suffix = port_name.to_ascii_uppercase().replace('-', "_");
            out.push((format!("{prefix}_SERVICE_PORT_{suffix}"), port.to_string()));
        }
        let base = format!("{prefix}_PORT_{port}_{proto}");
        out.push((
            base.clone(),
            format!("{}://{ip}:{port}", proto.to_ascii_lowercase()),
        ));
        out.push((format!("{base}_PROTO"), proto.to_ascii_lowercase()));
        out.push((format!("{base}_PORT"), port.to_string()));
        out.push((format!("{base}_ADDR"), ip.to_owned()));
    }
    out
}

/// Placeholders of the right shape for the downward API fields a pod spec may name.
fn downward(path: &str) -> Option<String> {
    Some(
        match path {
            "spec.nodeName" => "node1",
            "metadata.name" => "kube-ovn-controller-7d9f8-abcde",
            "metadata.namespace" => "kube-system",
            // One address: a single-stack node, where the plural lists equal the singular.
            "status.podIP" | "status.hostIP" | "status.podIPs" | "status.hostIPs" => "192.0.2.21",
            _ => return None,
        }
        .to_owned(),
    )
}

/// `$(VAR)` from `env` (unknown ones stay as written), `$$` → `$`.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            if let Some(v) = env.get(name) {
                out.push_str(v);
            } else {
                out.push_str("$(");
                out.push_str(name);
                out.push(')');
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `[binary, expanded args…, --flag=value for each flag variable the args leave out]`.
fn command_line(binary: &str, raw_args: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    let mut argv = vec![binary.to_owned()];
    argv.extend(raw_args.iter().map(|a| expand(a, env)));
    for (var, long) in flag_variables(binary) {
        let given = argv[1..]
            .iter()
            .any(|a| a == &format!("--{long}") || a.starts_with(&format!("--{long}=")));
        if let Some(value) = env.get(&var)
            && !given
        {
            argv.push(format!("--{long}={value}"));
        }
    }
    argv
}

/// (variable, long flag) of every flag of `binary`.
fn flag_variables(binary: &str) -> Vec<(String, String)> {
    let cmd = match binary {
        "kube-ovn-controller" => kube_ovn_controller::config::Flags::command(),
        "kube-ovn-daemon" => kube_ovn_node::config::Flags::command(),
        "kube-ovn-speaker" => kube_ovn_speaker::config::Flags::command(),
        "kube-ovn-monitor" => kube_ovn_monitor::flags::Flags::command(),
        other => unreachable!("{other} is not one of BINARIES"),
    };
    cmd.get_arguments()
        .filter_map(|a| Some((a.get_env()?.to_str()?.to_owned(), a.get_long()?.to_owned())))
        .collect()
}

/// Parses and validates `argv` with `binary`'s own flags, as the binary does at start.
pub fn parse(binary: &str, argv: &[String]) -> Result<(), String> {
    match binary {
        "kube-ovn-controller" => {
            let flags =
                kube_ovn_controller::config::Flags::try_parse_from(argv).map_err(|e| e.to_string())?;
            flags.validate().map(drop).map_err(|e| e.to_string())
        }
        "kube-ovn-daemon" => {
            let flags = kube_ovn_node::config::Flags::try_parse_from(argv).map_err(|e| e.to_string())?;
            flags.validate().map(drop).map_err(|e| e.to_string())
        }
        "kube-ovn-speaker" => {
            let flags = kube_ovn_speaker::config::Flags::try_parse_from(argv).map_err(|e| e.to_string())?;
            flags.validate().map(drop).map_err(|e| e.to_string())
        }
        "kube-ovn-monitor" => {
            let flags = kube_ovn_monitor::flags::Flags::try_parse_from(argv).map_err(|e| e.to_string())?;
            flags.config().map(drop).map_err(|e| e.to_string())
        }
        other => Err(format!("{other} is not one of {BINARIES:?}")),
    }
}

#[test]
fn a_misspelt_flag_or_an_unknown_variable_fails_the_check() {
    let deployment = |args: &[&str]| -> Vec<Value> {
        vec![
            serde_json::json!({"kind": "Deployment", "metadata": {"name": "c", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "c",
                "command": ["/kube-ovn/kube-ovn-controller"], "args": args}]}}}}),
        ]
    };
    assert_eq!(
        check_all(&deployment(&["--ovn-nb-addr=tcp:10.0.0.1:6641"])).unwrap(),
        ["c"]
    );
    let e = check_all(&deployment(&[
        "--ovn-nb-addr=tcp:10.0.0.1:6641",
        "--leader-elec=true",
    ]))
    .unwrap_err();
    assert!(e.contains("--leader-elec"), "{e}");
    let e = check_all(&deployment(&["--ovn-nb-addr=tcp:$(OVN_NB_SERVICE_HOTS):6641"])).unwrap_err();
    assert!(e.contains("OVN_NB_SERVICE_HOTS"), "{e}");
    let e = check_all(&deployment(&[
        "--ovn-nb-addr=tcp:10.0.0.1:6641",
        "--leader-elect-renew-deadline=20",
    ]))
    .unwrap_err();
    assert!(e.contains("leader-elect-renew-deadline"), "{e}");
}
