//! Transactions and the monitor replica against a real `ovsdb-server` (OVN_Northbound 7.0.0),
//! cross-checked with `select` and `ovn-nbctl`.

mod common;

use std::collections::BTreeMap;

use common::{Rng, assert_replica_matches, connect, nbctl_uuids, replica_rows};
use kube_ovn_ovsdb::table::check_table;
use kube_ovn_ovsdb::tables::nb;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort, NbGlobal};
use kube_ovn_ovsdb::tables::vswitch::{Bridge, Interface, OpenVSwitch, Port, Qos, Queue};
use kube_ovn_ovsdb::{
    Atom, ChangeKind, Condition, DatabaseSchema, Error, Mutation, Operation, Row, Table, TransactError, Uuid,
    Value, WaitUntil,
};
use kube_ovn_testkit::{NB_SCHEMA, OvsdbServer, SB_SCHEMA, VSWITCH_SCHEMA};

fn load_schema(path: &str) -> DatabaseSchema {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}; run scripts/install-deps.sh"));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn typed_tables_fit_the_installed_schemas() {
    let nb_schema = load_schema(NB_SCHEMA);
    let mut problems = Vec::new();
    problems.extend(check_table::<NbGlobal>(&nb_schema));
    problems.extend(check_table::<LogicalSwitch>(&nb_schema));
    problems.extend(check_table::<LogicalSwitchPort>(&nb_schema));
    problems.extend(check_table::<nb::LogicalRouter>(&nb_schema));
    problems.extend(check_table::<nb::LogicalRouterPort>(&nb_schema));
    problems.extend(check_table::<nb::LogicalRouterStaticRoute>(&nb_schema));
    problems.extend(check_table::<nb::LogicalRouterPolicy>(&nb_schema));
    problems.extend(check_table::<nb::Acl>(&nb_schema));
    problems.extend(check_table::<nb::AddressSet>(&nb_schema));
    problems.extend(check_table::<nb::PortGroup>(&nb_schema));
    problems.extend(check_table::<nb::LoadBalancer>(&nb_schema));
    problems.extend(check_table::<nb::Nat>(&nb_schema));
    problems.extend(check_table::<nb::GatewayChassis>(&nb_schema));
    problems.extend(check_table::<nb::DhcpOptions>(&nb_schema));
    problems.extend(check_table::<nb::Bfd>(&nb_schema));
    let sb_schema = load_schema(SB_SCHEMA);
    problems.extend(check_table::<kube_ovn_ovsdb::tables::sb::PortBinding>(&sb_schema));
    problems.extend(check_table::<kube_ovn_ovsdb::tables::sb::Chassis>(&sb_schema));
    let vs_schema = load_schema(VSWITCH_SCHEMA);
    problems.extend(check_table::<OpenVSwitch>(&vs_schema));
    problems.extend(check_table::<Bridge>(&vs_schema));
    problems.extend(check_table::<Port>(&vs_schema));
    problems.extend(check_table::<Interface>(&vs_schema));
    problems.extend(check_table::<Qos>(&vs_schema));
    problems.extend(check_table::<Queue>(&vs_schema));
    assert!(
        problems.is_empty(),
        "typed tables do not fit the schemas:\n{}",
        problems.join("\n")
    );
}

fn lsp(name: &str, rng: &mut Rng) -> LogicalSwitchPort {
    let n = rng.below(200);
    LogicalSwitchPort {
        name: name.to_owned(),
        addresses: vec![format!(
            "0a:00:00:00:{:02x}:{:02x} 10.16.{}.{}",
            n / 256,
            n % 256,
            n / 250,
            n % 250 + 2
        )],
        options: BTreeMap::from([("requested-chassis".to_owned(), format!("node{}", rng.below(3)))]),
        external_ids: BTreeMap::from([
            ("pod".to_owned(), name.to_owned()),
            ("vendor".to_owned(), "kube-ovn".to_owned()),
        ]),
        tag_request: (rng.below(2) == 0).then_some(i64::try_from(rng.below(4095)).unwrap()),
        enabled: Some(rng.below(2) == 0),
        ..LogicalSwitchPort::default()
    }
}

/// Random inserts, updates, mutations and deletes of every column shape (scalars, optional
/// atoms, sets, maps, references); after each transaction the replica must equal a `select`.
/// This also pins down `update2` diff semantics for each shape against the real server.
#[tokio::test]
async fn transact_and_monitor_agree() {
    let server = OvsdbServer::nb().unwrap();
    let client = connect(&server.remote(), "OVN_Northbound").await;
    let mut changes = client.subscribe();
    let ls = LogicalSwitch {
        name: "ls1".into(),
        ..Default::default()
    };
    client
        .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
        .await
        .unwrap();

    let mut rng = Rng::new(0x5eed);
    let mut live: Vec<String> = Vec::new();
    for step in 0..300 {
        let ls_where = vec![Condition::eq("name", "ls1")];
        let ops = match rng.below(6) {
            0 | 1 => {
                let name = format!("p{step}");
                live.push(name.clone());
                vec![
                    Operation::insert_named(LogicalSwitchPort::NAME, lsp(&name, &mut rng).to_row(), "p"),
                    Operation::mutate(
                        LogicalSwitch::NAME,
                        ls_where,
                        vec![Mutation::insert("ports", Value::set([Atom::named("p")]))],
                    ),
                ]
            }
            2 if !live.is_empty() => {
                let name = live[rng.below(live.len())].clone();
                let row = Row::from([
                    (
                        "addresses".to_owned(),
                        Value::set([
                            format!("0a:00:00:00:00:{:02x} dynamic", rng.below(255)),
                            "router".to_owned(),
                        ]),
                    ),
                    (
                        "external_ids".to_owned(),
                        Value::map([("vendor", "kube-ovn"), ("step", &*step.to_string())]),
                    ),
                    ("up".to_owned(), Value::set([rng.below(2) == 0])),
                    ("tag_request".to_owned(), Value::empty_set()),
                ]);
                vec![Operation::update(
                    LogicalSwitchPort::NAME,
                    vec![Condition::eq("name", name.as_str())],
                    row,
                )]
            }
            3 if !live.is_empty() => {
                let name = live[rng.below(live.len())].clone();
                vec![Operation::mutate(
                    LogicalSwitchPort::NAME,
                    vec![Condition::eq("name", name.as_str())],
                    vec![
                        Mutation::delete("external_ids", Value::set(["pod"])),
                        Mutation::insert("options", Value::map([(format!("k{step}"), "v")])),
                        Mutation::insert("port_security", Value::set([format!("ps{step}")])),
                    ],
                )]
            }
            4 if !live.is_empty() => {
                let name = live.swap_remove(rng.below(live.len()));
                // Removing the reference garbage-collects the port (a non-root table).
                let uuid = client
                    .read(|c| c.find::<LogicalSwitchPort>(|p| p.name == name))
                    .unwrap()
                    .unwrap()
                    .uuid;
                vec![Operation::mutate(
                    LogicalSwitch::NAME,
                    ls_where,
                    vec![Mutation::delete("ports", Value::set([uuid]))],
                )]
            }
            _ => vec![Operation::mutate(
                LogicalSwitch::NAME,
                ls_where,
                vec![Mutation::insert(
                    "other_config",
                    Value::map([("subnet", format!("10.{}.0.0/16", rng.below(200)))]),
                )],
            )],
        };
        client
            .transact(ops)
            .await
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_replica_matches(&client, LogicalSwitchPort::NAME).await;
        assert_replica_matches(&client, LogicalSwitch::NAME).await;
    }

    // The independent oracle: ovn-nbctl sees exactly the ports the replica holds.
    let listed = nbctl_uuids(
        &server
            .nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch_Port"])
            .unwrap(),
    );
    let replica: std::collections::BTreeSet<Uuid> = replica_rows(&client, LogicalSwitchPort::NAME)
        .into_keys()
        .collect();
    assert_eq!(replica, listed);
    let names: Vec<String> = client
        .rows::<LogicalSwitchPort>()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names.len(), live.len());

    // Subscribers saw inserts, updates and deletes.
    let mut kinds = std::collections::BTreeSet::new();
    while let Ok(set) = changes.try_recv() {
        kinds.extend(set.changes.iter().map(kube_ovn_ovsdb::Change::kind));
    }
    assert_eq!(
        kinds,
        [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete]
            .into_iter()
            .collect()
    );
}

/// ovsdb-server sends a transaction's updates before its reply, and the client applies them in
/// order: the replica holds the row the moment `transact` returns, standalone or clustered.
#[tokio::test]
async fn replica_holds_the_write_when_transact_returns() {
    for server in [OvsdbServer::nb().unwrap(), OvsdbServer::nb_clustered().unwrap()] {
        let client = connect(&server.remote(), "OVN_Northbound").await;
        for i in 0..50 {
            let ls = LogicalSwitch {
                name: format!("ls{i}"),
                ..Default::default()
            };
            let uuid = client
                .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
                .await
                .unwrap()[0]
                .uuid()
                .unwrap();
            let got = client.read(|c| c.get::<LogicalSwitch>(&uuid)).unwrap();
            assert_eq!(got.map(|s| s.name), Some(format!("ls{i}")));
        }
    }
}

#[tokio::test]
async fn errors_name_the_table_and_row_and_nothing_is_half_applied() {
    let server = OvsdbServer::nb().unwrap();
    let client = connect(&server.remote(), "OVN_Northbound").await;
    let before = server
        .nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch"])
        .unwrap();

    // Referential integrity, found at commit.
    let dangling = Uuid::new_v4();
    let ls = Row::from([
        ("name".to_owned(), Value::from("bad")),
        ("ports".to_owned(), Value::set([dangling])),
    ]);
    let err = client
        .transact(vec![Operation::insert(LogicalSwitch::NAME, ls)])
        .await
        .unwrap_err();
    match &err {
        Error::Transact(TransactError::Commit {
            error,
            table,
            row,
            details,
        }) => {
            assert_eq!(error, "referential integrity violation");
            assert_eq!(table.as_deref(), Some("Logical_Switch"));
            assert!(row.is_some(), "{details}");
            assert!(details.contains(&dangling.to_string()), "{details}");
        }
        other => panic!("expected a commit error, got {other}"),
    }

    // A unique index (Logical_Switch_Port.name), also at commit; the first insert is rolled back.
    let p = |n: &str| {
        LogicalSwitchPort {
            name: n.into(),
            ..Default::default()
        }
        .to_row()
    };
    let err = client
        .transact(vec![
            Operation::insert_named(LogicalSwitchPort::NAME, p("dup"), "a"),
            Operation::insert_named(LogicalSwitchPort::NAME, p("dup"), "b"),
            Operation::insert(
                LogicalSwitch::NAME,
                Row::from([
                    ("name".to_owned(), Value::from("holder")),
                    (
                        "ports".to_owned(),
                        Value::set([Atom::named("a"), Atom::named("b")]),
                    ),
                ]),
            ),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Transact(TransactError::Commit { table: Some(t), .. }) if t == "Logical_Switch_Port"),
        "{err}"
    );

    // An operation error: a `wait` whose condition does not hold, with a zero timeout.
    let err = client
        .transact(vec![
            Operation::insert(
                LogicalSwitch::NAME,
                Row::from([("name".to_owned(), Value::from("never"))]),
            ),
            Operation::Wait {
                table: LogicalSwitch::NAME.into(),
                conditions: vec![Condition::eq("name", "ghost")],
                columns: vec!["name".into()],
                until: WaitUntil::Equal,
                rows: vec![Row::from([("name".to_owned(), Value::from("ghost"))])],
                timeout_ms: Some(0),
            },
        ])
        .await
        .unwrap_err();
    match &err {
        Error::Transact(TransactError::Operation {
            index,
            op,
            table,
            error,
            ..
        }) => {
            assert_eq!(
                (*index, *op, table.as_str(), error.as_str()),
                (1, "wait", "Logical_Switch", "timed out")
            );
        }
        other => panic!("expected an operation error, got {other}"),
    }

    // Checked against the server's schema before anything is sent.
    let err = client
        .transact(vec![Operation::delete("No_Such_Table", vec![])])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownTable { ref table, .. } if table == "No_Such_Table"),
        "{err}"
    );
    let row = Row::from([
        ("name".to_owned(), Value::from("x")),
        ("no_such_column".to_owned(), Value::from("y")),
    ]);
    let err = client
        .transact(vec![Operation::insert(LogicalSwitch::NAME, row)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownColumn { ref column, .. } if column == "no_such_column"),
        "{err}"
    );

    // None of the failed transactions left anything behind.
    assert_eq!(
        server
            .nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch"])
            .unwrap(),
        before
    );
    assert_eq!(client.read(|c| c.len(LogicalSwitch::NAME)), 0);
    assert_eq!(client.read(|c| c.len(LogicalSwitchPort::NAME)), 0);
}

#[tokio::test]
async fn works_over_tcp_and_for_open_vswitch() {
    let server = OvsdbServer::vswitch().unwrap().with_tcp().unwrap();
    let client = connect(&server.tcp_remote().unwrap(), "Open_vSwitch").await;
    server.vsctl(&["init"]).unwrap();
    server
        .vsctl(&[
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "datapath_type=netdev",
        ])
        .unwrap();
    // A write from another client reaches our replica through the monitor.
    common::wait_ready_on(&client, "vswitch").await;
    kube_ovn_testkit::wait_until_async("br-int in the replica", common::WAIT, || async {
        Ok(client
            .rows::<Bridge>()?
            .iter()
            .any(|b| b.name == "br-int" && b.datapath_type == "netdev"))
    })
    .await
    .unwrap();
    let root = client.rows::<OpenVSwitch>().unwrap();
    assert_eq!(root.len(), 1);
    assert_eq!(root[0].bridges.len(), 1);
}

#[tokio::test]
async fn monitors_ten_thousand_rows() {
    let server = OvsdbServer::nb().unwrap();
    let writer = connect(&server.remote(), "OVN_Northbound").await;
    let ls = LogicalSwitch {
        name: "big".into(),
        ..Default::default()
    };
    writer
        .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
        .await
        .unwrap();
    let mut rng = Rng::new(7);
    for batch in 0..10 {
        let mut ops = Vec::new();
        let mut refs = Vec::new();
        for i in 0..1000 {
            let name = format!("big-{batch}-{i}");
            ops.push(Operation::insert_named(
                LogicalSwitchPort::NAME,
                lsp(&name, &mut rng).to_row(),
                format!("p{i}"),
            ));
            refs.push(Atom::named(format!("p{i}")));
        }
        ops.push(Operation::mutate(
            LogicalSwitch::NAME,
            vec![Condition::eq("name", "big")],
            vec![Mutation::insert("ports", Value::Set(refs.into_iter().collect()))],
        ));
        writer.transact(ops).await.unwrap();
    }
    let reader = connect(&server.remote(), "OVN_Northbound").await;
    assert_eq!(reader.read(|c| c.len(LogicalSwitchPort::NAME)), 10_000);
    let listed = nbctl_uuids(
        &server
            .nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch_Port"])
            .unwrap(),
    );
    let replica: std::collections::BTreeSet<Uuid> = replica_rows(&reader, LogicalSwitchPort::NAME)
        .into_keys()
        .collect();
    assert_eq!(replica, listed);
    assert_replica_matches(&reader, LogicalSwitchPort::NAME).await;
    let sw = reader.rows::<LogicalSwitch>().unwrap();
    assert_eq!(sw[0].ports.len(), 10_000);
}

/// A server whose schema differs from the one our types were written for: a column we know is
/// missing, and a column and a table we do not know exist. Reads and default-valued writes work;
/// a real value for the missing column is refused with its name.
#[tokio::test]
async fn tolerates_a_server_schema_with_other_columns() {
    let mut schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(NB_SCHEMA).unwrap()).unwrap();
    let lsp_cols = schema["tables"]["Logical_Switch_Port"]["columns"]
        .as_object_mut()
        .unwrap();
    lsp_cols.remove("ha_chassis_group").unwrap();
    lsp_cols.insert("future_column".into(), serde_json::json!({"type": "string"}));
    schema["tables"]["Future_Table"] =
        serde_json::json!({"columns": {"x": {"type": "integer"}}, "isRoot": true});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nb-variant.ovsschema");
    std::fs::write(&path, serde_json::to_vec(&schema).unwrap()).unwrap();
    let server = OvsdbServer::standalone(&path).unwrap();
    let client = connect(&server.remote(), "OVN_Northbound").await;

    // Ports are not root rows: a switch must refer to them or the server drops them.
    let port = LogicalSwitchPort {
        name: "p1".into(),
        ..Default::default()
    };
    let holder = Row::from([
        ("name".to_owned(), Value::from("ls")),
        ("ports".to_owned(), Value::set([Atom::named("p")])),
    ]);
    client
        .transact(vec![
            Operation::insert_named(LogicalSwitchPort::NAME, port.to_row(), "p"),
            Operation::insert(LogicalSwitch::NAME, holder),
        ])
        .await
        .unwrap();
    // A column only the server knows can still be written raw, and is kept in the raw replica.
    let raw = Row::from([("future_column".to_owned(), Value::from("hello"))]);
    client
        .transact(vec![Operation::update(
            LogicalSwitchPort::NAME,
            vec![Condition::eq("name", "p1")],
            raw,
        )])
        .await
        .unwrap();
    let got = client.rows::<LogicalSwitchPort>().unwrap();
    assert_eq!(
        (got.len(), got[0].name.as_str(), got[0].ha_chassis_group),
        (1, "p1", None)
    );
    let kept =
        client.read(|c| c.row(LogicalSwitchPort::NAME, &got[0].uuid).unwrap()["future_column"].clone());
    assert_eq!(kept, Value::from("hello"));

    let with_group = LogicalSwitchPort {
        name: "p2".into(),
        ha_chassis_group: Some(Uuid::new_v4()),
        ..Default::default()
    };
    let err = client
        .transact(vec![Operation::insert(
            LogicalSwitchPort::NAME,
            with_group.to_row(),
        )])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownColumn { ref column, .. } if column == "ha_chassis_group"),
        "{err}"
    );
    assert_eq!(client.read(|c| c.len("Future_Table")), 0);
}
