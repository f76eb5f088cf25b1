//! Secrets, on a home and in a shared database: what a deployment keeps
//! and prints.
//!
//! - Secrets at rest: an operator credential, a person's account token,
//!   a webhook's signing key, the idempotency secret and the certificate
//!   authority's key are never in plaintext in the home's files nor in
//!   PostgreSQL's rows; they are sealed with the operator's key.
//! - The key: a wrong key is refused in one line naming both keys; a
//!   shared database without one is refused in one line saying how to
//!   make one; `key rotate` seals everything again and the old key is
//!   then refused; an older home's plaintext is sealed on open and still
//!   sends with the right token.
//! - The URL: `--help` and every error line never carry the database's
//!   password, whatever form the URL takes.
//! - TLS: `sslmode=verify-full` with the cluster's authority connects and
//!   serves, `sslmode=require` works, and another authority is refused in
//!   one line naming the certificate problem.

use gatehouse::seal::{Key, Place};
use gatehouse::store::Trust;
use gatehouse_e2e::postgres::{Authority, cluster, name_of};
use gatehouse_e2e::{
    SHARED_KEY, TOKEN, World, add_hook, cli_command, on_database, one_line, stderr, stdout,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

const BOB: &str = "tok-bob-7d41-account";

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// Every byte of every file under `dir` but the home's own key file.
fn bytes_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n != "gatehouse.key") {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A key file of a fresh key, owner-only.
fn key_file(dir: &Path, name: &str) -> PathBuf {
    let o = cli_command(dir, &["key", "new"]).output().unwrap();
    let path = dir.join(name);
    std::fs::write(&path, ok(o)).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// The deployment secrets of the home's file, opened with `key`.
fn deployment_secrets(db: &Path, key: &Key) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn
        .prepare("SELECT name, value FROM deployment_secrets ORDER BY name")
        .unwrap();
    st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(|r| {
            let (name, value) = r.unwrap();
            let plain = key
                .open_text(Place::new("deployment_secrets", &name), &value)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, plain.to_string())
        })
        .collect()
}

/// A world whose every kind of secret is kept: the operator credential
/// (the standard world's), bob's account token, a webhook's signing key,
/// the idempotency secret (made at open) and the certificate authority's
/// key (made by a workflow's start). Returns the webhook's signing key.
async fn with_every_secret(w: &World) -> String {
    w.users(&["alice", "bob"])
        .connect("bob", "issues", BOB, true);
    let k = &w.kernel;
    let added: Value = serde_json::from_str(&ok(w.cli(&add_hook(
        "issueOpened",
        &["--url", "http://127.0.0.1:9", "--json"],
    ))))
    .unwrap();
    let signing = added["secret"].as_str().unwrap().to_owned();
    k.person("alice")
        .publish_workflow(
            json!({
                "name": "hold",
                "services": {"ISSUES": "issues"},
                "steps": [
                    {"id": "ask", "gadget": "script", "input": json!({"steps": [{"request": {
                        "allowed": {"ISSUES:addLabel": {"id": {"in": [1]}, "label": {"eq": "ok"}}},
                        "reason": "label issue 1"
                    }}]}).to_string()}
                ],
                "edges": []
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
    k.person("alice")
        .start_workflow("hold", None, &["bob"])
        .await
        .unwrap();
    signing
}

#[tokio::test(flavor = "multi_thread")]
async fn a_homes_secrets_never_rest_in_plaintext() {
    let w = World::with_tokens(&[BOB]);
    w.install("script");
    w.install("triage");
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let signing = with_every_secret(&w).await;

    let key = Key::from_file(&w.home().join("gatehouse.key")).expect("the home's own key");
    let opened = deployment_secrets(&w.home().join("gatehouse.db"), &key);
    let names: Vec<&str> = opened.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["certificate-authority", "idempotency"]);
    assert!(
        !w.home().join("ca").join("ca.key").exists(),
        "no key file of the authority's"
    );
    let mut secrets = vec![TOKEN.to_owned(), BOB.to_owned(), signing];
    secrets.extend(opened.into_iter().map(|(_, v)| v));
    for (path, bytes) in bytes_under(w.home()) {
        for s in &secrets {
            assert!(
                !contains(&bytes, s),
                "{} holds a secret in plaintext",
                path.display()
            );
        }
    }
    // The home's key file is owner-only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(w.home().join("gatehouse.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_rows_hold_no_secret_in_plaintext_and_a_host_needs_the_key() {
    let pg = cluster();
    let url = pg.database();
    let db = name_of(&url);
    let w = World::standard_shared(&url, Trust::Byo, Vec::new()).await;
    let signing = with_every_secret(&w).await;
    let key = gatehouse_e2e::shared_key();
    let rows = |table: &str| pg.psql(db, &format!("SELECT t::text FROM {table} t"));
    let mut secrets = vec![TOKEN.to_owned(), BOB.to_owned(), signing];
    for line in pg
        .psql(db, "SELECT name || '|' || value FROM deployment_secrets")
        .lines()
    {
        let (name, value) = line.split_once('|').unwrap();
        let plain = key
            .open_text(Place::new("deployment_secrets", name), value)
            .unwrap();
        secrets.push(plain.to_string());
    }
    assert_eq!(secrets.len(), 5, "the authority and the idempotency secret");
    for table in ["secrets", "deployment_secrets", "hooks", "accounts"] {
        let text = rows(table);
        for s in &secrets {
            assert!(!text.contains(s.as_str()), "{table} holds a secret: {text}");
        }
    }

    // A host without the key, or with another, opens nothing.
    let host = tempfile::tempdir().unwrap();
    let e = one_line(
        &cli_command(host.path(), &["pending"])
            .env("GATEHOUSE_DATABASE_URL", &url)
            .output()
            .unwrap(),
    );
    assert!(e.contains("gatehouse key new > FILE"), "{e}");
    assert!(e.contains("GATEHOUSE_KEY_FILE"), "{e}");
    let other = key_file(host.path(), "other.key");
    let e = one_line(
        &cli_command(host.path(), &["pending"])
            .env("GATEHOUSE_DATABASE_URL", &url)
            .env("GATEHOUSE_KEY_FILE", &other)
            .output()
            .unwrap(),
    );
    assert!(e.contains(&format!("sealed with key {}", key.id())), "{e}");
    assert!(e.contains("GATEHOUSE_KEY_FILE"), "{e}");
    // With the key, the CLI is one more host.
    ok(
        on_database(&mut cli_command(host.path(), &["pending"]), &url)
            .output()
            .unwrap(),
    );

    // Rotated on the database (its hosts stopped): every value sealed
    // again in one transaction, the old key refused, the new one serves.
    drop(w);
    let new = key_file(host.path(), "new.key");
    let out = ok(on_database(
        &mut cli_command(host.path(), &["key", "rotate", "--new-key-file"]),
        &url,
    )
    .arg(&new)
    .output()
    .unwrap());
    assert!(out.contains("sealed 5 secret(s) again"), "{out}");
    let new_key = Key::from_file(&new).unwrap();
    let e = one_line(
        &on_database(&mut cli_command(host.path(), &["pending"]), &url)
            .output()
            .unwrap(),
    );
    assert!(
        e.contains(&format!("sealed with key {}", new_key.id())),
        "{e}"
    );
    ok(cli_command(host.path(), &["pending"])
        .env("GATEHOUSE_DATABASE_URL", &url)
        .env("GATEHOUSE_KEY_FILE", &new)
        .output()
        .unwrap());
    for line in pg
        .psql(db, "SELECT name || '|' || value FROM deployment_secrets")
        .lines()
    {
        let (name, value) = line.split_once('|').unwrap();
        let place = Place::new("deployment_secrets", name);
        assert!(key.open_text(place, value).is_err(), "{name}: the old key");
        assert!(new_key.open_text(place, value).is_ok(), "{name}");
    }
}

/// `key rotate` seals every secret again in one transaction: the new key
/// opens them (an action approved afterwards is sent with the right
/// token), and the old key is refused in one line.
#[tokio::test(flavor = "multi_thread")]
async fn rotation_moves_every_secret_to_the_new_key_and_the_old_is_refused() {
    let w = World::standard(Trust::Byo).await;
    let id = w.stage_label("rotated").await;
    let home = w.home().to_owned();
    let old = home.join("old.key");
    std::fs::copy(home.join("gatehouse.key"), &old).unwrap();
    let keys = tempfile::tempdir().unwrap();
    let new = key_file(keys.path(), "new.key");
    let World {
        dir,
        tracker,
        kernel,
        ..
    } = w;
    drop(kernel);

    let out = ok(cli_command(&home, &["key", "rotate", "--new-key-file"])
        .arg(&new)
        .output()
        .unwrap());
    assert!(out.contains("sealed 2 secret(s) again"), "{out}");
    assert!(out.contains("removed the home's own key file"), "{out}");
    assert!(!home.join("gatehouse.key").exists());

    let with = |key: &Path, args: &[&str]| {
        cli_command(&home, args)
            .env("GATEHOUSE_KEY_FILE", key)
            .output()
            .unwrap()
    };
    let new_id = Key::from_file(&new).unwrap().id().to_owned();
    let e = one_line(&with(&old, &["pending"]));
    assert!(e.contains(&format!("sealed with key {new_id}")), "{e}");
    // Given no key, the home makes a new one of its own: refused the same.
    let e = one_line(&cli_command(&home, &["pending"]).output().unwrap());
    assert!(e.contains(&format!("sealed with key {new_id}")), "{e}");
    let out = ok(with(&new, &["key", "show"]));
    assert!(out.contains(&new_id), "{out}");

    let out = ok(with(&new, &["approve", &id.to_string()]));
    assert!(out.contains(&format!("#{id} applied")), "{out}");
    assert!(
        tracker
            .issues()
            .iter()
            .any(|i| i.labels.iter().any(|l| l == "rotated")),
        "sent with the operator's token, opened with the new key"
    );
    drop(dir);
}

/// A home an older Gatehouse wrote (plaintext secrets, the authority's
/// key as a file, no key file, schema 11) is sealed when it opens, and
/// still works: an approval is sent with the person's own token.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_homes_plaintext_is_sealed_on_open_and_still_sends() {
    let w = World::with_account(
        &["script"],
        Trust::Byo,
        &["alice", "bob"],
        ("bob", BOB),
        true,
    )
    .await;
    w.chat_with("work", "bob", &[("issues", "ISSUES")]);
    // The chat is bob's: his turns use his own account.
    let id = w.stage_label_on("work", 1, "bobs").await;
    let home = w.home().to_owned();
    let World {
        dir,
        tracker,
        kernel,
        ..
    } = w;
    drop(kernel);

    // As an older Gatehouse left it.
    let key = Key::from_file(&home.join("gatehouse.key")).unwrap();
    let seed = "ab".repeat(32);
    {
        let conn = rusqlite::Connection::open(home.join("gatehouse.db")).unwrap();
        conn.execute_batch(&format!(
            "UPDATE secrets SET value = '{TOKEN}' WHERE name = 'tracker-token';
             UPDATE secrets SET value = '{BOB}' WHERE name = 'account/bob/issues/main';
             UPDATE deployment_secrets SET value = '{}' WHERE name = 'idempotency';
             DELETE FROM deployment_secrets WHERE name = 'certificate-authority';
             PRAGMA user_version = 11;",
            "cd".repeat(32)
        ))
        .unwrap();
    }
    std::fs::create_dir_all(home.join("ca")).unwrap();
    std::fs::write(home.join("ca").join("ca.key"), hex::decode(&seed).unwrap()).unwrap();
    std::fs::remove_file(home.join("gatehouse.key")).unwrap();
    drop(key);

    let out = ok(cli_command(&home, &["approve", &id.to_string()])
        .env("GATEHOUSE_USER", "bob")
        .output()
        .unwrap());
    assert!(out.contains(&format!("#{id} applied")), "{out}");
    let sent = tracker.writes();
    assert!(
        sent.iter().any(
            |r| r.authorization.as_deref().is_some_and(|a| a.contains(BOB))
                && r.body.contains("bobs")
        ),
        "sent with bob's own token"
    );
    assert!(!home.join("ca").join("ca.key").exists(), "moved in, sealed");
    let key = Key::from_file(&home.join("gatehouse.key")).expect("a key made on open");
    let opened = deployment_secrets(&home.join("gatehouse.db"), &key);
    assert!(opened.contains(&("certificate-authority".into(), seed.clone())));
    assert!(opened.contains(&("idempotency".into(), "cd".repeat(32))));
    for (path, bytes) in bytes_under(&home) {
        for s in [TOKEN, BOB, &seed, &"cd".repeat(32)] {
            assert!(
                !contains(&bytes, s),
                "{} still holds a secret in plaintext",
                path.display()
            );
        }
    }
    drop(dir);
}

/// A password of the characters that broke the old mask.
fn password() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9/?@:#% &=+;,$!*()-]{1,12}".prop_map(|p| format!("Pw9{p}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `--help` (which used to print the environment's value) and the error
    /// line of a `db status` that cannot connect never carry the password,
    /// however the URL carries it.
    #[test]
    fn help_and_errors_never_print_the_databases_password(
        pw in password(),
        form in 0usize..4,
    ) {
        let enc = percent_encode(&pw);
        let url = match form {
            0 => format!("postgres://alice:{pw}@127.0.0.1:1/gh"),
            1 => format!("postgres://alice:{enc}@127.0.0.1:1/gh?sslmode=disable"),
            2 => format!("postgresql://alice@127.0.0.1:1/gh?password={pw}"),
            _ => format!("postgres://127.0.0.1:1/gh?sslmode=disable&password={enc}"),
        };
        let home = tempfile::tempdir().unwrap();
        let mut printed = String::new();
        for args in [&["--help"][..], &["db", "--help"][..], &["db", "status"][..], &["db", "migrate"][..]] {
            let o = cli_command(home.path(), args)
                .env("GATEHOUSE_DATABASE_URL", &url)
                .env("GATEHOUSE_KEY", SHARED_KEY)
                .output()
                .unwrap();
            printed.push_str(&stdout(&o));
            printed.push_str(&stderr(&o));
        }
        prop_assert!(printed.contains("GATEHOUSE_DATABASE_URL"), "{printed}");
        for secret in [&pw, &enc] {
            prop_assert!(!printed.contains(secret.as_str()), "{url}: {printed}");
        }
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The cluster's URL for a fresh database with `options`.
fn tls_url(host: &str, options: &str) -> String {
    let pg = cluster();
    let name = name_of(&pg.database()).to_owned();
    format!(
        "postgres://gatehouse:never-shown-pw@{host}:{}/{name}?{options}",
        pg.port()
    )
}

#[test]
fn verify_full_connects_and_serves_and_another_authority_is_refused() {
    let pg = cluster();
    let ca = pg.ca_file().display().to_string();
    let home = tempfile::tempdir().unwrap();
    let on = |url: &str, args: &[&str]| {
        on_database(&mut cli_command(home.path(), args), url)
            .output()
            .unwrap()
    };
    for host in ["127.0.0.1", "localhost"] {
        let url = tls_url(host, &format!("sslmode=verify-full&sslrootcert={ca}"));
        ok(on(&url, &["db", "migrate"]));
        // A kernel opens on it and serves a command.
        ok(on(&url, &["chat", "new", "work"]));
        let chats = ok(on(&url, &["chats", "--json"]));
        assert!(chats.contains("work"), "{chats}");
        assert_eq!(
            pg.psql(
                name_of(url.split('?').next().unwrap()),
                "SELECT owner FROM chats"
            )
            .trim(),
            "alice"
        );
    }
    // Reached at 127.0.0.1 under a name its certificate does not name:
    // verify-full refuses the name, verify-ca checks the chain only.
    let pg_name = name_of(&pg.database()).to_owned();
    let elsewhere = |mode: &str| {
        format!(
            "postgres://gatehouse@db.example:{}/{pg_name}?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={ca}",
            pg.port()
        )
    };
    let e = one_line(&on(&elsewhere("verify-full"), &["db", "migrate"]));
    assert!(e.contains("is not for the host db.example"), "{e}");
    assert!(e.contains("verify-full"), "{e}");
    ok(on(&elsewhere("verify-ca"), &["db", "migrate"]));

    // require encrypts without an authority to check against.
    let url = tls_url("127.0.0.1", "sslmode=require");
    ok(on(&url, &["db", "migrate"]));
    ok(on(&url, &["chat", "new", "work"]));

    // Another authority: refused in one line that names the problem.
    let other = home.path().join("other-ca.pem");
    std::fs::write(&other, Authority::new("Not the cluster's CA").unwrap().pem).unwrap();
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = tls_url(
            "127.0.0.1",
            &format!("sslmode={mode}&sslrootcert={}", other.display()),
        );
        let e = one_line(&on(&url, &["db", "migrate"]));
        assert!(e.contains("certificate was refused"), "{mode}: {e}");
        assert!(
            e.contains("not signed by the authority in sslrootcert="),
            "{mode}: {e}"
        );
        assert!(e.contains("give sslrootcert the authority"), "{mode}: {e}");
        assert!(!e.contains("never-shown-pw"), "{mode}: {e}");
    }
}
