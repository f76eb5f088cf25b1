//! The PostgreSQL schema, its versions, and moving a home into it, against
//! a real PostgreSQL cluster the tests start themselves
//! (tests/cluster/src/lib.rs).
//!
//! - `db migrate` brings a database to the schema once, and a database
//!   written by a newer Gatehouse is refused in one line.
//! - The two schemas hold the same rules: every hostile statement below is
//!   refused by both the embedded SQLite schema and the PostgreSQL one
//!   (one list, run against both), and both have the same columns.
//! - `db copy --to URL` moves a home with actions in every state, an
//!   observation set, a shared chat and a workflow waiting on a request:
//!   every table arrives row for row, ids included, and the ledger's ids
//!   continue above every id the home ever handed out.
//! - The safe sides: a copy into a database that already holds a
//!   deployment, or while another process uses the home, is refused; a
//!   named database not yet migrated is refused rather than served from
//!   the home, and a named one keeps every row (the home keeps none).
//! - A copied home continues in PostgreSQL: its pending action is
//!   approved and sent, its waiting workflow runs to the end.

use gatehouse::sharing::OpenRequest;
use gatehouse::store::postgres::{self, DatabaseUrl, Presence};
use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::postgres::{cluster, name_of};
use gatehouse_e2e::{
    World, call, cli_command, label_step, on_database, one_line, pending_id, signal, stderr,
    stdout, wait_until,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const BOB: &str = "tok-bob-51c7";

fn migrate(home: &Path, url: &str) -> Output {
    on_database(&mut cli_command(home, &["db", "migrate", "--json"]), url)
        .output()
        .expect("gatehouse runs")
}

#[test]
fn migrate_brings_a_database_to_the_schema_once_and_refuses_a_newer_one() {
    let pg = cluster();
    let url = pg.database();
    let home = tempfile::tempdir().unwrap();

    let first = migrate(home.path(), &url);
    assert!(first.status.success(), "{}", stderr(&first));
    let first: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(first["before"], 0, "{first}");
    assert!(first["now"].as_i64().unwrap() >= 1, "{first}");
    let again = migrate(home.path(), &url);
    assert!(again.status.success(), "{}", stderr(&again));
    let again: Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(again["before"], first["now"], "{again}");
    assert_eq!(again["now"], first["now"], "{again}");
    // Migrating a shared database opens no home.
    assert!(!home.path().join("gatehouse.db").exists());

    // A newer Gatehouse moved the database on: this one changes nothing.
    pg.psql(
        name_of(&url),
        "INSERT INTO gatehouse_schema_history (version, name, applied_on, checksum) VALUES (99, 'future', 'now', '0')",
    );
    let e = one_line(&migrate(home.path(), &url));
    assert!(e.contains("newer Gatehouse (schema 99"), "{e}");
    assert!(e.contains("upgrade gatehouse"), "{e}");

    // A URL that is not PostgreSQL, and one where nothing listens.
    let e = one_line(&migrate(home.path(), "mysql://root:hunter2@127.0.0.1/x"));
    assert!(e.contains("postgres://"), "{e}");
    assert!(!e.contains("hunter2"), "the password is never shown: {e}");
    let e = one_line(&migrate(
        home.path(),
        "postgres://someone:hunter2@127.0.0.1:1/none",
    ));
    assert!(e.contains("cannot connect to the database"), "{e}");
    assert!(!e.contains("hunter2"), "the password is never shown: {e}");
}

#[test]
fn a_named_database_serves_every_command_and_the_home_keeps_no_state() {
    let pg = cluster();
    let url = pg.database();
    let home = tempfile::tempdir().unwrap();
    let on_pg = |args: &[&str]| {
        on_database(&mut cli_command(home.path(), args), &url)
            .output()
            .unwrap()
    };
    // Not migrated yet: refused in one line that says what to run, and
    // never served from the home instead.
    for args in [
        &["chat", "new", "work"][..],
        &["pending"][..],
        &["serve"][..],
    ] {
        let e = one_line(&on_pg(args));
        assert!(e.contains("gatehouse db migrate"), "{args:?}: {e}");
    }
    assert!(!home.path().join("gatehouse.db").exists());

    let o = migrate(home.path(), &url);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = on_pg(&["chat", "new", "work"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = on_pg(&["chat", "new", "work"]);
    assert!(
        one_line(&o).contains("work"),
        "the name is taken in the database"
    );
    assert_eq!(
        pg.psql(name_of(&url), "SELECT owner FROM chats WHERE name = 'work'")
            .trim(),
        "alice"
    );
    assert!(
        !home.path().join("gatehouse.db").exists(),
        "nothing was written to the home's embedded database"
    );
    // The home without the URL is another deployment: it has no such chat.
    let o = cli_command(home.path(), &["chat", "new", "work"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A statement to set up (must succeed on both), then one that each
/// schema must refuse.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "a chat's name is 1-64 characters",
        "",
        "INSERT INTO chats (name, owner, created_at) VALUES ('', 'alice', 0)",
    ),
    (
        "an action's state is one the kernel knows",
        "",
        "INSERT INTO ledger (chat, kind, caller, person, args, state, created_at) VALUES ('c', 'action', 'a', 'a', '{}', 'sent', 0)",
    ),
    (
        "an action has a state",
        "",
        "INSERT INTO ledger (chat, kind, caller, person, args, created_at) VALUES ('c', 'action', 'a', 'a', '{}', 0)",
    ),
    (
        "an observation has none",
        "",
        "INSERT INTO ledger (chat, kind, caller, person, state, created_at) VALUES ('c', 'observation', 'a', 'a', 'pending', 0)",
    ),
    (
        "arguments are JSON",
        "",
        "INSERT INTO ledger (chat, kind, caller, person, args, state, created_at) VALUES ('c', 'action', 'a', 'a', '{nope', 'pending', 0)",
    ),
    (
        "arguments are a JSON object",
        "",
        "INSERT INTO ledger (chat, kind, caller, person, args, state, created_at) VALUES ('c', 'action', 'a', 'a', '[1]', 'pending', 0)",
    ),
    (
        "a gatekeeper's hosts are a JSON array",
        "",
        "INSERT INTO gatekeepers (name, digest, trust, hosts, settings, manifest, added_at) VALUES ('g', '0000000000000000000000000000000000000000000000000000000000000000', 'byo', '{}', '{}', '{}', 0)",
    ),
    (
        "a trust tier is byo or vetted",
        "",
        "INSERT INTO gatekeepers (name, digest, trust, hosts, settings, manifest, added_at) VALUES ('g', '0000000000000000000000000000000000000000000000000000000000000000', 'trusted', '[]', '{}', '{}', 0)",
    ),
    (
        "a rule names gatekeeper:tool",
        "",
        "INSERT INTO rules (tag, person, enabled_at) VALUES ('notag', 'alice', 0)",
    ),
    (
        "a published workflow version never changes",
        "INSERT INTO workflows (name, version, design, digest, published_by, published_at) VALUES ('w', 1, '{}', '0000000000000000000000000000000000000000000000000000000000000000', 'alice', 0)",
        "UPDATE workflows SET published_by = 'mallory'",
    ),
    (
        "a run step's tool set never changes",
        "INSERT INTO workflow_runs (id, workflow, version, initiator, chat, state, created_at, updated_at) VALUES (1, 'w', 1, 'alice', 'c', 'running', 0, 0); \
      INSERT INTO run_steps (run, step, position, gadget, input, tools, preds, status) VALUES (1, 's', 0, 'script', '', '[\"A:x\"]', '[]', 'pending')",
        "UPDATE run_steps SET tools = '[\"A:x\", \"A:y\"]'",
    ),
    (
        "an allowed-calls list never changes once requested",
        "INSERT INTO workflow_runs (id, workflow, version, initiator, chat, state, created_at, updated_at) VALUES (1, 'w', 1, 'alice', 'c', 'running', 0, 0); \
      INSERT INTO approval_requests (run, step, allowed, reason, state, created_at) VALUES (1, 's', '{}', 'r', 'pending', 0)",
        "UPDATE approval_requests SET allowed = '{\"A:x\": {}}'",
    ),
    (
        "a hook's binding never changes",
        "INSERT INTO ledger (id, chat, kind, caller, person, created_at) VALUES (1, 'c', 'hook', 'a', 'a', 0); \
      INSERT INTO hooks (id, chat, gatekeeper, trigger, gadget, kind, every_secs, created_by, created_at) VALUES (1, 'c', 'g', 't', 'x', 'schedule', 60, 'a', 0)",
        "UPDATE hooks SET gadget = 'other'",
    ),
    (
        "a collaborator is a known person",
        "",
        "INSERT INTO chats (name, owner, created_at) VALUES ('c', 'alice', 0); INSERT INTO collaborators (chat, \"user\", added_by, added_at) VALUES ('c', 'nobody', 'alice', 0)",
    ),
];

/// A fresh embedded database at the newest schema.
fn fresh_sqlite() -> (tempfile::TempDir, rusqlite::Connection) {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["db", "migrate"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = rusqlite::Connection::open(home.path().join("gatehouse.db")).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    (home, conn)
}

#[test]
fn both_schemas_refuse_the_same_hostile_writes_and_have_the_same_columns() {
    let pg = cluster();
    for (rule, setup, hostile) in REFUSED {
        let (_home, sqlite) = fresh_sqlite();
        let url = pg.database();
        assert!(migrate(_home.path(), &url).status.success());
        let db = name_of(&url);
        if !setup.is_empty() {
            sqlite
                .execute_batch(setup)
                .unwrap_or_else(|e| panic!("{rule}: the setup fails on SQLite: {e}"));
            pg.psql(db, setup);
        }
        assert!(
            sqlite.execute_batch(hostile).is_err(),
            "{rule}: SQLite accepted {hostile}"
        );
        let o = pg.psql_output(db, hostile);
        assert!(!o.status.success(), "{rule}: PostgreSQL accepted {hostile}");
    }

    // The positive control: what the kernel writes is accepted by both,
    // and moves the policy epoch on both.
    let (home, sqlite) = fresh_sqlite();
    let url = pg.database();
    assert!(migrate(home.path(), &url).status.success());
    let db = name_of(&url);
    let fine = "INSERT INTO users (name, created_at) VALUES ('alice', 0); \
                INSERT INTO chats (name, owner, created_at) VALUES ('c', 'alice', 0); \
                INSERT INTO collaborators (chat, \"user\", added_by, added_at) VALUES ('c', 'alice', 'alice', 0); \
                INSERT INTO ledger (chat, kind, caller, person, args, state, created_at) VALUES ('c', 'action', 'a', 'a', '{\"n\": 1}', 'pending', 0)";
    sqlite
        .execute_batch(fine)
        .expect("SQLite accepts the kernel's rows");
    pg.psql(db, fine);
    let epoch: i64 = sqlite
        .query_row("SELECT n FROM policy_epoch", [], |r| r.get(0))
        .unwrap();
    assert!(epoch > 0, "SQLite's epoch moved");
    assert_ne!(
        pg.psql(db, "SELECT n FROM policy_epoch").trim(),
        "0",
        "PostgreSQL's epoch moved"
    );

    // Same tables, same columns.
    for table in &texts(&sqlite, TABLES_SQL) {
        let mut columns = texts(&sqlite, &columns_sql(table));
        columns.sort();
        let theirs = pg.psql(
            db,
            &format!(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = '{table}' ORDER BY column_name COLLATE \"C\""
            ),
        );
        let theirs: Vec<String> = theirs.lines().map(str::to_owned).collect();
        assert_eq!(columns, theirs, "table {table}'s columns differ");
    }
}

/// The tables of an embedded database.
const TABLES_SQL: &str = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name";

/// The columns of `table` in an embedded database, in their order.
fn columns_sql(table: &str) -> String {
    format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid")
}

/// The one text column `sql` selects, every row.
fn texts(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    conn.prepare(sql)
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every row of `table` in the home as one text per row (columns joined by
/// U+001F, NULL as `<null>`), sorted, and how many.
fn sqlite_rows(conn: &rusqlite::Connection, table: &str, columns: &[String]) -> (usize, String) {
    let list = columns
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut st = conn
        .prepare(&format!("SELECT {list} FROM {table}"))
        .unwrap();
    let mut rows: Vec<String> = st
        .query_map([], |r| {
            let mut cells = Vec::new();
            for i in 0..columns.len() {
                cells.push(match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => "<null>".to_owned(),
                    rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    other => panic!("unexpected value {other:?} in {table}"),
                });
            }
            Ok(cells.join("\u{1f}"))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows.sort();
    (rows.len(), hex::encode(Sha256::digest(rows.join("\n"))))
}

/// The same over PostgreSQL's copy, computed by the server. (The
/// authority's key is a sealed row of `deployment_secrets` on both
/// engines: it arrives as it was, like every sealed value.)
fn postgres_rows(db: &str, table: &str, columns: &[String]) -> (usize, String) {
    let cells = columns
        .iter()
        .map(|c| format!("COALESCE(\"{c}\"::text, '<null>')"))
        .collect::<Vec<_>>()
        .join(", ");
    let out = cluster().psql(
        db,
        &format!(
            "SELECT count(*), encode(sha256(convert_to(COALESCE(string_agg(r, E'\\n' ORDER BY r COLLATE \"C\"), ''), 'UTF8')), 'hex') \
             FROM (SELECT concat_ws(chr(31), {cells}) AS r FROM {table}) t"
        ),
    );
    let (n, digest) = out.trim().split_once('|').expect("count|digest");
    (n.parse().unwrap(), digest.to_owned())
}

/// A home with actions in every state a quiet home can hold, an
/// observation set, a chat shared with a collaborator who opened it, and a
/// workflow run waiting on its approval request.
async fn lived_in_home() -> (World, Vec<(i64, ActionState)>) {
    let w = World::with_account(
        &["script"],
        Trust::Byo,
        &["alice", "bob"],
        ("bob", BOB),
        true,
    )
    .await;
    let k = &w.kernel;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);

    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                label_step(1, "waits"),
                label_step(1, "sent"),
                label_step(2, "refused"),
                label_step(404, "nowhere"),
            ]),
        )
        .await;
    let ids: Vec<i64> = out.as_array().unwrap()[1..]
        .iter()
        .map(pending_id)
        .collect();
    k.person("alice").approve(ids[1]).await.unwrap();
    k.person("alice").reject(ids[2]).await.unwrap();
    k.person("alice").approve(ids[3]).await.unwrap();

    // Shared, and opened: bob's observers are recorded.
    assert!(k.person("alice").share("work", "bob", false).unwrap());
    k.person("bob")
        .open_chat("work", &OpenRequest::default())
        .await
        .unwrap();

    // An action that expired before anyone decided it.
    w.chat_with("old", "alice", &[("issues", "ISSUES")]);
    let o = w.cli(&["chat", "set", "old", "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let late = w.stage_label_on("old", 2, "late").await;
    let staged = k.inspect().action(late).unwrap().unwrap().created_at;
    assert!(wait_until(Duration::from_secs(30), || {
        gatehouse::store::now_ms() > staged + 1100
    }));
    k.person("alice").approve(late).await.unwrap();

    // A workflow run waiting on its approval request.
    k.person("alice").publish_workflow(json!({
            "name": "hold",
            "services": {"ISSUES": "issues"},
            "steps": [
                {"id": "ask", "gadget": "script", "input": json!({"steps": [{"request": {
                    "allowed": {"ISSUES:addLabel": {"id": {"in": [1]}, "label": {"eq": "approved"}}},
                    "reason": "label issue 1"
                }}]}).to_string()},
                {"id": "label", "gadget": "script", "tools": ["ISSUES:addLabel"],
                 "input": json!({"steps": [{"certcall": {"key": "ISSUES", "tool": "addLabel",
                     "args": {"id": 1, "label": "approved"}}}]}).to_string()}
            ],
            "edges": [["ask", "label"]]
        })
        .to_string()
        .as_bytes())
    .unwrap();
    let run = k
        .person("alice")
        .start_workflow("hold", None, &["bob"])
        .await
        .unwrap();
    assert_eq!(run.state.to_string(), "waiting", "{:?}", run.steps);

    let states = vec![
        (ids[0], ActionState::Pending),
        (ids[1], ActionState::Applied),
        (ids[2], ActionState::Rejected),
        (ids[3], ActionState::Failed),
        (late, ActionState::Expired),
    ];
    for (id, state) in &states {
        let a = k.inspect().action(*id).unwrap().unwrap();
        assert_eq!(a.state, *state, "action #{id}");
    }
    (w, states)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_home_moves_into_postgres_whole_and_its_ids_continue() {
    let pg = cluster();
    let (w, states) = lived_in_home().await;
    let url = pg.database();
    let db = name_of(&url);

    // The world's own kernel is another live process on the home.
    let e = one_line(&w.cli(&["db", "copy", "--to", &url]));
    assert!(e.contains("other gatehouse process"), "{e}");
    assert_eq!(
        pg.psql(
            db,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'ledger'"
        )
        .trim(),
        "0",
        "a refused copy changes nothing"
    );
    let World {
        dir,
        tracker,
        kernel,
        ..
    } = w;
    drop(kernel);
    let home = dir.path();

    let o = cli_command(home, &["db", "copy", "--to", &url, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let copied: Value = serde_json::from_str(&stdout(&o)).unwrap();

    // Every table, row for row.
    let conn = rusqlite::Connection::open(home.join("gatehouse.db")).unwrap();
    let mut nonempty = 0;
    for table in &texts(&conn, TABLES_SQL) {
        let columns = texts(&conn, &columns_sql(table));
        let ours = sqlite_rows(&conn, table, &columns);
        let theirs = postgres_rows(db, table, &columns);
        assert_eq!(ours, theirs, "table {table} arrived different");
        nonempty += usize::from(ours.0 > 0);
    }
    for must in [
        "ledger",
        "decisions",
        "collaborators",
        "observers",
        "workflow_runs",
        "approval_requests",
        "run_steps",
        "accounts",
    ] {
        let n = pg.psql(db, &format!("SELECT count(*) FROM {must}"));
        assert_ne!(n.trim(), "0", "the home had rows in {must}");
    }
    assert!(
        nonempty >= 15,
        "a lived-in home: {nonempty} tables with rows"
    );

    // States and observations, as the kernel's words.
    for (id, state) in &states {
        assert_eq!(
            pg.psql(db, &format!("SELECT state FROM ledger WHERE id = {id}"))
                .trim(),
            state.to_string(),
            "action #{id}"
        );
    }
    let observed = pg.psql(
        db,
        "SELECT count(*) FROM ledger WHERE kind = 'observation' AND sources IS NOT NULL",
    );
    assert_ne!(observed.trim(), "0", "the observation set arrived");

    // The installed components and the authority's key came along.
    assert_eq!(
        pg.psql(db, "SELECT count(*) FROM components").trim(),
        copied["components"].to_string()
    );
    assert!(copied["components"].as_u64().unwrap() >= 2, "{copied}");
    let wrong = pg.psql(
        db,
        "SELECT count(*) FROM components c WHERE encode(sha256(c.bytes), 'hex') <> c.digest",
    );
    assert_eq!(wrong.trim(), "0", "every component matches its digest");
    assert_eq!(
        pg.psql(
            db,
            "SELECT count(*) FROM deployment_secrets WHERE name = 'certificate-authority'"
        )
        .trim(),
        "1"
    );

    // Ids are never reused (SPEC L1): the next id is above every id the
    // home ever handed out, and is the one the copy reported.
    let handed_out: i64 = conn
        .query_row("SELECT max(id) FROM ledger", [], |r| r.get(0))
        .unwrap();
    let next: i64 = pg
        .psql(
            db,
            "INSERT INTO ledger (chat, kind, caller, person, sources, created_at) VALUES ('work', 'observation', 'alice', 'alice', '[]', 0) RETURNING id",
        )
        .trim()
        .parse()
        .unwrap();
    assert_eq!(next, copied["next_ledger_id"].as_i64().unwrap());
    assert!(next > handed_out, "{next} > {handed_out}");

    // A second copy would mix two deployments: refused, nothing changed.
    let e = one_line(
        &cli_command(home, &["db", "copy", "--to", &url])
            .output()
            .unwrap(),
    );
    assert!(e.contains("already holds a Gatehouse deployment"), "{e}");
    let ours: i64 = conn
        .query_row("SELECT count(*) + 1 FROM ledger", [], |r| r.get(0))
        .unwrap();
    let theirs = pg.psql(db, "SELECT count(*) FROM ledger");
    assert_eq!(
        theirs.trim(),
        ours.to_string(),
        "the copy's rows and the one added"
    );

    // The home itself is untouched and still works.
    let o = cli_command(home, &["pending", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&states[0].0.to_string()));

    // And the deployment continues in PostgreSQL, served by a host whose
    // home is empty (it fetches the components from the database): the
    // pending action is approved and sent, and the workflow waiting on
    // its request runs on to the end once bob approves it.
    let host = tempfile::tempdir().unwrap();
    let on_pg = |args: &[&str], person: &str| {
        // The copy's secrets are sealed with the home's own key: the
        // operator moves it off the home and gives it to every host.
        let o = cli_command(host.path(), args)
            .env("GATEHOUSE_DATABASE_URL", &url)
            .env("GATEHOUSE_KEY_FILE", home.join("gatehouse.key"))
            .env("GATEHOUSE_USER", person)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    let pending = states[0].0;
    let out = on_pg(&["approve", &pending.to_string()], "alice");
    assert!(out.contains(&format!("#{pending} applied")), "{out}");
    assert_eq!(
        pg.psql(
            db,
            &format!("SELECT state FROM ledger WHERE id = {pending}")
        )
        .trim(),
        "applied"
    );
    let requests: Value =
        serde_json::from_str(&on_pg(&["workflow", "requests", "--json"], "bob")).unwrap();
    let request = requests
        .as_array()
        .and_then(|r| r.first())
        .and_then(|r| r["id"].as_i64())
        .unwrap_or_else(|| panic!("the copied request: {requests}"));
    let out = on_pg(&["workflow", "approve", &request.to_string()], "bob");
    assert!(
        out.contains("run 1 done"),
        "the run went on to its end: {out}"
    );
    assert!(
        tracker
            .issues()
            .iter()
            .any(|i| i.labels.iter().any(|l| l == "approved")),
        "the workflow's covered call reached the service"
    );
    assert_eq!(
        pg.psql(db, "SELECT state FROM workflow_runs").trim(),
        "done"
    );
}

/// Wait until `owner`'s presence is `want`, asking on `client`.
async fn presence_becomes(client: &tokio_postgres::Client, owner: &str, want: bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if Presence::is_alive(client, owner).await.unwrap() == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Liveness across hosts (SPEC P3): a host is present while its
/// connection lives, and a host killed with SIGKILL stops being present
/// without any clock, because PostgreSQL releases a dead connection's
/// advisory lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_is_present_while_its_connection_lives_and_gone_once_killed() {
    let pg = cluster();
    let url = pg.database();
    let db = DatabaseUrl::parse(&url).unwrap();
    let observer = postgres::connect(&db).await.unwrap();

    let a = Presence::hold(&db, "host-a").await.unwrap();
    assert!(Presence::is_alive(&observer, "host-a").await.unwrap());
    assert!(!Presence::is_alive(&observer, "host-b").await.unwrap());
    let twice = Presence::hold(&db, "host-a")
        .await
        .err()
        .expect("one owner, one host");
    assert!(
        twice.to_string().contains("already uses the owner token"),
        "{twice}"
    );
    assert!(
        Presence::is_alive(&observer, "host-a").await.unwrap(),
        "a refused second hold takes nothing away"
    );
    drop(a);
    assert!(
        presence_becomes(&observer, "host-a", false).await,
        "a closed connection ends the presence"
    );

    // Another process holds a presence, then is killed with SIGKILL.
    let mut host = pg
        .psql_session(gatehouse_e2e::postgres::name_of(&url))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let stdin = host.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "SELECT pg_advisory_lock({});",
            Presence::key("host-c")
        )
        .unwrap();
        stdin.flush().unwrap();
    }
    assert!(
        presence_becomes(&observer, "host-c", true).await,
        "the other process announced itself"
    );
    signal(host.id(), "KILL");
    let _ = host.wait();
    assert!(
        presence_becomes(&observer, "host-c", false).await,
        "a killed host is gone"
    );
}

/// A value PostgreSQL cannot hold (a NUL character in a text, left by a
/// hand edit of the home) stops the copy in one line naming the table, and
/// the database keeps nothing of it.
#[test]
fn a_copy_that_cannot_carry_a_value_leaves_the_database_empty() {
    let pg = cluster();
    let url = pg.database();
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["chat", "new", "work"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = rusqlite::Connection::open(home.path().join("gatehouse.db")).unwrap();
    conn.execute(
        "INSERT INTO users (name, created_at) VALUES (?1, 0)",
        ["nul\0person"],
    )
    .unwrap();
    drop(conn);

    let e = one_line(
        &cli_command(home.path(), &["db", "copy", "--to", &url])
            .output()
            .unwrap(),
    );
    assert!(e.contains("table users"), "{e}");
    assert!(e.contains("nothing was copied"), "{e}");
    let db = name_of(&url);
    for table in ["users", "chats", "ledger", "components"] {
        assert_eq!(
            pg.psql(db, &format!("SELECT count(*) FROM {table}")).trim(),
            "0",
            "{table} kept part of a failed copy"
        );
    }
}

fn status(home: &Path, url: Option<&str>) -> Output {
    let mut cmd = cli_command(home, &["db", "status", "--json"]);
    if let Some(url) = url {
        cmd.env("GATEHOUSE_DATABASE_URL", url);
    }
    cmd.output().expect("gatehouse runs")
}

/// `db status` says, in a shared database, which host holds each claim in
/// flight and whether that host is still present: the liveness a claim's
/// recovery rests on across machines (P3). It reads only: a database
/// that is not at this binary's schema is refused, not migrated.
#[tokio::test(flavor = "multi_thread")]
async fn db_status_names_each_claims_host_and_whether_it_is_present() {
    let pg = cluster();
    let url = pg.database();
    let name = name_of(&url);
    let home = tempfile::tempdir().unwrap();

    let e = one_line(&status(home.path(), Some(&url)));
    assert!(e.contains("is at schema 0"), "{e}");
    assert!(e.contains("gatehouse db migrate"), "{e}");
    assert_eq!(
        pg.psql(name, "SELECT to_regclass('ledger') IS NULL").trim(),
        "t",
        "status migrated nothing"
    );

    assert!(migrate(home.path(), &url).status.success());
    for (chat, owner) in [("one", "host-live"), ("two", "host-gone")] {
        pg.psql(
            name,
            &format!(
                "INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, state, claim_owner, created_at)
                 VALUES ('{chat}', 'action', 'g', 'ana', 'mail', 'send', '{{}}', 'applying', '{owner}', 0)"
            ),
        );
    }
    let db = DatabaseUrl::parse(&url).unwrap();
    let _live = Presence::hold(&db, "host-live").await.unwrap();
    let out = status(home.path(), Some(&url));
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let flights = s["in_flight"].as_array().unwrap();
    assert_eq!(flights.len(), 2, "{s}");
    assert_eq!(flights[0]["host"], "host-live", "{s}");
    assert_eq!(flights[0]["present"], true, "{s}");
    assert_eq!(flights[1]["host"], "host-gone", "{s}");
    assert_eq!(flights[1]["present"], false, "{s}");
    assert!(flights[0]["action"].as_i64() < flights[1]["action"].as_i64());
    // The words say the same, one line per claim.
    let mut words = cli_command(home.path(), &["db", "status"]);
    words.env("GATEHOUSE_DATABASE_URL", &url);
    let words = stdout(&words.output().unwrap());
    assert!(words.contains("by host-live (present)"), "{words}");
    assert!(words.contains("by host-gone (gone"), "{words}");

    // The home's own status: its schema, nothing in flight, no database
    // named.
    let out = status(home.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(s["schema"].as_i64().unwrap() >= 6, "{s}");
    assert_eq!(s["in_flight"], json!([]), "{s}");
}
