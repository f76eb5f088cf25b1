//! SPEC H1, C5, L1, O3: hooks. A gatekeeper's trigger bound to a
//! gadget in a chat, disabled until a person who may decide enables it;
//! webhook deliveries verified on `serve`'s port; schedules fired by
//! `serve`; every turn under "hook N in CHAT", whose writes wait.
//!
//! Real parts: the `issues` gatekeeper (it declares `issueOpened` and
//! `hourly`), the `triage` gadget, the demo tracker (which delivers a
//! signed webhook when an issue is created), the real server and CLI.

use crate::surfaces::web_api::{PATIENCE, serve, serve_with};
use gatehouse::store::Trust;
use gatehouse_e2e::{World, add_hook, call, pending_id, stderr, stdout, wait_until};
use serde_json::{Value, json};
use std::time::Duration;

/// The CLI's `--json` answer, or a panic with its stderr.
fn cli_json(w: &World, args: &[&str]) -> Value {
    let o = w.cli(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

/// POST `body` to `url` with an optional signature header; the status.
async fn deliver(url: &str, body: &str, signature: Option<&str>) -> u16 {
    use http_body_util::Full;
    use hyper::body::Bytes;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = http::Request::post(url).header("content-type", "application/json");
    if let Some(s) = signature {
        req = req.header("x-gatehouse-signature", s);
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    tokio::time::timeout(PATIENCE, client.request(req))
        .await
        .expect("the server answers")
        .expect("the request reaches the server")
        .status()
        .as_u16()
}

fn hook_entries(w: &World, hook: i64) -> Vec<Value> {
    cli_json(w, &["log", "--hook", &hook.to_string(), "--json"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn firings(w: &World, hook: i64) -> Vec<Value> {
    cli_json(w, &["hook", "show", &hook.to_string(), "--json"])["firings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Bind `issues`' hourly schedule to `triage` in `work`, firing every
/// second; the CLI's `--json` answer.
fn add_schedule(w: &World) -> Value {
    cli_json(w, &add_hook("hourly", &["--every", "1", "--json"]))
}

/// Enable `hook` as alice through the CLI, which must succeed; its
/// stdout (the hook's prompt, then the confirmation).
fn enable(w: &World, hook: i64) -> String {
    let o = w.cli(&["hook", "enable", &hook.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// How many of `work`'s pending actions were staged by the turn of
/// `caller` (a hook's label).
fn staged_by(w: &World, caller: &str) -> usize {
    w.kernel
        .inspect()
        .pending(Some("work"))
        .unwrap()
        .iter()
        .filter(|a| a.caller == caller)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_a_verified_delivery_starts_a_turn_whose_write_waits() {
    let w = World::standard(Trust::Byo).await;
    w.users(&["alice", "bob"]);
    let server = serve(&w).await;
    let base = server.url();

    // Binding a trigger the gatekeeper does not declare is refused in one line.
    let o = w.cli(&add_hook("nope", &[]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("declares no trigger"), "{}", stderr(&o));
    assert!(stderr(&o).contains("issueOpened"), "{}", stderr(&o));
    // bob may not even see the chat: told as if it did not exist.
    let o = w.cli(&[&["--as", "bob"][..], &add_hook("issueOpened", &[])].concat());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no chat named \"work\""),
        "{}",
        stderr(&o)
    );

    let added = cli_json(&w, &add_hook("issueOpened", &["--url", &base, "--json"]));
    let hook = added["hook"]["id"].as_i64().unwrap();
    let url = added["url"].as_str().unwrap().to_owned();
    let secret = added["secret"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{base}/hooks/")), "{url}");
    assert_eq!(added["hook"]["enabled"], false);
    // Only a digest of the URL's token is stored.
    let token = url.rsplit('/').next().unwrap().to_owned();
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    let stored: String = db
        .query_row(
            "SELECT token_digest FROM hooks WHERE id = ?1",
            [hook],
            |r| r.get(0),
        )
        .unwrap();
    assert_ne!(stored, token);
    drop(db);

    // The hook is a ledger entry, in the same id sequence.
    let entries = hook_entries(&w, hook);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["kind"], "hook");
    assert_eq!(entries[0]["id"], hook);

    let body = json!({"event": "issueOpened", "delivery": 99, "issue": {"id": 1}}).to_string();
    let good = gatehouse::hooks::sign(&secret, body.as_bytes());
    let seen = w.tracker.requests().len();
    // A wrong or missing signature runs nothing: 401.
    let wrong = gatehouse::hooks::sign("not-the-secret", body.as_bytes());
    assert_eq!(deliver(&url, &body, Some(&wrong)).await, 401);
    assert_eq!(deliver(&url, &body, None).await, 401);
    assert_eq!(deliver(&url, &body, Some("sha256=00")).await, 401);
    // An unknown URL is 404.
    assert_eq!(
        deliver(
            &format!("{base}/hooks/{}", "0".repeat(64)),
            &body,
            Some(&good)
        )
        .await,
        404
    );
    // A disabled hook runs nothing: 409.
    assert_eq!(deliver(&url, &body, Some(&good)).await, 409);
    assert_eq!(
        w.tracker.requests().len(),
        seen,
        "nothing reached the service"
    );
    assert!(w.kernel.inspect().pending(Some("work")).unwrap().is_empty());
    assert!(firings(&w, hook).is_empty());

    // bob may not enable it (he may not see the chat); alice does, and is
    // shown the hook's prompt first.
    let o = w.cli(&["--as", "bob", "hook", "enable", &hook.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("no hook {hook}")),
        "{}",
        stderr(&o)
    );
    let shown = enable(&w, hook);
    assert!(
        shown.starts_with(&format!("Hook #{hook} (disabled)\n")),
        "{shown}"
    );
    assert!(shown.contains("Trigger: issueOpened (webhook"), "{shown}");
    assert!(shown.contains("Gadget: triage in chat work"), "{shown}");
    assert!(shown.contains("Runs as: hook"), "{shown}");
    assert!(shown.contains(&format!("enabled hook {hook}")), "{shown}");

    // The tracker tells of a new issue: an approved createIssue makes it
    // deliver a signed webhook, which starts the hook's turn.
    w.tracker.set_webhook(&url, &secret);
    let out = w
        .script(
            "work",
            json!([call(
                "ISSUES",
                "createIssue",
                json!({"title": "Crash on save"})
            )]),
        )
        .await;
    let create = pending_id(&out[0]);
    let d = w.kernel.person("alice").approve(create).await.unwrap();
    assert!(d.ok(), "{d:?}");
    let label = format!("hook {hook} in work for alice");
    assert!(
        wait_until(PATIENCE, || staged_by(&w, &label) > 0),
        "the hook's turn staged its write; deliveries: {:?}",
        w.tracker.deliveries()
    );
    let deliveries = w.tracker.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].status, Some(202));
    let waiting = w.kernel.inspect().pending(Some("work")).unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let a = &waiting[0];
    assert_eq!((a.tool.as_str(), a.person.as_str()), ("addLabel", "alice"));
    assert_eq!(a.args, r#"{"id":3,"label":"triaged"}"#);
    // Staged, never sent: the only write the tracker got is the create.
    assert_eq!(w.tracker.writes().len(), 1);

    // The ledger shows the hook, its enabling person and what its turn did.
    assert!(wait_until(PATIENCE, || firings(&w, hook)
        .first()
        .is_some_and(|f| f["outcome"] == "done")));
    let entries = hook_entries(&w, hook);
    assert_eq!(entries[0]["kind"], "hook");
    assert_eq!(entries[0]["resolved_by"], "alice");
    let kinds: Vec<(&str, &str)> = entries[1..]
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["caller"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("observation", label.as_str()), ("action", label.as_str())]
    );
    assert!(entries.iter().all(|e| e["hook"] == hook || e["id"] == hook));
    let log = stdout(&w.cli(&["log", "--hook", &hook.to_string()]));
    assert!(log.contains("hook, enabled by alice"), "{log}");

    // The same delivery again (a replay) runs nothing.
    let again = deliveries[0].body.clone();
    let sig = gatehouse::hooks::sign(&secret, again.as_bytes());
    assert_eq!(deliver(&url, &again, Some(&sig)).await, 409);
    assert_eq!(firings(&w, hook).len(), 1);

    // Disabled again, a fresh delivery runs nothing.
    let o = w.cli(&["hook", "disable", &hook.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fresh = json!({"event": "issueOpened", "delivery": 100, "issue": {"id": 2}}).to_string();
    let sig = gatehouse::hooks::sign(&secret, fresh.as_bytes());
    assert_eq!(deliver(&url, &fresh, Some(&sig)).await, 409);
    assert_eq!(firings(&w, hook).len(), 1);
    let listed = cli_json(&w, &["hooks", "--json"]);
    assert_eq!(listed[0]["enabled"], false, "{listed}");
    assert_eq!(listed[0]["enabled_by"], "alice", "{listed}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_a_schedule_fires_and_a_latched_chat_makes_no_outbound_call() {
    let w = World::standard(Trust::Byo).await;
    w.kernel.operator().add_user("alice").unwrap();
    let server = serve_with(
        &w,
        gatehouse::web::Config {
            tick: Duration::from_millis(100),
            ..gatehouse::web::Config::default()
        },
    )
    .await;
    // --every only for schedules.
    let o = w.cli(&add_hook("issueOpened", &["--every", "1"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("only for schedules"), "{}", stderr(&o));
    let added = add_schedule(&w);
    let hook = added["hook"]["id"].as_i64().unwrap();
    assert_eq!(added["url"], Value::Null);
    // Disabled: it never fires, however long serve runs; enabled, it does.
    assert!(firings(&w, hook).is_empty());
    enable(&w, hook);
    let label = format!("hook {hook} in work for alice");
    assert!(
        wait_until(PATIENCE, || firings(&w, hook)
            .iter()
            .any(|f| f["outcome"] == "done")),
        "the schedule fired: {:?}",
        firings(&w, hook)
    );
    assert!(staged_by(&w, &label) > 0, "its writes wait");
    assert!(w.tracker.writes().is_empty(), "nothing was sent");

    // The chat locks down (it read owner-only data): the hook still fires,
    // but its turn makes no outbound request.
    w.lock_down("work");
    // Every firing begun before the latch finishes; then one more fires.
    let ids = |f: &[Value]| {
        f.iter()
            .map(|x| x["id"].as_i64().unwrap())
            .max()
            .unwrap_or(0)
    };
    assert!(wait_until(PATIENCE, || firings(&w, hook)
        .iter()
        .all(|f| f["outcome"] != "running")));
    let seen = w.tracker.requests().len();
    let last = ids(&firings(&w, hook));
    assert!(wait_until(PATIENCE, || {
        let f = firings(&w, hook);
        f.iter()
            .any(|x| x["id"].as_i64().unwrap() > last && x["outcome"] != "running")
    }));
    assert_eq!(
        w.tracker.requests().len(),
        seen,
        "no outbound request from a latched chat"
    );
    let f = firings(&w, hook);
    let latest = f.iter().find(|x| x["id"].as_i64().unwrap() > last).unwrap();
    assert_eq!(latest["outcome"], "failed", "{latest}");
    assert!(
        latest["note"].as_str().unwrap().contains("locked down"),
        "{latest}"
    );
    server.stop().await;
}

/// Fire `hook`'s schedule until a firing of it newer than `after` has
/// ended (the kernel's own schedule pass, as `serve` calls it); that
/// firing. Waits for the condition, within `PATIENCE`.
async fn next_firing(w: &World, hook: i64, after: i64) -> Value {
    let start = std::time::Instant::now();
    loop {
        w.kernel
            .fire_due_schedules()
            .await
            .expect("a schedule pass");
        let ended = firings(w, hook)
            .into_iter()
            .find(|f| f["id"].as_i64().unwrap_or(0) > after && f["outcome"] != "running");
        if let Some(f) = ended {
            return f;
        }
        assert!(start.elapsed() < PATIENCE, "hook {hook} did not fire");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SPEC H1: a hook names its gadget by digest. Re-installing other code
/// under the gadget's name does not change what an enabled hook runs: its
/// next firing runs nothing (recorded as refused, the hook disabled, saying
/// why) until a person enables it again, shown the new code's digest in its
/// prompt.
#[tokio::test(flavor = "multi_thread")]
async fn a_hook_runs_only_the_code_it_was_enabled_for() {
    let w = World::standard(Trust::Byo).await;
    w.kernel.operator().add_user("alice").unwrap();
    let triage = w.kernel.inspect().gadget("triage").unwrap().unwrap().digest;
    let script = w.kernel.inspect().gadget("script").unwrap().unwrap().digest;
    assert_ne!(triage, script);
    let added = add_schedule(&w);
    let hook = added["hook"]["id"].as_i64().unwrap();
    assert_eq!(added["hook"]["gadget_digest"], triage.as_str());
    let shown = enable(&w, hook);
    assert!(
        shown.contains(&format!("Code: sha256 {triage} ")),
        "the prompt names the code: {shown}"
    );
    let first = next_firing(&w, hook, 0).await;
    assert_eq!(first["outcome"], "done", "{first}");
    let label = format!("hook {hook} in work for alice");
    let staged = |w: &World| staged_by(w, &label);
    let before = staged(&w);
    assert!(before > 0, "triage's turn staged its write");

    // Other code under the same name.
    let path = gatehouse_e2e::guest("script")
        .to_string_lossy()
        .into_owned();
    let o = w.cli(&["install", &path, "--name", "triage"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        w.kernel.inspect().gadget("triage").unwrap().unwrap().digest,
        script
    );

    // The next firing runs nothing, says why, and disables the hook.
    let refused = next_firing(&w, hook, first["id"].as_i64().unwrap()).await;
    assert_eq!(refused["outcome"], "refused", "{refused}");
    let note = refused["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("was re-installed since the hook was enabled")
            && note.contains(&triage)
            && note.contains(&script)
            && note.contains(&format!("gatehouse hook enable {hook}")),
        "{note}"
    );
    assert_eq!(staged(&w), before, "no turn ran");
    let listed = cli_json(&w, &["hooks", "--json"]);
    assert_eq!(listed[0]["enabled"], false, "{listed}");
    assert_eq!(listed[0]["gadget_digest"], triage.as_str(), "{listed}");

    // Its prompt shows the new code and the change; enabling it again
    // runs the new code.
    let shown = stdout(&w.cli(&["hook", "show", &hook.to_string()]));
    assert!(
        shown.contains(&format!("Code: sha256 {script} ")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "Changed: gadget triage was re-installed since this hook was set up to run sha256 {triage}"
        )),
        "{shown}"
    );
    enable(&w, hook);
    assert_eq!(
        cli_json(&w, &["hooks", "--json"])[0]["gadget_digest"],
        script.as_str()
    );
    let again = next_firing(&w, hook, refused["id"].as_i64().unwrap()).await;
    assert_ne!(again["outcome"], "refused", "{again}");
}
