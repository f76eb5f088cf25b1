//! Issues 5 and 44 in a real browser: headless Chromium driven over
//! WebDriver (chromedriver + fantoccini, see `chromium.rs`), against the
//! real server, kernel and tracker: deciding with the mouse and with the
//! keyboard, a phone-size run, attacker text that tries to draw controls,
//! and axe-core on every page at desktop and phone size. Screenshots go to
//! `<target>/screenshots/`.

use crate::chromium::{Driver, INSTALL, Screen, axe_source, browser, on_path, screenshot_dir};
use crate::surfaces::web_api::{PATIENCE, people_world, serve, serve_with, stage_labels};
use fantoccini::{Client, ClientBuilder, Locator};
use gatehouse::store::Trust;
use gatehouse::web::Server;
use gatehouse_e2e::{World, call};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
    json_of(c, script)
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What `script` returns, retried like [`text`].
async fn json_of(c: &Client, script: &str) -> Value {
    let start = Instant::now();
    loop {
        match c.execute(script, vec![]).await {
            Ok(v) => return v,
            Err(e) if start.elapsed() > PATIENCE => panic!("the script runs: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Save a screenshot under `<target>/screenshots/` and print its path.
pub(crate) async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let path = screenshot_dir().join(format!("{name}.png"));
    let png = c.screenshot().await.expect("a screenshot");
    std::fs::write(&path, png).expect("the screenshot is written");
    println!("screenshot: {}", path.display());
    path
}

pub(crate) async fn sign_in(c: &Client, w: &World, base: &str, user: &str) {
    let token = w.signin_token(user);
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

/// The CSS selector of action `id`'s card.
fn card(id: i64) -> String {
    format!("li.action[data-id=\"{id}\"]")
}

/// A script: whether the inbox shows exactly `n` cards.
fn cards(n: usize) -> String {
    format!("return document.querySelectorAll('li.action').length === {n}")
}

/// A script: whether an element matches `css`.
fn present(css: &str) -> String {
    format!("return document.querySelector('{css}') !== null")
}

/// A script: the text of the first element matching `css`.
fn text_of(css: &str) -> String {
    format!("return document.querySelector('{css}').textContent")
}

/// A browser on `screen` with `user` signed in to `server`'s inbox.
async fn signed_in(
    driver: &Driver,
    screen: Screen,
    w: &World,
    server: &Server,
    user: &str,
) -> Client {
    let c = browser(driver, screen).await;
    sign_in(&c, w, &server.url(), user).await;
    c
}

/// Go to `path` on `server` and wait until the page is `ready` (a JS
/// expression), named `page` in a timeout.
async fn open_page(c: &Client, server: &Server, page: &str, path: &str, ready: &str) {
    c.goto(&format!("{}{path}", server.url()))
        .await
        .unwrap_or_else(|e| panic!("{page} opens: {e}"));
    wait_for(c, page, &format!("return {ready}")).await;
}

/// Pages besides the inbox, with the expression that says each has
/// rendered its content: (name, path, ready). The rules page is left to
/// each test, which waits for the form or for the listed rules.
const LEDGER_PAGE: (&str, &str, &str) = (
    "ledger",
    "/ledger",
    "document.querySelectorAll('li.entry').length > 0",
);
const CHAT_PAGE: (&str, &str, &str) = (
    "chat",
    "/chats/work",
    "document.querySelectorAll('#chat-history li.entry').length > 0",
);
const WORKFLOWS_PAGE: (&str, &str, &str) = (
    "workflows",
    "/workflows",
    "document.getElementById('requests') !== null && document.getElementById('requests').children.length > 0",
);

/// Assert that card `id` shows its result as `outcome` ("applied",
/// "rejected") after the batch was sent.
async fn assert_result(c: &Client, id: i64, outcome: &str) {
    let shown = text(c, &result_of(id)).await;
    assert!(
        shown.starts_with(&format!("#{id} {outcome}")),
        "#{id} is not {outcome}: {shown:?}"
    );
}

/// The standard world with alice's `work` holding one card per label, its
/// inbox served, and a desktop browser with alice signed in, showing
/// every card.
async fn inbox_of_labels(driver: &Driver, labels: &[&str]) -> (World, Vec<i64>, Server, Client) {
    let w = people_world(Trust::Byo).await;
    let ids = stage_labels(&w, "work", labels).await;
    let server = serve(&w).await;
    let c = signed_in(driver, Screen::Desktop, &w, &server, "alice").await;
    wait_for(&c, "every card", &cards(labels.len())).await;
    (w, ids, server, c)
}

/// Scroll `css` to the middle of the window (clear of the batch bar a
/// phone keeps at the bottom), wait until it stays put (cards far away
/// are laid out only as they come near, which may move it), and click
/// it, as a person would.
pub(crate) async fn click(c: &Client, css: &str) {
    let place = format!(
        "const e = document.querySelector('{}'); if (!e) return null; e.scrollIntoView({{block: 'center'}}); return Math.round(e.getBoundingClientRect().top);",
        css.replace('\'', "\\'")
    );
    let start = Instant::now();
    let mut last = Value::Null;
    loop {
        let top = c.execute(&place, vec![]).await.unwrap_or(Value::Null);
        if !top.is_null() && top == last {
            break;
        }
        last = top;
        assert!(start.elapsed() < PATIENCE, "{css} is never shown still");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("{css} clicks: {e}"));
}

/// Press `key` on the keyboard, as a person does: to whatever has the
/// focus.
async fn press(c: &Client, key: char) {
    use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
    let keys = KeyActions::new("keyboard".to_owned())
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key });
    c.perform_actions(keys).await.expect("the key is pressed");
}

/// WebDriver's Enter key.
const ENTER: char = '\u{E007}';

/// Open action `id`'s full prompt (one click) and return its text.
async fn open_prompt(c: &Client, id: i64) -> String {
    click(c, &format!("{} details.full summary", card(id))).await;
    let pre = format!("document.querySelector('{} pre.prompt')", card(id));
    wait_for(
        c,
        "the full prompt",
        &format!("return {pre} !== null && {pre}.textContent.startsWith('Action #')"),
    )
    .await;
    text(c, &format!("return {pre}.textContent")).await
}

/// Turn off "Send by itself", so a test decides when the batch leaves.
async fn send_by_hand(c: &Client) {
    click(c, "#auto-send").await;
    wait_for(
        c,
        "send by itself off",
        "return document.getElementById('auto-send').checked === false",
    )
    .await;
}

/// Whether card `id` is marked `verb` on the page (and only that).
fn marked(id: i64, verb: &str) -> String {
    let other = if verb == "approve" {
        "reject"
    } else {
        "approve"
    };
    format!(
        "const n = document.querySelector('{0}'); return n !== null && n.classList.contains('marked-{verb}') && n.querySelector('button.{verb}').getAttribute('aria-pressed') === 'true' && n.querySelector('button.{other}').getAttribute('aria-pressed') === 'false'",
        card(id)
    )
}

fn unmarked(id: i64) -> String {
    format!(
        "const n = document.querySelector('{0}'); return n !== null && !n.className.includes('marked-') && n.querySelectorAll('[aria-pressed=\"true\"]').length === 0",
        card(id)
    )
}

fn result_of(id: i64) -> String {
    format!(
        "return document.querySelector('{} .result').textContent",
        card(id)
    )
}

fn pending_states(w: &World, ids: &[i64]) -> bool {
    ids.iter().all(|id| {
        w.kernel.inspect().action(*id).unwrap().unwrap().state
            == gatehouse::store::ActionState::Pending
    })
}

/// The page scrolls only downwards: nothing is wider than the window.
async fn assert_no_sideways_scroll(c: &Client, page: &str, width: i64) {
    let v = json_of(
        c,
        "return [document.documentElement.scrollWidth, window.innerWidth]",
    )
    .await;
    assert_eq!(v[1], width, "{page}: the window is {width} px wide: {v}");
    assert!(
        v[0].as_i64().unwrap_or(i64::MAX) <= width,
        "{page} scrolls sideways: {v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_decides_with_the_mouse_and_undo_holds_everything_back() {
    let driver = Driver::start();
    let (w, ids, server, c) = inbox_of_labels(&driver, &["first", "second", "third"]).await;

    // The card's summary is the kernel's, piece by piece; the gadget's
    // words in it are quoted and labelled.
    let a = w.kernel.inspect().action(ids[0]).unwrap().unwrap();
    let record = w.kernel.inspect().gatekeeper("issues").unwrap().unwrap();
    let pieces = gatehouse::prompt::summary_pieces(&a, record.credential_host());
    let summary = text(&c, &text_of(&format!("{} .summary", card(ids[0])))).await;
    assert_eq!(
        summary,
        pieces.iter().map(|p| p.text.as_str()).collect::<String>()
    );
    assert!(
        summary.starts_with("addLabel on issues at 127.0.0.1:"),
        "{summary}"
    );
    let quoted = text(
        &c,
        &format!(
            "return [...document.querySelectorAll('{} .summary .ext')].map(e => e.title + ':' + e.textContent).join('|')",
            card(ids[0])
        ),
    )
    .await;
    assert_eq!(
        quoted,
        "written by the gatekeeper:addLabel|written by the gadget:label|written by the gadget:first"
    );
    // The argument table, who staged it and why it is held.
    let table = text(
        &c,
        &format!(
            "return [...document.querySelectorAll('{} table.args tbody tr')].map(r => r.textContent).join('|')",
            card(ids[0])
        ),
    )
    .await;
    assert_eq!(table, "id1|labelfirst");
    let facts = text(&c, &text_of(&format!("{} dl.facts", card(ids[0])))).await;
    assert!(
        facts.contains("Staged byalice through gadget script in chat work"),
        "{facts}"
    );
    assert!(facts.contains("key one is missing"), "{facts}");
    assert!(facts.contains("Expires "), "{facts}");
    // The full prompt is one click away, and is the terminal's text.
    let description = record
        .manifest
        .tool("addLabel")
        .map(|t| t.description.clone());
    assert_eq!(
        open_prompt(&c, ids[0]).await,
        gatehouse::prompt::render(&a, description.as_deref())
    );

    // Live update: an action staged now appears without a reload.
    let late = stage_labels(&w, "work", &["late"]).await[0];
    wait_for(&c, "the new card to appear", &cards(4)).await;

    // Approve and Reject act at once on the page, and Undo takes the last
    // back; nothing is sent or claimed while the batch is open.
    send_by_hand(&c).await;
    click(&c, &format!("{} button.approve", card(ids[0]))).await;
    click(&c, &format!("{} button.reject", card(ids[1]))).await;
    click(&c, &format!("{} button.approve", card(ids[2]))).await;
    wait_for(&c, "#1 approved", &marked(ids[0], "approve")).await;
    wait_for(&c, "#2 rejected", &marked(ids[1], "reject")).await;
    wait_for(&c, "#3 approved", &marked(ids[2], "approve")).await;
    let said = text(&c, "return document.getElementById('announce').textContent").await;
    assert_eq!(
        said,
        format!("Approved #{} — not sent yet. Undo with u.", ids[2])
    );
    click(&c, "#undo").await;
    wait_for(&c, "#3 unmarked", &unmarked(ids[2])).await;
    wait_for(
        &c,
        "the undo announced",
        &format!(
            "return document.getElementById('announce').textContent.startsWith('Undone: #{}')",
            ids[2]
        ),
    )
    .await;
    // A second click on a pressed button takes that mark back too.
    click(&c, &format!("{} button.reject", card(ids[1]))).await;
    wait_for(&c, "#2 unmarked", &unmarked(ids[1])).await;
    click(&c, &format!("{} button.reject", card(ids[1]))).await;
    wait_for(&c, "#2 rejected again", &marked(ids[1], "reject")).await;
    assert!(
        pending_states(&w, &ids),
        "nothing is claimed before the batch is sent"
    );
    assert!(w.tracker.writes().is_empty());
    screenshot(&c, "inbox-desktop-marked").await;

    // A slow service keeps the batch in flight while its first decisions
    // already reach the live view: the page must still show each result
    // next to its action. The batch is sent by itself, a few seconds
    // after the last mark.
    w.tracker.inject(
        gatehouse_services::tracker::Fault::Slow(Duration::from_secs(1)),
        2,
    );
    click(&c, "#auto-send").await;
    click(&c, &format!("{} button.approve", card(ids[2]))).await;
    wait_for(
        &c,
        "a result next to each decided action",
        "return document.querySelectorAll('li.action.decided').length === 3",
    )
    .await;
    assert_result(&c, ids[0], "applied").await;
    assert_result(&c, ids[1], "rejected").await;
    assert_result(&c, ids[2], "applied").await;
    assert_eq!(
        text(&c, &result_of(late)).await,
        "",
        "the late one was left alone"
    );
    wait_for(
        &c,
        "the batch's outcome announced",
        "return document.getElementById('announce').textContent === '2 of 3 done.' || document.getElementById('announce').textContent === '3 of 3 done.'",
    )
    .await;
    // A decided card offers no decision any more.
    let buttons = text(
        &c,
        &format!(
            "return String(document.querySelectorAll('{} button.approve, {} button.reject').length)",
            card(ids[0]),
            card(ids[1])
        ),
    )
    .await;
    assert_eq!(buttons, "0");
    screenshot(&c, "inbox-desktop-decided").await;

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
    w.sqlite()
        .execute("UPDATE web_sessions SET expires_at = 1", [])
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

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_decides_with_the_keyboard() {
    let driver = Driver::start();
    let (w, ids, server, c) = inbox_of_labels(&driver, &["one", "two", "three"]).await;
    send_by_hand(&c).await;
    let focused = |id: i64| {
        format!(
            "return document.activeElement !== null && document.activeElement.matches('{}')",
            card(id)
        )
    };
    // j focuses the first card (visibly), j/k move.
    c.execute(
        "document.activeElement.blur(); window.scrollTo(0, 0); return true",
        vec![],
    )
    .await
    .unwrap();
    press(&c, 'j').await;
    wait_for(&c, "the first card focused", &focused(ids[0])).await;
    let outline = text(
        &c,
        "return getComputedStyle(document.activeElement).outlineStyle",
    )
    .await;
    assert_eq!(outline, "solid", "the focused card is visibly focused");
    press(&c, 'j').await;
    wait_for(&c, "the second card focused", &focused(ids[1])).await;
    press(&c, 'k').await;
    wait_for(&c, "the first card again", &focused(ids[0])).await;
    // a approves and moves on; r rejects and moves on; u takes back.
    press(&c, 'a').await;
    wait_for(&c, "#1 approved", &marked(ids[0], "approve")).await;
    wait_for(&c, "focus on the next card", &focused(ids[1])).await;
    press(&c, 'r').await;
    wait_for(&c, "#2 rejected", &marked(ids[1], "reject")).await;
    wait_for(&c, "focus on the third card", &focused(ids[2])).await;
    press(&c, 'a').await;
    wait_for(&c, "#3 approved", &marked(ids[2], "approve")).await;
    press(&c, 'u').await;
    wait_for(&c, "#3 undone", &unmarked(ids[2])).await;
    wait_for(&c, "focus back on the undone card", &focused(ids[2])).await;
    let said = text(&c, "return document.getElementById('announce').textContent").await;
    assert!(said.starts_with(&format!("Undone: #{}", ids[2])), "{said}");
    let live = text(
        &c,
        "return document.getElementById('announce').getAttribute('aria-live')",
    )
    .await;
    assert_eq!(live, "polite");
    assert!(pending_states(&w, &ids), "nothing is claimed before Enter");
    assert!(w.tracker.writes().is_empty());
    // Enter sends the batch.
    press(&c, ENTER).await;
    wait_for(
        &c,
        "two decided cards",
        "return document.querySelectorAll('li.action.decided').length === 2",
    )
    .await;
    assert_result(&c, ids[0], "applied").await;
    assert_result(&c, ids[1], "rejected").await;
    assert_eq!(text(&c, &result_of(ids[2])).await, "");
    wait_for(
        &c,
        "the outcome announced",
        "return document.getElementById('announce').textContent === '2 of 2 done.'",
    )
    .await;
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].body.contains("\"one\""));
    assert_eq!(
        w.kernel.inspect().action(ids[2]).unwrap().unwrap().state,
        gatehouse::store::ActionState::Pending
    );
    screenshot(&c, "inbox-desktop-keyboard").await;
    let _ = c.close().await;
    server.stop().await;
}

/// The elements a thumb must hit, each at least 44 × 44 CSS pixels.
const TARGETS: &str = "button, summary, select, input[type=text], label.auto, header a";

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_phone_layout_is_one_column_with_large_targets() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    // A read first (the chat's observation set), then three actions, one
    // with long arguments that must wrap, not widen the page.
    w.kernel
        .operator()
        .run("triage", "work", "")
        .await
        .unwrap()
        .output
        .unwrap();
    let ids = stage_labels(
        &w,
        "work",
        &["phone", &"a-very-long-label-without-any-space-".repeat(6)],
    )
    .await;
    let server = serve(&w).await;
    let c = signed_in(&driver, Screen::Phone, &w, &server, "alice").await;
    let all = w.kernel.inspect().pending(Some("work")).unwrap();
    wait_for(&c, "every card", &cards(all.len())).await;
    assert_no_sideways_scroll(&c, "the inbox", 390).await;
    // One column: every card spans the width of the page.
    let widths = json_of(
        &c,
        "return [...document.querySelectorAll('li.action')].map(n => Math.round(n.getBoundingClientRect().left))",
    )
    .await;
    let lefts: Vec<i64> = widths
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert!(
        lefts.windows(2).all(|p| p[0] == p[1]),
        "one column: {lefts:?}"
    );
    let small = |what: &'static str| {
        let c = c.clone();
        async move {
            let v = json_of(
                &c,
                &format!(
                    "return [...document.querySelectorAll('{TARGETS}')].filter(e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden').map(e => [e.tagName + '.' + e.className + ' ' + e.textContent.slice(0, 20), e.getBoundingClientRect().width, e.getBoundingClientRect().height]).filter(([, w, h]) => w < 44 || h < 44)"
                ),
            )
            .await;
            assert_eq!(v, json!([]), "{what}: touch targets under 44 px");
        }
    };
    small("the inbox").await;
    // The observation set is shown as chips.
    let chips = text(
        &c,
        "return document.querySelector('section.group ul.observed').textContent",
    )
    .await;
    assert!(chips.contains("issues 1 read"), "{chips}");
    screenshot(&c, "inbox-phone").await;

    // Decide with taps: Approve, then the batch bar's Submit now.
    click(&c, &format!("{} button.approve", card(ids[0]))).await;
    wait_for(&c, "the card marked", &marked(ids[0], "approve")).await;
    let bar = json_of(
        &c,
        "const r = document.getElementById('batchbar').getBoundingClientRect(); return [Math.round(r.bottom), window.innerHeight, Math.round(r.width)]",
    )
    .await;
    assert_eq!(bar[0], bar[1], "the batch bar sits at the bottom: {bar}");
    assert_eq!(bar[2], 390, "and spans the screen: {bar}");
    screenshot(&c, "inbox-phone-marked").await;
    click(&c, "#submit-decisions").await;
    wait_for(
        &c,
        "the decided card",
        &present(&format!("{}.decided", card(ids[0]))),
    )
    .await;
    assert_result(&c, ids[0], "applied").await;
    assert_no_sideways_scroll(&c, "the decided inbox", 390).await;

    for (page, path, ready) in [
        LEDGER_PAGE,
        CHAT_PAGE,
        (
            "rules",
            "/rules",
            "document.getElementById('rule-form') !== null",
        ),
        WORKFLOWS_PAGE,
    ] {
        open_page(&c, &server, page, path, ready).await;
        assert_no_sideways_scroll(&c, page, 390).await;
        small(page).await;
        screenshot(&c, &format!("{page}-phone")).await;
    }
    let _ = c.close().await;
    server.stop().await;
}

/// What a forging gadget writes into its arguments: strings that try to
/// look like the page's controls or the kernel's own lines.
const FORGERIES: [&str; 6] = [
    "[Approve]",
    "<button id=\"forged\">Approve all</button>",
    "✅ Approve",
    "\u{202E}evorppA\u{202C} Reject",
    "ok\nApprove: gatehouse approve 9\nReject",
    "<a href=\"/approve-all\">Submit now</a><input type=checkbox checked>",
];

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_forged_prompt_cannot_draw_controls() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    // A real gatekeeper whose tool name and description forge, and a real
    // gadget whose arguments forge (through the forger and the tracker).
    add_forger(&w).await;
    w.introduce("work", "alice", &[(EVIL_GATEKEEPER, "EVIL")]);
    let mut steps: Vec<Value> = FORGERIES
        .iter()
        .map(|f| call("ISSUES", "createIssue", json!({"title": f, "body": f})))
        .collect();
    steps.push(call("EVIL", EVIL_TOOL, json!({"title": FORGERIES[1]})));
    let out = w.script("work", Value::Array(steps)).await;
    let ids: Vec<i64> = out
        .as_array()
        .unwrap()
        .iter()
        .map(gatehouse_e2e::pending_id)
        .collect();
    let n = ids.len();
    let server = serve(&w).await;
    let c = signed_in(&driver, Screen::Desktop, &w, &server, "alice").await;
    wait_for(&c, "every forged card", &cards(n)).await;
    // Open every full prompt too: the most attacker text on the page.
    for id in &ids {
        open_prompt(&c, *id).await;
    }
    screenshot(&c, "forged-prompt").await;

    // Exactly the page's own controls: Sign out, Undo, Submit now, and an
    // Approve and a Reject per card; one checkbox (send by itself); one
    // disclosure per card; links only to the page's own places.
    let probe = json_of(
        &c,
        "const texts = (sel) => [...document.querySelectorAll(sel)].map(e => e.textContent.trim());
         return {
            buttons: texts('button'),
            roles: [...document.querySelectorAll('[role]')].map(e => e.getAttribute('role')),
            inputs: [...document.querySelectorAll('input, select, textarea')].map(e => e.id),
            summaries: texts('summary'),
            links: [...document.querySelectorAll('a')].map(e => e.getAttribute('href')),
            labels: texts('label'),
            forged: document.querySelectorAll('#forged, [href=\"/approve-all\"]').length,
            ext_with_children: [...document.querySelectorAll('.ext')].filter(e => e.children.length > 0).length,
            ext_in_controls: [...document.querySelectorAll('.ext')].filter(e => e.closest('button, a, label, summary, select, [role=button]') !== null).length,
            ext_tags: [...new Set([...document.querySelectorAll('.ext')].map(e => e.tagName))].sort(),
            hidden: /[\\u202A-\\u202E\\u2066-\\u2069\\u200B-\\u200F]/.test(document.body.textContent),
         }",
    )
    .await;
    let mut buttons: Vec<String> = probe["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect();
    buttons.sort();
    let mut want: Vec<String> = ["Sign out", "Undo", "Submit now"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..n).flat_map(|_| ["Approve".to_owned(), "Reject".to_owned()]))
        .collect();
    want.sort();
    assert_eq!(buttons, want, "exactly the page's own buttons: {probe}");
    assert_eq!(probe["inputs"], json!(["auto-send"]), "{probe}");
    assert_eq!(
        probe["summaries"].as_array().unwrap().len(),
        n + 1,
        "one disclosure per card and the chats menu: {probe}"
    );
    for s in probe["summaries"].as_array().unwrap() {
        let s = s.as_str().unwrap();
        assert!(
            s == "Full prompt and arguments (JSON)" || s.starts_with("Chats ("),
            "{s}"
        );
    }
    for l in probe["labels"].as_array().unwrap() {
        assert!(l.as_str().unwrap().starts_with("Send by itself"), "{probe}");
    }
    for href in probe["links"].as_array().unwrap() {
        let href = href.as_str().unwrap();
        assert!(
            [
                "/",
                "/ledger",
                "/rules",
                "/workflows",
                "/account",
                "#main",
                "/chats/work"
            ]
            .contains(&href),
            "a link the page did not make: {href}"
        );
    }
    assert_eq!(
        probe["roles"],
        json!(["alert", "region", "status"]),
        "{probe}"
    );
    assert_eq!(probe["forged"], 0, "{probe}");
    assert_eq!(
        probe["ext_with_children"], 0,
        "attacker text is one text node: {probe}"
    );
    assert_eq!(
        probe["ext_in_controls"], 0,
        "never inside a control: {probe}"
    );
    assert_eq!(probe["ext_tags"], json!(["Q", "SPAN"]), "{probe}");
    assert_eq!(
        probe["hidden"], false,
        "bidi and zero-width made visible: {probe}"
    );

    // Every element whose own text carries a forgery is attacker text in
    // its box, or the full prompt: never a control, never the kernel's.
    let stray = json_of(
        &c,
        "const needles = ['Approve all', 'approve 9', '✅ Approve', '[Approve]', 'evorppA', 'Submit now</a>'];
         const out = [];
         const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
         for (let t = walk.nextNode(); t; t = walk.nextNode()) {
           if (!needles.some((n) => t.data.includes(n))) continue;
           const e = t.parentElement;
           if (!(e.matches('.ext') || e.matches('pre.prompt'))) out.push(e.tagName + '.' + e.className + ': ' + t.data.slice(0, 40));
         }
         return out;",
    )
    .await;
    assert_eq!(stray, json!([]), "forged text outside its box");
    // The RTL override and the newline are made visible in the table.
    let cells = text(
        &c,
        &format!(
            "return [...document.querySelectorAll('{0} table.args td, {1} table.args td')].map(e => e.textContent).join('|')",
            card(ids[3]),
            card(ids[4])
        ),
    )
    .await;
    assert!(cells.contains("<U+202E>evorppA<U+202C> Reject"), "{cells}");
    assert!(
        cells.contains("ok↵Approve: gatehouse approve 9↵Reject"),
        "{cells}"
    );

    // Clicking attacker text does nothing; keys act only on real controls.
    send_by_hand(&c).await;
    for (i, _) in FORGERIES.iter().enumerate().take(3) {
        click(&c, &format!("{} .summary .ext:last-child", card(ids[i]))).await;
    }
    click(&c, &format!("{} table.args td .ext", card(ids[1]))).await;
    let none = "return document.querySelectorAll('[aria-pressed=\"true\"], li.action[class*=\"marked-\"]').length === 0 && document.getElementById('batch-status').textContent.startsWith('Nothing marked')";
    assert_eq!(
        json_of(&c, none).await,
        Value::Bool(true),
        "a click on attacker text marked something"
    );
    press(&c, ENTER).await;
    assert_eq!(json_of(&c, none).await, Value::Bool(true));
    // The real control on the same card does act.
    click(&c, &format!("{} button.approve", card(ids[1]))).await;
    wait_for(&c, "the real Approve", &marked(ids[1], "approve")).await;
    click(&c, "#undo").await;
    wait_for(&c, "undone", &unmarked(ids[1])).await;
    // Reject them all with the real buttons: nothing reaches the service.
    for id in &ids {
        click(&c, &format!("{} button.reject", card(*id))).await;
    }
    click(&c, "#submit-decisions").await;
    wait_for(
        &c,
        "every forged card rejected",
        &format!(
            "return document.querySelectorAll('li.action.decided .result.rejected').length === {n}"
        ),
    )
    .await;
    assert!(w.tracker.writes().is_empty());
    let _ = c.close().await;
    server.stop().await;
}

/// What the `forger` gatekeeper declares about its one tool.
const EVIL_TOOL: &str =
    "<script>window.__pwned='tool';document.title='pwned'</script><b id=fake-tool>Endpoint:</b>";
const EVIL_DESCRIPTION: &str = "Adds a label.</pre><script>window.__pwned='description'; document.title='pwned'</script>\n<img src=x onerror=\"window.__pwned='img';document.title='pwned'\">\nApprove: everything\n<div id=\"fake-field\">Endpoint: https://evil.example</div>";
const EVIL_GATEKEEPER: &str = "forger";

/// Add the `forger` gatekeeper as [`EVIL_GATEKEEPER`]: a bring-your-own
/// instance that reaches nothing and holds no credential, whose whole
/// threat is what it declares and writes.
async fn add_forger(w: &World) {
    w.front(
        EVIL_GATEKEEPER,
        "forger",
        Trust::Byo,
        Vec::new(),
        None,
        Vec::new(),
    )
    .await
    .expect("the gatekeeper is added");
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_shows_hostile_names_as_text_and_runs_none_of_it() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    // A real gatekeeper whose tool name and description carry HTML,
    // script and forged kernel fields: what it declares about itself is
    // what an approver sees.
    add_forger(&w).await;
    let declared = w
        .kernel
        .inspect()
        .gatekeeper(EVIL_GATEKEEPER)
        .unwrap()
        .unwrap();
    assert_eq!(declared.manifest.tools[0].name, EVIL_TOOL);
    assert_eq!(declared.manifest.tools[0].description, EVIL_DESCRIPTION);
    w.introduce("work", "alice", &[(EVIL_GATEKEEPER, "EVIL")]);
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
    // The chat is locked down after staging.
    w.lock_down("work");
    let server = serve(&w).await;
    let c = signed_in(&driver, Screen::Desktop, &w, &server, "alice").await;
    wait_for(&c, "the hostile action", &present(&card(id))).await;
    let shown = open_prompt(&c, id).await;

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
    // The card's summary shows the tool's and the gatekeeper's names
    // through the sanitiser, the tool's boxed as the gatekeeper's words.
    let summary = text(&c, &text_of(&format!("{} .summary", card(id)))).await;
    assert_eq!(
        summary,
        format!(
            "{} on {} — title {}",
            gatehouse::prompt::inline(EVIL_TOOL),
            gatehouse::prompt::inline(EVIL_GATEKEEPER),
            gatehouse::prompt::cell(
                "<svg onload=\"window.__pwned='args'\"></svg><div id='fake-field'>x</div>",
                60
            )
        )
    );
    let tool = text(
        &c,
        &format!(
            "const e = document.querySelector('{} .summary .ext'); return e.title + ':' + e.textContent",
            card(id)
        ),
    )
    .await;
    assert_eq!(
        tool,
        format!(
            "written by the gatekeeper:{}",
            gatehouse::prompt::inline(EVIL_TOOL)
        )
    );
    // The ledger page shows the names sanitised too, and runs nothing.
    c.goto(&format!("{}/ledger", server.url())).await.unwrap();
    wait_for(
        &c,
        "the ledger table",
        "return document.querySelectorAll('li.entry').length === 1",
    )
    .await;
    let row = text(&c, &text_of("li.entry")).await;
    assert!(row.contains(&gatehouse::prompt::inline(EVIL_TOOL)), "{row}");
    assert!(!row.contains('<'), "{row}");
    let title = text(
        &c,
        "return document.title + (window.__pwned === undefined ? '' : String(window.__pwned))",
    )
    .await;
    assert_eq!(title, "Gatehouse inbox");
    c.back().await.unwrap();
    wait_for(&c, "the inbox again", &cards(1)).await;
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
    let c = signed_in(&driver, Screen::Desktop, &w, &server, "alice").await;
    let decide = |id: i64| {
        let c = c.clone();
        async move {
            wait_for(&c, "the action's card", &present(&card(id))).await;
            click(&c, &format!("{} button.approve", card(id))).await;
            wait_for(&c, "the card marked", &marked(id, "approve")).await;
            click(&c, "#submit-decisions").await;
            wait_for(
                &c,
                "the decision's result",
                &present(&format!("{}.decided", card(id))),
            )
            .await;
        }
    };
    decide(id).await;
    // Applied, and revertible: its card offers a Revert button.
    wait_for(
        &c,
        "the Revert button",
        &present(&format!("{} button.revert", card(id))),
    )
    .await;
    assert_eq!(w.tracker.writes().len(), 1);
    click(&c, &format!("{} button.revert", card(id))).await;
    wait_for(
        &c,
        "the revert to be staged",
        &present(&format!("{} .revert-result.ok", card(id))),
    )
    .await;
    let said = text(&c, &text_of(&format!("{} .revert-result", card(id)))).await;
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
    let prompt = open_prompt(&c, revert.id).await;
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

/// axe-core's serious and critical violations on the page as it is now,
/// one line each.
async fn axe(c: &Client, source: &str) -> Vec<String> {
    let loaded = c
        .execute(&format!("{source}\n;return typeof window.axe;"), vec![])
        .await
        .expect("axe-core is injected (WebDriver's scripts are not the page's CSP's)");
    assert_eq!(loaded, "object", "axe-core loaded");
    let found = c
        .execute_async(
            "const done = arguments[arguments.length - 1];
             window.axe.run(document, { resultTypes: ['violations'] })
               .then((r) => done(r.violations
                 .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                 .map((v) => v.impact + ' ' + v.id + ': ' + v.help + ' at ' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', '))))
               .catch((e) => done(['axe failed: ' + e]));",
            vec![],
        )
        .await
        .expect("axe-core runs");
    found
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_pages_have_no_serious_accessibility_violations() {
    let source = axe_source();
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    // Something on every page: a read (observations), pending actions, a
    // decided one, a second chat that is locked down.
    w.kernel
        .operator()
        .run("triage", "work", "")
        .await
        .unwrap()
        .output
        .unwrap();
    let ids = stage_labels(&w, "work", &["a11y", "done"]).await;
    w.kernel.person("alice").approve(ids[1]).await.unwrap();
    w.chat_with("quiet", "alice", &[("issues", "ISSUES")]);
    stage_labels(&w, "quiet", &["locked"]).await;
    w.lock_down("quiet");
    let pending = w.kernel.inspect().pending(None).unwrap().len();
    let inbox_ready = format!("document.querySelectorAll('li.action').length === {pending}");
    let server = serve(&w).await;
    let mut checked = Vec::new();
    for screen in [Screen::Desktop, Screen::DesktopDark, Screen::Phone] {
        let c = browser(&driver, screen).await;
        if screen == Screen::DesktopDark {
            let dark = json_of(
                &c,
                "return window.matchMedia('(prefers-color-scheme: dark)').matches",
            )
            .await;
            assert_eq!(dark, Value::Bool(true), "the dark run is dark");
        }
        // The sign-in page, before signing in (with a link and without).
        let token = w.signin_token("alice");
        for (page, path, ready) in [
            (
                "signin-link",
                format!("/signin?token={token}"),
                "document.getElementById('signin') !== null",
            ),
            (
                "signin",
                "/signin".to_owned(),
                "document.querySelector('h1') !== null",
            ),
        ] {
            open_page(&c, &server, page, &path, ready).await;
            let found = axe(&c, &source).await;
            assert!(found.is_empty(), "{page} at {}: {found:#?}", screen.name());
            checked.push(format!("{page}/{}", screen.name()));
        }
        sign_in(&c, &w, &server.url(), "alice").await;
        for (page, path, ready) in [
            ("inbox", "/", inbox_ready.as_str()),
            LEDGER_PAGE,
            CHAT_PAGE,
            (
                "rules",
                "/rules",
                "document.getElementById('rules') !== null && document.getElementById('rules').children.length > 0",
            ),
            WORKFLOWS_PAGE,
        ] {
            open_page(&c, &server, page, path, ready).await;
            if page == "inbox" {
                // With a mark, the open batch and an opened prompt too.
                click(&c, &format!("{} button.approve", card(ids[0]))).await;
                send_by_hand(&c).await;
                open_prompt(&c, ids[0]).await;
            }
            let found = axe(&c, &source).await;
            assert!(found.is_empty(), "{page} at {}: {found:#?}", screen.name());
            c.execute("window.scrollTo(0, 0); return true", vec![])
                .await
                .expect("the page scrolls to its top");
            screenshot(&c, &format!("a11y-{page}-{}", screen.name())).await;
            checked.push(format!("{page}/{}", screen.name()));
        }
        let _ = c.close().await;
    }
    assert_eq!(checked.len(), 21, "{checked:?}");
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
    let credential = ("cloud-token", "cloud-token-9d1e");
    w.front_service("cloud", Trust::Byo, cloud.host(), credential)
        .await;
    w.users(&["alice", "bob"]);
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
    k.person("alice")
        .publish_workflow(design.to_string().as_bytes())
        .unwrap();
    let s = k
        .person("alice")
        .start_workflow("launch", None, &[])
        .await
        .unwrap();
    assert_eq!(s.state, "waiting");
    let run = s.run;
    let chat = k.inspect().workflow_run(run).unwrap().unwrap().chat;
    // bob sees the run's chat (a verified collaborator) but may not decide.
    k.person("alice").share(&chat, "bob", false).unwrap();
    let opened = k
        .person("bob")
        .open_chat(&chat, &gatehouse::sharing::OpenRequest::default())
        .await
        .unwrap();
    assert!(
        !matches!(opened, gatehouse::sharing::OpenOutcome::Refused { .. }),
        "bob's open"
    );
    assert!(cloud.writes().is_empty());

    let server = serve(&w).await;
    // bob: the request is shown, with no approve button; the API refuses him.
    let c = signed_in(&driver, Screen::Desktop, &w, &server, "bob").await;
    open_page(
        &c,
        &server,
        "the request",
        "/workflows",
        "document.querySelectorAll('li.request pre.request-text').length === 1",
    )
    .await;
    let buttons = text(
        &c,
        "return String(document.querySelectorAll('li.request button').length)",
    )
    .await;
    assert_eq!(buttons, "0", "bob may not decide: no buttons");
    let bob = crate::surfaces::web_api::Api::signed_in(&w, &server.url(), "bob").await;
    let a = bob
        .post("/api/workflow/requests/1/approve", json!({}))
        .await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(a.error().contains("may see chat"), "{}", a.text);
    assert!(cloud.writes().is_empty());
    let _ = c.close().await;

    // alice: the allowed-calls list on the page is the CLI's, exactly.
    let c = signed_in(&driver, Screen::Desktop, &w, &server, "alice").await;
    open_page(
        &c,
        &server,
        "the approve button",
        "/workflows",
        "document.querySelector('li.request button.approve') !== null",
    )
    .await;
    let shown = text(&c, &text_of("li.request pre.request-text")).await;
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
    let audit = text(&c, &text_of("pre.invocations")).await;
    assert!(audit.contains("authority alice"), "{audit}");
    screenshot(&c, "workflow-decided").await;
    let _ = c.close().await;
    server.stop().await;
}

/// Web Push in a real browser: the "Notify me on this device" control
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
    let server = serve_with(
        &w,
        gatehouse::web::Config {
            push: Some(gatehouse::push::Settings::new("mailto:ops@example.com")),
            ..gatehouse::web::Config::default()
        },
    )
    .await;
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
        .connect(&format!("http://127.0.0.1:{}", driver.port()))
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
    assert!(
        w.kernel
            .person("alice")
            .push_devices()
            .await
            .unwrap()
            .is_empty()
    );
    c.close().await.expect("the browser closes");
    server.stop().await;
}
