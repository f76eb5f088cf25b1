//! Issue 5 in a real browser: headless Chromium driven over WebDriver
//! (chromedriver + fantoccini), against the real server, kernel and tracker.
//!
//! Chromium comes from Debian's packages (`.ci/run` installs `chromium` and
//! `chromium-driver`). Without it these tests fail with one line saying how
//! to install it: they never skip.

use crate::web_api::{PATIENCE, people_world, serve, stage_labels};
use fantoccini::{Client, ClientBuilder, Locator};
use gatehouse::store::Trust;
use gatehouse_e2e::{World, call};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "Chromium is not installed: run `apt-get install -y chromium chromium-driver` (Debian; .ci/run does this)";

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// chromedriver on an ephemeral port, stopped when dropped.
pub(crate) struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    pub(crate) fn start() -> Driver {
        let driver = on_path("chromedriver").unwrap_or_else(|| panic!("{INSTALL}"));
        if on_path("chromium").is_none() && on_path("chromium-browser").is_none() {
            panic!("{INSTALL}");
        }
        let mut child = Command::new(driver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("chromedriver does not start ({e}); {INSTALL}"));
        let out = child.stdout.take().expect("chromedriver's stdout");
        let mut port = None;
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                port = rest.trim_end_matches('.').trim().parse().ok();
                break;
            }
        }
        let Some(port) = port else {
            let _ = child.kill();
            panic!("chromedriver did not report its port; {INSTALL}");
        };
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session.
pub(crate) async fn browser(driver: &Driver) -> Client {
    let binary = on_path("chromium")
        .or_else(|| on_path("chromium-browser"))
        .unwrap_or_else(|| panic!("{INSTALL}"));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,1600",
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("cannot start a Chromium session ({e}); {INSTALL}"))
}

/// Run `script` in the page until it returns true (or `PATIENCE` passes).
pub(crate) async fn wait_for(c: &Client, what: &str, script: &str) {
    let start = Instant::now();
    loop {
        let v = c.execute(script, vec![]).await.unwrap_or(Value::Null);
        if v == Value::Bool(true) {
            return;
        }
        if start.elapsed() > PATIENCE {
            let shot = screenshot(c, "timeout").await;
            panic!(
                "timed out waiting for {what}; screenshot at {}",
                shot.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What `script` returns, as text. The live view may be replacing the
/// element the script reads at that moment (it re-renders whatever
/// changed): a script that fails is asked again until [`PATIENCE`].
pub(crate) async fn text(c: &Client, script: &str) -> String {
    let start = Instant::now();
    loop {
        match c.execute(script, vec![]).await {
            Ok(v) => return v.as_str().unwrap_or_default().to_owned(),
            Err(e) if start.elapsed() > PATIENCE => panic!("the script runs: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Save a screenshot under `<target>/web-screenshots/` and print its path.
pub(crate) async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let target = exe
        .parent()
        .and_then(|deps| deps.parent())
        .and_then(|profile| profile.parent())
        .expect("target/<profile>/deps");
    let dir = target.join("web-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory");
    let path = dir.join(format!("{name}.png"));
    let png = c.screenshot().await.expect("a screenshot");
    std::fs::write(&path, png).expect("the screenshot is written");
    println!("screenshot: {}", path.display());
    path
}

pub(crate) async fn sign_in(c: &Client, w: &World, base: &str, user: &str) {
    let token = w
        .kernel
        .create_signin_token(user, 60_000)
        .expect("a sign-in token");
    c.goto(&format!("{base}/signin?token={token}"))
        .await
        .expect("the sign-in page opens");
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#signin"))
        .await
        .expect("a sign-in button")
        .click()
        .await
        .expect("the button clicks");
    wait_for(
        c,
        "the signed-in inbox",
        "return document.getElementById('who').textContent.includes('Signed in as')",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_signs_in_and_decides_three_actions_in_one_batch() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    let ids = stage_labels(&w, "work", &["first", "second", "third"]).await;
    let server = serve(&w).await;
    let c = browser(&driver).await;
    sign_in(&c, &w, &server.url(), "alice").await;
    wait_for(
        &c,
        "three pending actions",
        "return document.querySelectorAll('li.action').length === 3",
    )
    .await;

    // The prompt on the page is the terminal's text.
    let shown = text(
        &c,
        "return document.querySelector('li.action pre.prompt').textContent",
    )
    .await;
    let a = w.kernel.inspect().action(ids[0]).unwrap().unwrap();
    let description = w
        .kernel
        .inspect()
        .gatekeeper("issues")
        .unwrap()
        .unwrap()
        .manifest
        .tool("addLabel")
        .map(|t| t.description.clone());
    assert_eq!(shown, gatehouse::prompt::render(&a, description.as_deref()));

    // Live update: an action staged now appears without a reload.
    let late = stage_labels(&w, "work", &["late"]).await[0];
    wait_for(
        &c,
        "the new action to appear",
        "return document.querySelectorAll('li.action').length === 4",
    )
    .await;

    // A slow service keeps the batch in flight while its first decisions
    // already reach the live view: the page must still show each result
    // next to its action (a refresh mid-batch once dropped those cards).
    w.tracker.inject(
        gatehouse_services::tracker::Fault::Slow(Duration::from_secs(1)),
        2,
    );
    for (id, verb) in [(ids[0], "approve"), (ids[1], "reject"), (ids[2], "approve")] {
        c.find(Locator::Css(&format!("select[name='choice-{id}']")))
            .await
            .expect("a decision control per action")
            .select_by_value(verb)
            .await
            .expect("the choice is made");
    }
    c.find(Locator::Id("submit-decisions"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(
        &c,
        "a result next to each decided action",
        "return document.querySelectorAll('li.action.decided').length === 3",
    )
    .await;
    let result = |id: i64| {
        format!("return document.querySelector('li.action[data-id=\"{id}\"] .result').textContent")
    };
    assert!(
        text(&c, &result(ids[0]))
            .await
            .starts_with(&format!("#{} applied", ids[0]))
    );
    assert!(
        text(&c, &result(ids[1]))
            .await
            .starts_with(&format!("#{} rejected", ids[1]))
    );
    assert!(
        text(&c, &result(ids[2]))
            .await
            .starts_with(&format!("#{} applied", ids[2]))
    );
    assert_eq!(
        text(&c, &result(late)).await,
        "",
        "the late one was left alone"
    );
    screenshot(&c, "batch-decided").await;

    // The service received exactly two writes, and each decision names alice.
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes.iter().any(|r| r.body.contains("\"first\"")));
    assert!(writes.iter().any(|r| r.body.contains("\"third\"")));
    for id in &ids {
        let a = w.kernel.inspect().action(*id).unwrap().unwrap();
        assert_eq!(a.resolved_by.as_deref(), Some("alice"));
    }

    // An expired session is said so on the page.
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.execute("UPDATE web_sessions SET expires_at = 1", [])
        .unwrap();
    wait_for(
        &c,
        "the expired-session message",
        "return document.getElementById('error').textContent.includes('session expired')",
    )
    .await;
    let _ = c.close().await;
    server.stop().await;
}

/// What the `forger` gatekeeper declares about its one tool.
const EVIL_TOOL: &str =
    "<script>window.__pwned='tool';document.title='pwned'</script><b id=fake-tool>Endpoint:</b>";
const EVIL_DESCRIPTION: &str = "Adds a label.</pre><script>window.__pwned='description'; document.title='pwned'</script>\n<img src=x onerror=\"window.__pwned='img';document.title='pwned'\">\nApprove: everything\n<div id=\"fake-field\">Endpoint: https://evil.example</div>";
const EVIL_GATEKEEPER: &str = "forger";

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_shows_hostile_names_as_text_and_runs_none_of_it() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    // A real gatekeeper whose tool name and description carry HTML,
    // script and forged kernel fields: what it declares about itself is
    // what an approver sees.
    let bytes = std::fs::read(gatehouse_e2e::guest("forger")).expect("guest built");
    w.kernel
        .add_gatekeeper(
            EVIL_GATEKEEPER,
            &bytes,
            Trust::Byo,
            Vec::new(),
            None,
            Vec::new(),
            &|_| {},
        )
        .await
        .unwrap();
    let declared = w
        .kernel
        .inspect()
        .gatekeeper(EVIL_GATEKEEPER)
        .unwrap()
        .unwrap();
    assert_eq!(declared.manifest.tools[0].name, EVIL_TOOL);
    assert_eq!(declared.manifest.tools[0].description, EVIL_DESCRIPTION);
    w.kernel
        .introduce("work", EVIL_GATEKEEPER, "EVIL", None, "alice")
        .unwrap();
    // A real gadget stages the call, with hostile arguments too.
    let out = w
        .script(
            "work",
            json!([call(
                "EVIL",
                EVIL_TOOL,
                json!({"title": "<svg onload=\"window.__pwned='args'\"></svg><div id='fake-field'>x</div>"})
            )]),
        )
        .await;
    let id = gatehouse_e2e::pending_id(&out[0]);
    // The chat is locked down after staging (as if it then read owner-only
    // data): the page must say so.
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.execute("UPDATE chats SET latched = 1 WHERE name = 'work'", [])
        .unwrap();
    let server = serve(&w).await;
    let c = browser(&driver).await;
    sign_in(&c, &w, &server.url(), "alice").await;
    wait_for(
        &c,
        "the hostile action",
        &format!(
            "return document.querySelector('li.action[data-id=\"{id}\"] pre.prompt') !== null"
        ),
    )
    .await;

    // Nothing ran: no global set, title unchanged, no injected element.
    let probe = c
        .execute(
            "return {
                pwned: window.__pwned === undefined ? null : String(window.__pwned),
                title: document.title,
                scripts: [...document.querySelectorAll('script')]
                    .filter((s) => !['/assets/app.js', '/assets/push.js'].includes(s.getAttribute('src')))
                    .length,
                imgs: document.querySelectorAll('img').length,
                svgs: document.querySelectorAll('svg').length,
                fake: document.querySelectorAll('#fake-field, #fake-tool, b, div#fake-field').length,
                prompts: document.querySelectorAll('pre.prompt').length,
                promptChildren: document.querySelector('pre.prompt').children.length,
            }",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(probe["pwned"], Value::Null, "{probe}");
    assert_eq!(probe["title"], "Gatehouse inbox", "{probe}");
    assert_eq!(probe["scripts"], 0, "only the inbox's own scripts: {probe}");
    assert_eq!(probe["imgs"], 0, "{probe}");
    assert_eq!(probe["svgs"], 0, "{probe}");
    assert_eq!(probe["fake"], 0, "no fake field: {probe}");
    assert_eq!(probe["prompts"], 1, "{probe}");
    assert_eq!(
        probe["promptChildren"], 0,
        "the prompt is one text node: {probe}"
    );

    // The text shown is exactly the sanitiser's output, and no line of it
    // outside the quoted description and the fence forges a kernel field.
    let shown = text(
        &c,
        "return document.querySelector('pre.prompt').textContent",
    )
    .await;
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(shown, gatehouse::prompt::render(&a, Some(EVIL_DESCRIPTION)));
    assert!(
        !shown.lines().any(|l| l.starts_with("Endpoint:")),
        "{shown}"
    );
    assert_eq!(
        shown.lines().filter(|l| l.starts_with("Approve")).count(),
        1,
        "{shown}"
    );
    let banner = text(&c, "return document.getElementById('banners').textContent").await;
    assert!(
        banner.contains("Chat work is locked down"),
        "the lockdown banner: {banner:?}"
    );
    // The group heading shows the gatekeeper's name through the sanitiser.
    let heading = text(&c, "return document.querySelector('.group h2').textContent").await;
    assert_eq!(
        heading,
        format!(
            "Chat work · gatekeeper {}",
            gatehouse::prompt::inline(EVIL_GATEKEEPER)
        )
    );
    // The ledger page shows the names sanitised too, and runs nothing.
    c.goto(&format!("{}/ledger", server.url())).await.unwrap();
    wait_for(
        &c,
        "the ledger table",
        "return document.querySelectorAll('tr.entry').length === 1",
    )
    .await;
    let row = text(&c, "return document.querySelector('tr.entry').textContent").await;
    assert!(row.contains(&gatehouse::prompt::inline(EVIL_TOOL)), "{row}");
    assert!(!row.contains('<'), "{row}");
    let title = text(
        &c,
        "return document.title + (window.__pwned === undefined ? '' : String(window.__pwned))",
    )
    .await;
    assert_eq!(title, "Gatehouse inbox");
    c.back().await.unwrap();
    wait_for(
        &c,
        "the inbox again",
        "return document.querySelectorAll('li.action').length === 1",
    )
    .await;
    let shot = screenshot(&c, "hostile-inbox").await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
    let _ = c.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_reverts_an_applied_action_from_its_card() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    let id = stage_labels(&w, "work", &["oops"]).await[0];
    let server = serve(&w).await;
    let c = browser(&driver).await;
    sign_in(&c, &w, &server.url(), "alice").await;
    let card = |id: i64| format!("li.action[data-id=\"{id}\"]");
    let decide = |id: i64| {
        let c = c.clone();
        async move {
            wait_for(
                &c,
                "the action's card",
                &format!("return document.querySelector('{}') !== null", card(id)),
            )
            .await;
            c.find(Locator::Css(&format!("select[name='choice-{id}']")))
                .await
                .expect("a decision control")
                .select_by_value("approve")
                .await
                .expect("approve is chosen");
            c.find(Locator::Id("submit-decisions"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            wait_for(
                &c,
                "the decision's result",
                &format!(
                    "return document.querySelector('{}.decided') !== null",
                    card(id)
                ),
            )
            .await;
        }
    };
    decide(id).await;
    // Applied, and revertible: its card offers a Revert button.
    wait_for(
        &c,
        "the Revert button",
        &format!(
            "return document.querySelector('{} button.revert') !== null",
            card(id)
        ),
    )
    .await;
    assert_eq!(w.tracker.writes().len(), 1);
    c.find(Locator::Css(&format!("{} button.revert", card(id))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(
        &c,
        "the revert to be staged",
        &format!(
            "return document.querySelector('{} .revert-result.ok') !== null",
            card(id)
        ),
    )
    .await;
    let said = text(
        &c,
        &format!(
            "return document.querySelector('{} .revert-result').textContent",
            card(id)
        ),
    )
    .await;
    assert!(said.contains(&format!("to revert #{id}")), "{said}");
    assert_eq!(w.tracker.writes().len(), 1, "the button sends nothing");
    let revert = w
        .kernel
        .inspect()
        .pending(Some("work"))
        .unwrap()
        .into_iter()
        .find(|a| a.reverts == Some(id))
        .expect("a pending revert naming the original");
    assert_eq!(revert.tool, "removeLabel");
    // It waits in the inbox like any action, with a prompt that says what
    // it reverts, and is decided there.
    decide(revert.id).await;
    let prompt = text(
        &c,
        &format!(
            "return document.querySelector('{} pre.prompt').textContent",
            card(revert.id)
        ),
    )
    .await;
    assert!(
        prompt.contains(&format!("Reverts: action #{id}")),
        "{prompt}"
    );
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[1].method, "DELETE");
    assert_eq!(writes[1].path, "/issues/1/labels/oops");
    screenshot(&c, "reverted").await;
    let _ = c.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_decides_a_workflow_request_with_the_clis_allowed_calls() {
    use gatehouse_services::cloud::Cloud;
    let driver = Driver::start();
    let w = World::new();
    w.install("script");
    let cloud = Cloud::builder()
        .token("cloud-token-9d1e")
        .start()
        .expect("cloud starts");
    let k = &w.kernel;
    k.put_secret("cloud-token", "cloud-token-9d1e").unwrap();
    let bytes = std::fs::read(gatehouse_e2e::guest("cloud")).expect("guest built");
    k.add_gatekeeper(
        "cloud",
        &bytes,
        Trust::Byo,
        vec![cloud.host()],
        Some("cloud-token".into()),
        Vec::new(),
        &|_| {},
    )
    .await
    .unwrap();
    for p in ["alice", "bob"] {
        k.add_user(p).unwrap();
    }
    let script = |steps: Value| json!({ "steps": steps }).to_string();
    let design = json!({
        "name": "launch",
        "services": {"CLOUD": "cloud"},
        "steps": [
            {"id": "ask", "gadget": "script", "input": script(json!([{"request": {
                "allowed": {"CLOUD:launchInstance": {
                    "type": {"in": ["small", "medium"]},
                    "region": {"eq": "eu-1"}
                }},
                "reason": "launch one small web server in eu-1"
            }}]))},
            {"id": "launch", "gadget": "script", "tools": ["CLOUD:launchInstance"],
             "input": script(json!([{"certcall": {"key": "CLOUD", "tool": "launchInstance",
                 "args": {"type": "small", "region": "eu-1"}}}]))}
        ],
        "edges": [["ask", "launch"]]
    });
    k.publish_workflow(design.to_string().as_bytes(), "alice")
        .unwrap();
    let s = k
        .start_workflow("launch", None, "alice", &[])
        .await
        .unwrap();
    assert_eq!(s.state, "waiting");
    let run = s.run;
    let chat = k.inspect().workflow_run(run).unwrap().unwrap().chat;
    // bob sees the run's chat (a verified collaborator) but may not decide.
    k.share(&chat, "bob", "alice", false).unwrap();
    let opened = k
        .open_chat(&chat, "bob", &gatehouse::sharing::OpenRequest::default())
        .await
        .unwrap();
    assert!(
        !matches!(opened, gatehouse::sharing::OpenOutcome::Refused { .. }),
        "bob's open"
    );
    assert!(cloud.writes().is_empty());

    let server = serve(&w).await;
    // bob: the request is shown, with no approve button; the API refuses him.
    let c = browser(&driver).await;
    sign_in(&c, &w, &server.url(), "bob").await;
    c.goto(&format!("{}/workflows", server.url()))
        .await
        .unwrap();
    wait_for(
        &c,
        "the request",
        "return document.querySelectorAll('li.request pre.request-text').length === 1",
    )
    .await;
    let buttons = text(
        &c,
        "return String(document.querySelectorAll('li.request button').length)",
    )
    .await;
    assert_eq!(buttons, "0", "bob may not decide: no buttons");
    let bob = crate::web_api::Api::signed_in(&w, &server.url(), "bob").await;
    let a = bob
        .post("/api/workflow/requests/1/approve", json!({}))
        .await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(a.error().contains("may see chat"), "{}", a.text);
    assert!(cloud.writes().is_empty());
    let _ = c.close().await;

    // alice: the allowed-calls list on the page is the CLI's, exactly.
    let c = browser(&driver).await;
    sign_in(&c, &w, &server.url(), "alice").await;
    c.goto(&format!("{}/workflows", server.url()))
        .await
        .unwrap();
    wait_for(
        &c,
        "the approve button",
        "return document.querySelector('li.request button.approve') !== null",
    )
    .await;
    let shown = text(
        &c,
        "return document.querySelector('li.request pre.request-text').textContent",
    )
    .await;
    let cli = w.cli(&["workflow", "requests", "--run", &run.to_string()]);
    assert!(cli.status.success(), "{}", gatehouse_e2e::stderr(&cli));
    assert_eq!(shown, gatehouse_e2e::stdout(&cli));
    assert!(shown.contains("type = one of [small, medium]"), "{shown}");
    // Approving there lets the gated step continue: the launch is sent.
    c.find(Locator::Css("li.request button.approve"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(
        &c,
        "the run done",
        "return document.getElementById('request-status').textContent.includes('is done')",
    )
    .await;
    assert_eq!(cloud.writes().len(), 1, "{:?}", cloud.writes());
    wait_for(&c, "the invocations", "return document.querySelector('pre.invocations') !== null && document.querySelector('pre.invocations').textContent.includes('allowed')").await;
    let audit = text(
        &c,
        "return document.querySelector('pre.invocations').textContent",
    )
    .await;
    assert!(audit.contains("authority alice"), "{audit}");
    screenshot(&c, "workflow-decided").await;
    let _ = c.close().await;
    server.stop().await;
}

/// Issue 44 in a real browser: the "Notify me on this device" control
/// registers nothing until it is clicked; the click registers the inbox's
/// service worker at the origin's root (scope `/`) and asks the browser to
/// subscribe. Headless Chromium has no push service, so the subscription
/// itself never completes and nothing reaches the server: the stand-in
/// push service of `push.rs` covers the rest. The
/// browser is started with notifications allowed (a preference), since a
/// headless browser cannot show the permission prompt.
#[tokio::test(flavor = "multi_thread")]
async fn web_browser_registers_the_service_worker_only_when_asked_to_notify() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    let server = gatehouse::web::start(
        w.kernel.clone(),
        gatehouse::web::Config {
            port: 0,
            push: Some(gatehouse::push::Settings::new("mailto:ops@example.com")),
            ..gatehouse::web::Config::default()
        },
    )
    .await
    .expect("the server starts with push");
    let binary = on_path("chromium")
        .or_else(|| on_path("chromium-browser"))
        .unwrap_or_else(|| panic!("{INSTALL}"));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            "prefs": { "profile.default_content_setting_values.notifications": 1 },
        }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("cannot start a Chromium session ({e}); {INSTALL}"));
    sign_in(&c, &w, &server.url(), "alice").await;
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#push-enable"))
        .await
        .expect("the control is shown when push is on");
    let registered = "const done = arguments[arguments.length - 1];
        navigator.serviceWorker.getRegistration('/').then((r) => {
            // Between states a registration may have no worker for a moment.
            const w = r && (r.installing || r.waiting || r.active);
            done(r ? r.scope + ' ' + (w ? w.scriptURL : '') : '');
        }).catch((e) => done('error: ' + e));";
    let before = c
        .execute_async(registered, vec![])
        .await
        .expect("the script runs");
    assert_eq!(before, json!(""), "nothing is registered before the click");
    c.find(Locator::Css("#push-enable"))
        .await
        .expect("the control")
        .click()
        .await
        .expect("it clicks");
    let base = server.url();
    let want = json!(format!("{base}/ {base}/sw.js"));
    let started = Instant::now();
    let mut after = Value::Null;
    while after != want && started.elapsed() < PATIENCE {
        after = c
            .execute_async(registered, vec![])
            .await
            .expect("the script runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        after, want,
        "the worker is registered, its scope the whole inbox"
    );
    // No push service here: nothing reaches the server.
    assert!(w.kernel.push_devices("alice").await.unwrap().is_empty());
    c.close().await.expect("the browser closes");
    server.stop().await;
}
