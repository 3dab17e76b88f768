//! Protocol edges a real ovsdb-server rarely shows on demand, against a scripted server: older
//! monitor methods, the server's `echo`, a server that goes silent, garbage on the wire, and an
//! update the replica cannot apply.

mod common;

use std::time::Duration;

use kube_ovn_ovsdb::rpc::FrameSplitter;
use kube_ovn_ovsdb::{Client, ClientConfig, Operation, Remote, Row, Value};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

const ZERO: &str = "00000000-0000-0000-0000-000000000000";
const SEED: &str = "11111111-1111-1111-1111-111111111111";

#[derive(Clone, Copy, PartialEq)]
enum Script {
    /// A modern server.
    Normal,
    /// No `monitor_cond_since` (OVS < 2.12).
    NoCondSince,
    /// Only RFC 7047 `monitor`.
    OnlyMonitor,
    /// After setup, sends `echo` and reports the client's answer.
    SendsEcho,
    /// After setup, never says anything again (not even to `echo`).
    Silent,
    /// After setup on the first connection, sends bytes that are not JSON.
    Garbage,
    /// After setup on the first connection, modifies a row the client never saw.
    ModifiesUnknownRow,
    /// Answers everything but the database's monitor request (a server that stalls while it
    /// should send the initial rows).
    NeverSendsRows,
}

#[derive(Debug)]
enum Event {
    Connected(usize),
    Request {
        conn: usize,
        method: String,
        params: Json,
    },
    EchoAnswered(Json),
}

fn schema() -> Json {
    json!({"name": "Fake", "version": "1.0.0", "tables": {"T": {"columns": {"name": {"type": "string"}}, "isRoot": true}}})
}

fn seed_rows(v1: bool) -> Json {
    if v1 {
        json!({"T": {SEED: {"new": {"name": "seed"}}}})
    } else {
        json!({"T": {SEED: {"initial": {"name": "seed"}}}})
    }
}

async fn send(stream: &mut UnixStream, value: &Json) {
    let _ = stream.write_all(value.to_string().as_bytes()).await;
}

async fn serve(mut stream: UnixStream, conn: usize, script: Script, events: mpsc::UnboundedSender<Event>) {
    let mut splitter = FrameSplitter::new();
    let mut buf = vec![0; 65536];
    loop {
        let frame = match splitter.next_frame() {
            Ok(Some(f)) => f.to_vec(),
            Ok(None) => match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    splitter.extend(&buf[..n]);
                    continue;
                }
            },
            Err(_) => return,
        };
        let msg: Json = serde_json::from_slice(&frame).unwrap();
        let (id, method, params) = (
            msg["id"].clone(),
            msg["method"].as_str().map(str::to_owned),
            msg["params"].clone(),
        );
        let Some(method) = method else {
            if id == json!("echo") {
                let _ = events.send(Event::EchoAnswered(msg["result"].clone()));
            }
            continue;
        };
        let _ = events.send(Event::Request {
            conn,
            method: method.clone(),
            params: params.clone(),
        });
        let ok = |result: Json| json!({"id": id, "result": result, "error": null});
        let unknown = json!({"id": id, "result": null, "error": {"error": "unknown method"}});
        let reply = match method.as_str() {
            "get_schema" => ok(schema()),
            "transact" if params[0] == "_Server" => ok(json!([{"rows": [
                {"name": "Fake", "model": "standalone", "connected": true, "leader": true, "index": ["set", []]}]}])),
            "transact" => {
                // Like ovsdb-server: the monitor update first, then the reply.
                let uuid = uuid::Uuid::new_v4().to_string();
                send(&mut stream, &json!({"id": null, "method": "update3",
                    "params": ["kube-ovn-rs", uuid.clone(), {"T": {uuid.clone(): {"insert": {"name": "written"}}}}]})).await;
                ok(json!([{"uuid": ["uuid", uuid]}]))
            }
            "monitor_cond" if params[0] == "_Server" => ok(json!({})),
            m if m.starts_with("monitor") && script == Script::NeverSendsRows => continue,
            "monitor_cond_since" if matches!(script, Script::NoCondSince | Script::OnlyMonitor) => unknown,
            "monitor_cond_since" => ok(json!([false, ZERO, seed_rows(false)])),
            "monitor_cond" if script == Script::OnlyMonitor => unknown,
            "monitor_cond" => ok(seed_rows(false)),
            "monitor" => ok(seed_rows(true)),
            "echo" if script == Script::Silent => continue,
            "echo" => ok(params.clone()),
            _ => unknown,
        };
        send(&mut stream, &reply).await;
        if method.starts_with("monitor") && params[0] == "Fake" {
            match script {
                Script::SendsEcho => {
                    send(
                        &mut stream,
                        &json!({"id": "echo", "method": "echo", "params": ["ping"]}),
                    )
                    .await;
                }
                Script::Garbage if conn == 1 => {
                    let _ = stream.write_all(b"]]] not json").await;
                }
                Script::ModifiesUnknownRow if conn == 1 => {
                    let ghost = uuid::Uuid::new_v4().to_string();
                    send(
                        &mut stream,
                        &json!({"id": null, "method": "update3",
                        "params": ["kube-ovn-rs", ghost.clone(), {"T": {ghost: {"modify": {"name": "x"}}}}]}),
                    )
                    .await;
                }
                _ => {}
            }
        }
    }
}

struct Fake {
    _dir: tempfile::TempDir,
    remote: String,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Fake {
    fn start(script: Script) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((stream, _)) = listener.accept().await {
                n += 1;
                let _ = tx.send(Event::Connected(n));
                tokio::spawn(serve(stream, n, script, tx.clone()));
            }
        });
        Self {
            remote: format!("unix:{}", path.display()),
            _dir: dir,
            events,
        }
    }

    fn client(&self, probe: Duration) -> Client {
        client_of(&self.remote, probe)
    }

    /// The next event `pick` accepts, within 10 s.
    async fn expect<T>(&mut self, what: &str, mut pick: impl FnMut(&Event) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(e)) => {
                    if let Some(t) = pick(&e) {
                        return t;
                    }
                }
                _ => panic!("timed out waiting for {what}"),
            }
        }
    }
}

fn client_of(remotes: &str, probe: Duration) -> Client {
    common::init_logging();
    let mut config = ClientConfig::new(Remote::parse_list(remotes).unwrap(), "Fake");
    config.inactivity_probe = probe;
    config.request_timeout = Duration::from_secs(10);
    config.backoff_min = Duration::from_millis(10);
    config.connect_timeout = Duration::from_secs(1);
    Client::start(config)
}

fn seed_and_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client.read(|c| {
        c.table("T")
            .map(|(_, r)| r["name"].set_elements().unwrap()[0].as_str().unwrap().to_owned())
            .collect()
    });
    names.sort();
    names
}

#[tokio::test]
async fn falls_back_to_monitor_cond_then_monitor() {
    for (script, method) in [
        (Script::NoCondSince, "monitor_cond"),
        (Script::OnlyMonitor, "monitor"),
    ] {
        let mut fake = Fake::start(script);
        let client = fake.client(Duration::ZERO);
        client.wait_ready(Duration::from_secs(10)).await.unwrap();
        assert_eq!(seed_and_names(&client), vec!["seed"]);
        fake.expect(method, |e| {
            matches!(e, Event::Request { method: m, params, .. } if m == method && params[0] == "Fake")
                .then_some(())
        })
        .await;
        assert_eq!(client.stats().full_syncs, 1);
    }
}

#[tokio::test]
async fn answers_the_servers_echo() {
    let mut fake = Fake::start(Script::SendsEcho);
    let client = fake.client(Duration::ZERO);
    client.wait_ready(Duration::from_secs(10)).await.unwrap();
    let answer = fake.expect("the echo answer", |e| match e {
        Event::EchoAnswered(v) => Some(v.clone()),
        _ => None,
    });
    assert_eq!(answer.await, json!(["ping"]));
}

#[tokio::test]
async fn update_before_reply_is_in_the_replica_when_transact_returns() {
    let fake = Fake::start(Script::Normal);
    let client = fake.client(Duration::ZERO);
    client.wait_ready(Duration::from_secs(10)).await.unwrap();
    let row = Row::from([("name".to_owned(), Value::from("written"))]);
    let uuid = client.transact(vec![Operation::insert("T", row)]).await.unwrap()[0]
        .uuid()
        .unwrap();
    assert!(client.read(|c| c.row("T", &uuid).is_some()));
}

#[tokio::test]
async fn inactivity_probe_drops_a_silent_server() {
    let mut fake = Fake::start(Script::Silent);
    let _client = fake.client(Duration::from_millis(200));
    fake.expect("the client's echo", |e| {
        matches!(e, Event::Request { method, .. } if method == "echo").then_some(())
    })
    .await;
    fake.expect("a second connection", |e| {
        matches!(e, Event::Connected(2)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn garbage_on_the_wire_drops_the_connection_not_the_process() {
    let mut fake = Fake::start(Script::Garbage);
    let client = fake.client(Duration::ZERO);
    fake.expect("a second connection", |e| {
        matches!(e, Event::Connected(2)).then_some(())
    })
    .await;
    client.wait_ready(Duration::from_secs(10)).await.unwrap();
    assert_eq!(seed_and_names(&client), vec!["seed"]);
}

#[tokio::test]
async fn an_update_the_replica_cannot_apply_forces_a_full_resync() {
    let mut fake = Fake::start(Script::ModifiesUnknownRow);
    let client = fake.client(Duration::ZERO);
    let since = fake
        .expect("the second connection's monitor", |e| match e {
            Event::Request {
                conn: 2,
                method,
                params,
            } if method == "monitor_cond_since" => Some(params[3].clone()),
            _ => None,
        })
        .await;
    assert_eq!(since, json!(ZERO), "the diverged replica must not be resumed");
    client.wait_ready(Duration::from_secs(10)).await.unwrap();
    assert_eq!(seed_and_names(&client), vec!["seed"]);
}

#[tokio::test]
async fn a_monitor_reply_that_never_comes_fails_over_to_the_next_remote() {
    let mut stalls = Fake::start(Script::NeverSendsRows);
    let mut serves = Fake::start(Script::Normal);
    let client = client_of(&format!("{},{}", stalls.remote, serves.remote), Duration::ZERO);
    stalls
        .expect("the monitor request that is never answered", |e| {
            matches!(e, Event::Request { method, params, .. } if method == "monitor_cond_since" && params[0] == "Fake")
                .then_some(())
        })
        .await;
    serves
        .expect("a connection to the next remote", |e| {
            matches!(e, Event::Connected(1)).then_some(())
        })
        .await;
    client.wait_ready(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        common::ready_remote(&client).map(|r| r.to_string()),
        Some(serves.remote.clone())
    );
    assert_eq!(seed_and_names(&client), vec!["seed"]);
}
