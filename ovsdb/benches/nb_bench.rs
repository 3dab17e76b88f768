//! OVSDB client benchmark, side by side with the OVN tools on the same server in the same run.
//!
//! 1. Create 10,000 logical switch ports on one switch, in transactions of 1, 100 and 1,000
//!    ports, with our client and with `ovn-nbctl` (one process per batch, the batch chained with
//!    `--`). Each side gets a fresh `ovsdb-server`, so neither pays for the other's rows.
//! 2. Monitor-sync a database of 100,000 ports: our client from connect to a complete replica,
//!    against `ovsdb-client dump` of the same database (table and JSON output).
//!
//! Run: `cargo bench -p kube-ovn-ovsdb --bench nb_bench` (add `-- quick` for 2,000 ports and a
//! 20,000-port monitor). Results go to stdout as a Markdown table for docs/benchmarks.md.

use std::process::Command;
use std::time::{Duration, Instant};

use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};
use kube_ovn_ovsdb::{Atom, Client, ClientConfig, Condition, Mutation, Operation, Remote, Table, Value};
use kube_ovn_testkit::OvsdbServer;

fn port(i: usize) -> LogicalSwitchPort {
    LogicalSwitchPort {
        name: format!("pod-{i}.bench"),
        addresses: vec![address(i)],
        external_ids: [
            ("pod".to_owned(), format!("bench/pod-{i}")),
            ("vendor".to_owned(), "kube-ovn".to_owned()),
        ]
        .into_iter()
        .collect(),
        ..LogicalSwitchPort::default()
    }
}

fn address(i: usize) -> String {
    format!(
        "0a:00:00:{:02x}:{:02x}:{:02x} 10.{}.{}.{}",
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff,
        16 + (i >> 16),
        (i >> 8) & 0xff,
        i & 0xff
    )
}

async fn client(server: &OvsdbServer) -> Client {
    let remotes = Remote::parse_list(&server.remote()).unwrap();
    Client::connect(ClientConfig::new(remotes, "OVN_Northbound"))
        .await
        .unwrap()
}

async fn ours_create(total: usize, batch: usize) -> Duration {
    let server = OvsdbServer::nb().unwrap();
    let nb = client(&server).await;
    let ls = LogicalSwitch {
        name: "bench".into(),
        ..Default::default()
    };
    nb.transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
        .await
        .unwrap();
    let start = Instant::now();
    for chunk in (0..total).collect::<Vec<_>>().chunks(batch) {
        let mut ops = Vec::with_capacity(chunk.len() + 1);
        let mut refs = std::collections::BTreeSet::new();
        for &i in chunk {
            let name = format!("p{i}");
            ops.push(Operation::insert_named(
                LogicalSwitchPort::NAME,
                port(i).to_row(),
                name.clone(),
            ));
            refs.insert(Atom::named(name));
        }
        ops.push(Operation::mutate(
            LogicalSwitch::NAME,
            vec![Condition::eq("name", "bench")],
            vec![Mutation::insert("ports", Value::Set(refs))],
        ));
        nb.transact(ops).await.unwrap();
    }
    let took = start.elapsed();
    assert_eq!(nb.read(|c| c.len(LogicalSwitchPort::NAME)), total);
    took
}

fn nbctl_create(total: usize, batch: usize) -> Duration {
    let server = OvsdbServer::nb().unwrap();
    server.nbctl(&["ls-add", "bench"]).unwrap();
    let db = format!("--db={}", server.remote());
    let start = Instant::now();
    for chunk in (0..total).collect::<Vec<_>>().chunks(batch) {
        let mut args: Vec<String> = vec![db.clone()];
        for (n, &i) in chunk.iter().enumerate() {
            if n > 0 {
                args.push("--".into());
            }
            let p = port(i);
            args.extend(["lsp-add".into(), "bench".into(), p.name.clone()]);
            args.extend([
                "--".into(),
                "lsp-set-addresses".into(),
                p.name.clone(),
                address(i),
            ]);
            args.extend([
                "--".into(),
                "set".into(),
                "Logical_Switch_Port".into(),
                p.name.clone(),
            ]);
            args.push(format!("external_ids:pod=bench/pod-{i}"));
            args.push("external_ids:vendor=kube-ovn".into());
        }
        let out = Command::new("ovn-nbctl").args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let took = start.elapsed();
    let count = server
        .nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch_Port"])
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(count, total);
    took
}

async fn monitor_sync(rows: usize) -> (Duration, Duration, Duration) {
    let server = OvsdbServer::nb().unwrap();
    {
        let nb = client(&server).await;
        let ls = LogicalSwitch {
            name: "bench".into(),
            ..Default::default()
        };
        nb.transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
            .await
            .unwrap();
        for chunk in (0..rows).collect::<Vec<_>>().chunks(2000) {
            let mut ops = Vec::new();
            let mut refs = std::collections::BTreeSet::new();
            for &i in chunk {
                ops.push(Operation::insert_named(
                    LogicalSwitchPort::NAME,
                    port(i).to_row(),
                    format!("p{i}"),
                ));
                refs.insert(Atom::named(format!("p{i}")));
            }
            ops.push(Operation::mutate(
                LogicalSwitch::NAME,
                vec![Condition::eq("name", "bench")],
                vec![Mutation::insert("ports", Value::Set(refs))],
            ));
            nb.transact(ops).await.unwrap();
        }
    }
    let start = Instant::now();
    let nb = client(&server).await;
    let ours = start.elapsed();
    assert_eq!(nb.read(|c| c.len(LogicalSwitchPort::NAME)), rows);
    drop(nb);
    let dump = |format: &str| {
        let start = Instant::now();
        let out = Command::new("ovsdb-client")
            .args([
                format!("--format={format}").as_str(),
                "dump",
                &server.remote(),
                "OVN_Northbound",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(
            out.stdout.len() > rows * 50,
            "dump printed {} bytes",
            out.stdout.len()
        );
        start.elapsed()
    };
    (ours, dump("table"), dump("json"))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let (total, monitor_rows) = if quick { (2_000, 20_000) } else { (10_000, 100_000) };
    println!("| what | ours | reference | ours / reference |");
    println!("|---|---|---|---|");
    for batch in [1, 100, 1000] {
        let ours = ours_create(total, batch).await;
        let theirs = nbctl_create(total, batch);
        println!(
            "| {total} LSPs, {batch} per transaction | {} | {} (ovn-nbctl) | {:.3} |",
            ms(ours),
            ms(theirs),
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
    }
    let (ours, table, json) = monitor_sync(monitor_rows).await;
    for (name, reference) in [
        ("ovsdb-client dump", table),
        ("ovsdb-client --format=json dump", json),
    ] {
        println!(
            "| monitor-sync {monitor_rows} LSPs | {} | {} ({name}) | {:.3} |",
            ms(ours),
            ms(reference),
            ours.as_secs_f64() / reference.as_secs_f64()
        );
    }
}
