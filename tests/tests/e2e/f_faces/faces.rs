//! Faces (rules F1-F3): a gadget's page beside its chat in the web inbox,
//! in a sandbox of its own, each of its calls a turn of the person viewing
//! it. In headless Chromium against the real server, kernel, tracker and
//! triage gadget (its face is the triage board): the board loads, a click
//! stages a write that waits (nothing sent until approved); the frame can
//! fetch nothing, navigate nothing and read no cookie; a face in a locked-
//! down chat cannot stage. Over the API: the page is served only into its
//! sandbox, calls are checked before anything runs, and a collaborator
//! sees through a face only what his verification allows. Over MCP: the
//! face is an MCP Apps resource and its calls pass the same gate.

use crate::chromium::{Driver, Screen, browser};
use crate::o_observations::lockdown::{Lockdown, lockdown_world};
use crate::s_sharing::sharing::{Shared, shared_world};
use crate::surfaces::web_api::{Api, PATIENCE, chat_path, people_world, serve};
use crate::surfaces::web_browser::{click, screenshot, sign_in, text, wait_for};
use fantoccini::{Client, Locator};
use gatehouse::sharing::{OpenOutcome, OpenRequest};
use gatehouse::store::{ActionState, LedgerFilter, Trust};
use gatehouse_e2e::World;
use gatehouse_e2e::mcp::{McpClient, McpHttpServe};
use serde_json::{Value, json};
use std::io::Read as _;
use std::sync::Arc;

const BOARD_ROWS: &str = "return document.querySelectorAll('#issues tr[data-id]').length === 2";

/// Open chat `chat`'s page and the face of `gadget`, and enter its frame.
async fn open_face(c: &Client, base: &str, chat: &str, gadget: &str) {
    c.goto(&format!("{base}/chats/{chat}"))
        .await
        .expect("the chat page opens");
    let button = format!("button.open-face[data-gadget=\"{gadget}\"]");
    wait_for(
        c,
        "the face's button",
        &format!(
            "return document.querySelector('{}') !== null",
            button.replace('\'', "\\'")
        ),
    )
    .await;
    click(c, &button).await;
    let frame = c
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(&format!(
            "iframe.face-frame[data-gadget=\"{gadget}\"]"
        )))
        .await
        .expect("the face's frame");
    frame.enter_frame().await.expect("into the face's frame");
}

/// The id in "Staged as #N: ..." on the board.
async fn staged_id(c: &Client) -> i64 {
    wait_for(
        c,
        "the board to say the write was staged",
        "return document.getElementById('status').textContent.startsWith('Staged as #')",
    )
    .await;
    let said = text(c, "return document.getElementById('status').textContent").await;
    said.trim_start_matches("Staged as #")
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no action id in {said:?}"))
}

fn state(w: &World, id: i64) -> ActionState {
    w.kernel
        .inspect()
        .action(id)
        .expect("the store answers")
        .expect("the action exists")
        .state
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_the_board_loads_beside_the_chat_and_a_click_stages_a_write_nothing_sent_until_approved()
 {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    let server = serve(&w).await;
    let base = server.url();
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &w, &base, "alice").await;
    open_face(&c, &base, "work", "triage").await;

    // The board read the tracker's issues through the gate, as Alice: the
    // read is recorded against the chat, by the triage gadget.
    wait_for(&c, "the board's two issues", BOARD_ROWS).await;
    let rows = text(
        &c,
        "return [...document.querySelectorAll('#issues tr')].map(r => r.textContent).join('|')",
    )
    .await;
    assert!(rows.contains("Login page shows a blank screen"), "{rows}");
    assert!(rows.contains("Label bug"), "{rows}");
    let reads = w.observations("work");
    assert!(
        reads
            .iter()
            .any(|e| e.tool.as_deref() == Some("listIssues")
                && e.gadget.as_deref() == Some("triage")),
        "the board's read is recorded: {reads:?}"
    );

    // A click stages the label: pending at once, nothing sent.
    click(&c, "button.apply[data-id=\"1\"]").await;
    let id = staged_id(&c).await;
    assert_eq!(state(&w, id), ActionState::Pending);
    assert!(
        w.tracker.writes().is_empty(),
        "nothing sent before a decision"
    );
    let action = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(action.tool, "addLabel");
    assert_eq!(action.gadget.as_deref(), Some("triage"));
    // The board shows its pending write (from gadget storage).
    wait_for(
        &c,
        "the board's pending write",
        &format!("return [...document.querySelectorAll('#staged li')].some(l => l.dataset.action === '{id}' && l.textContent.includes('pending'))"),
    )
    .await;

    // Beside the frame, the inbox (not the face) shows the pending write
    // with the kernel's summary and a link to decide it.
    c.enter_parent_frame().await.expect("back to the inbox");
    let pending = format!("li.face-pending[data-id=\"{id}\"]");
    wait_for(
        &c,
        "the inbox's line for the staged write",
        &format!(
            "return document.querySelector('{}') !== null",
            pending.replace('\'', "\\'")
        ),
    )
    .await;
    let line = text(
        &c,
        &format!(
            "return document.querySelector('{}').textContent",
            pending.replace('\'', "\\'")
        ),
    )
    .await;
    assert!(
        line.starts_with(&format!("Pending #{id}: addLabel on issues at 127.0.0.1:")),
        "{line}"
    );
    assert!(line.contains("Nothing was sent."), "{line}");
    screenshot(&c, "face-board-staged").await;
    // The chat page with a face open has no serious accessibility problem
    // of the inbox's own (the frame's inside is the gadget's page).
    let found = c
        .execute_async(
            &format!(
                "{}\n;const done = arguments[arguments.length - 1];
                 window.axe.run(document, {{ iframes: false, resultTypes: ['violations'] }})
                   .then((r) => done(r.violations
                     .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                     .map((v) => v.id + ': ' + v.help + ' at ' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', '))))
                   .catch((e) => done(['axe failed: ' + e]));",
                crate::chromium::axe_source()
            ),
            vec![],
        )
        .await
        .expect("axe-core runs");
    assert_eq!(
        found,
        json!([]),
        "accessibility of the chat page with a face open"
    );

    // The link leads to its card in the inbox, where Alice approves it.
    click(&c, &format!("{pending} a")).await;
    wait_for(
        &c,
        "the card, focused",
        &format!("const a = document.activeElement; return a !== null && a.dataset.id === '{id}'"),
    )
    .await;
    assert!(w.tracker.writes().is_empty(), "still nothing sent");
    click(&c, &format!("li.action[data-id=\"{id}\"] button.approve")).await;
    click(&c, "#submit-decisions").await;
    let start = std::time::Instant::now();
    while state(&w, id) != ActionState::Applied {
        assert!(start.elapsed() < PATIENCE, "the approved write is applied");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 1, "sent once, after the approval");
    assert!(writes[0].body.contains("\"bug\""), "{}", writes[0].body);
    drop(server);
}

/// What the canary notes for a connection that sent nothing.
const NO_REQUEST: &str = "(a connection, no request)";

/// A loopback server that only notes the request lines sent to it.
struct Canary {
    url: String,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Canary {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn canary() -> Canary {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut buf = [0u8; 2048];
            let n = stream.read(&mut buf).unwrap_or(0);
            let line = String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or(NO_REQUEST)
                .to_owned();
            noted.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    Canary { url, seen }
}

/// Run `body` (which ends by calling `done(value)`) in the current frame.
async fn in_frame(c: &Client, body: &str) -> Value {
    let script = format!("const done = arguments[arguments.length - 1]; {body}");
    c.execute_async(&script, vec![])
        .await
        .unwrap_or_else(|e| panic!("the script runs in the frame: {e:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_the_frame_can_fetch_nothing_navigate_nothing_and_read_no_cookie() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    let server = serve(&w).await;
    let base = server.url();
    let outside = canary();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("a loopback UDP port");
    let udp_addr = udp.local_addr().expect("its address").to_string();
    let datagrams = Arc::new(std::sync::Mutex::new(0usize));
    {
        let counted = datagrams.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while udp.recv_from(&mut buf).is_ok() {
                *counted.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
        });
    }
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &w, &base, "alice").await;
    open_face(&c, &base, "work", "triage").await;
    wait_for(&c, "the board's two issues", BOARD_ROWS).await;

    // Everything the page's own script could try, tried from inside it.
    let tried = in_frame(
        &c,
        &format!(
            r#"
        const out = {{}};
        // What the page's policy refused, as the browser reports it.
        const violations = [];
        document.addEventListener("securitypolicyviolation", (e) => violations.push(e.blockedURI));
        const attempt = async (name, f) => {{
          try {{ out[name] = "allowed: " + String(await f()); }}
          catch (e) {{ out[name] = "refused: " + e.name; }}
        }};
        await attempt("origin", async () => {{ throw {{ name: self.origin }}; }});
        await attempt("fetch outside", () => fetch("{outside}/fetch"));
        await attempt("fetch the inbox", () => fetch("/api/session", {{ credentials: "include" }}));
        await attempt("xhr", () => new Promise((ok, no) => {{
          const x = new XMLHttpRequest(); x.open("GET", "{outside}/xhr");
          x.onload = ok; x.onerror = () => no({{ name: "NetworkError" }}); x.send();
        }}));
        // A beacon is queued (`true`) and refused when it would leave:
        // the refusal is the policy's report.
        await attempt("beacon", () => new Promise((ok, no) => {{
          const seen = (e) => {{ if (e.blockedURI.endsWith("/beacon")) no({{ name: "Blocked" }}); }};
          document.addEventListener("securitypolicyviolation", seen);
          navigator.sendBeacon("{outside}/beacon", "x");
          setTimeout(() => ok("no report within 20 s"), 20000);
        }}));
        await attempt("websocket", () => new Promise((ok, no) => {{
          const s = new WebSocket("{ws}/ws"); s.onopen = ok; s.onerror = () => no({{ name: "NetworkError" }});
        }}));
        await attempt("image", () => new Promise((ok, no) => {{
          const i = new Image(); i.onload = ok; i.onerror = () => no({{ name: "Blocked" }}); i.src = "{outside}/image";
        }}));
        // WebRTC is outside every Content-Security-Policy: the page's
        // guard takes it away, and every way back to a fresh realm (a
        // nested document) is closed. Each nested document here would
        // send STUN to the UDP canary if it ran.
        const stun = "stun:{udp}";
        const nested = "<script>const p = new RTCPeerConnection({{ iceServers: [{{ urls: '" + stun + "' }}] }}); p.createDataChannel('x'); p.createOffer().then((o) => p.setLocalDescription(o));<\/script>";
        await attempt("webrtc", async () => {{
          const p = new RTCPeerConnection({{ iceServers: [{{ urls: stun }}] }});
          p.createDataChannel("x");
          await p.setLocalDescription(await p.createOffer());
          return "constructed";
        }});
        await attempt("webrtc, another name", async () => new webkitRTCPeerConnection({{}}));
        const frame = () => {{ const f = document.createElement("iframe"); document.body.append(f); return f; }};
        await attempt("srcdoc", async () => {{ frame().srcdoc = nested; }});
        await attempt("srcdoc attribute", async () => {{ frame().setAttribute("srcdoc", nested); }});
        await attempt("srcdoc attribute node", async () => {{
          const a = document.createAttribute("srcdoc"); a.value = nested; frame().setAttributeNode(a);
        }});
        await attempt("markup", async () => {{ document.body.insertAdjacentHTML("beforeend", "<iframe srcdoc=\"" + nested + "\"></iframe>"); }});
        await attempt("parsed markup", async () => {{
          const d = new DOMParser().parseFromString("<iframe srcdoc=\"" + nested + "\"></iframe>", "text/html");
          document.body.append(document.adoptNode(d.body.firstChild));
        }});
        await attempt("a javascript: frame", async () => {{ frame().src = "javascript:'" + nested + "'"; }});
        await attempt("a data: frame", async () => {{ frame().src = "data:text/html," + encodeURIComponent(nested); }});
        await attempt("a blank frame's realm", async () => new (frame().contentWindow.RTCPeerConnection)({{}}));
        await attempt("cookie", () => document.cookie);
        await attempt("local storage", () => localStorage.length);
        await attempt("the inbox's document", () => window.parent.document.title);
        await attempt("popup", async () => {{ const p = window.open("{outside}/popup"); if (!p) throw {{ name: "Blocked" }}; return p; }});
        await attempt("top navigation", async () => {{ window.top.location.href = "{base}/ledger"; return "assigned"; }});
        out.violations = violations.length;
        done(out);
        "#,
            outside = outside.url,
            ws = outside.url.replacen("http", "ws", 1),
            udp = udp_addr,
        ),
    )
    .await;
    let said = |name: &str| tried[name].as_str().unwrap_or_default().to_owned();
    assert_eq!(said("origin"), "refused: null", "an opaque origin: {tried}");
    for name in [
        "fetch outside",
        "fetch the inbox",
        "xhr",
        "beacon",
        "websocket",
        "image",
        "popup",
        "webrtc",
        "webrtc, another name",
        "srcdoc",
        "srcdoc attribute",
        "srcdoc attribute node",
        "markup",
        "parsed markup",
        "a blank frame's realm",
    ] {
        assert!(said(name).starts_with("refused"), "{name}: {tried}");
    }
    assert_eq!(said("cookie"), "refused: SecurityError", "{tried}");
    assert_eq!(said("local storage"), "refused: SecurityError", "{tried}");
    assert_eq!(
        said("the inbox's document"),
        "refused: SecurityError",
        "{tried}"
    );

    // A page calling in a loop: one call at a time, a bounded queue, and
    // the rest told so (the first calls are still waiting when the last
    // are sent: each is a turn, these arrive together).
    let burst = in_frame(
        &c,
        "Promise.allSettled(Array.from({ length: 40 }, () => gatehouse.call('board', {}))).then((all) => done({ ok: all.filter((r) => r.status === 'fulfilled').length, told: all.filter((r) => r.status === 'rejected' && r.reason.message.includes('calls are waiting')).length }));",
    )
    .await;
    let (ok, told) = (
        burst["ok"].as_i64().unwrap_or(0),
        burst["told"].as_i64().unwrap_or(0),
    );
    assert_eq!(ok + told, 40, "{burst}");
    assert!(ok >= 16 && told >= 1, "{burst}");

    // The top window stayed on the chat page: the assignment navigated
    // nothing (Chromium blocks it, with or without an exception).
    c.enter_parent_frame().await.expect("back to the inbox");
    let board_alive = "return document.querySelector('iframe.face-frame') !== null";
    wait_for(&c, "the chat page, still there", board_alive).await;
    let url = c.current_url().await.expect("the top window's URL");
    assert_eq!(
        url.path(),
        "/chats/work",
        "the top window was not navigated"
    );

    // The frame navigating itself away (to leave with data in a URL) is
    // refused by the inbox's own policy: only this origin's faces may be
    // framed.
    let frame = c
        .find(Locator::Css("iframe.face-frame"))
        .await
        .expect("the frame");
    frame.enter_frame().await.expect("into the frame");
    let _ = c
        .execute(
            &format!(
                "location.href = '{}/leave?secret=1'; return true",
                outside.url
            ),
            vec![],
        )
        .await;
    c.enter_parent_frame().await.expect("back to the inbox");
    // The inbox is still answering, and the same page is shown.
    wait_for(&c, "the chat page, still there", board_alive).await;
    assert_eq!(
        c.current_url().await.expect("the URL").path(),
        "/chats/work"
    );
    // Ask the server something after every attempt: all were made before.
    let session = Api::signed_in(&w, &base, "alice")
        .await
        .get("/api/session")
        .await;
    assert_eq!(session.status, 200);
    // A bare connection (a browser's speculative preconnect) carries no
    // byte of the page's; a request would.
    let requests: Vec<String> = outside
        .seen()
        .into_iter()
        .filter(|l| l != NO_REQUEST)
        .collect();
    assert_eq!(
        requests,
        Vec::<String>::new(),
        "no request reached the outside server: {tried}"
    );
    // Nor a datagram: had any nested document run, its STUN request would
    // have arrived while everything above was asked and answered.
    assert_eq!(
        *datagrams.lock().unwrap_or_else(|e| e.into_inner()),
        0,
        "no WebRTC packet left the page: {tried}"
    );
    assert!(w.tracker.writes().is_empty());
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_a_face_in_a_locked_down_chat_cannot_stage() {
    let Lockdown { w, warehouse } = lockdown_world().await;
    w.kernel
        .operator()
        .add_user("alice")
        .expect("alice signs in to the inbox");
    let read = w
        .script(
            "work",
            json!([gatehouse_e2e::call(
                "WAREHOUSE",
                "query",
                json!({"table": "payroll"})
            )]),
        )
        .await;
    assert!(read[0].get("done").is_some(), "{read}");
    assert!(w.kernel.inspect().chat("work").unwrap().unwrap().latched);
    let before = w.kernel.inspect().pending(None).unwrap().len();

    let driver = Driver::start();
    let server = serve(&w).await;
    let base = server.url();
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &w, &base, "alice").await;
    open_face(&c, &base, "work", "triage").await;
    // The page's own call to stage, exactly as its button makes it.
    let staged = in_frame(
        &c,
        "gatehouse.call('label', { id: 1, label: 'leak' }).then((r) => done({ ok: r }), (e) => done({ refused: e.message }));",
    )
    .await;
    let refusal = staged["refused"].as_str().unwrap_or_default();
    assert!(refusal.contains("locked down"), "{staged}");
    assert_eq!(
        w.kernel.inspect().pending(None).unwrap().len(),
        before,
        "no pending row"
    );
    assert!(w.tracker.writes().is_empty());
    drop(warehouse);
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_a_page_is_served_only_into_its_sandbox_and_calls_are_checked_first() {
    let w = people_world(Trust::Byo).await;
    let server = serve(&w).await;
    let base = server.url();
    let alice = Api::signed_in(&w, &base, "alice").await;

    // The list, and the page under its own policy.
    let faces = alice.get("/api/faces").await;
    assert_eq!(faces.status, 200, "{}", faces.text);
    assert_eq!(
        faces.json(),
        json!([{"gadget": "triage", "title": "Triage board"}])
    );
    let page = alice.get("/faces/triage").await;
    assert_eq!(page.status, 200, "{}", page.text);
    let policy = page.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    for part in [
        "sandbox allow-scripts;",
        "default-src 'none'",
        "connect-src 'none'",
        "form-action 'none'",
        "frame-ancestors 'self'",
    ] {
        assert!(policy.contains(part), "{part}: {policy}");
    }
    assert!(!policy.contains("allow-same-origin"), "{policy}");
    assert!(!policy.contains("allow-top-navigation"), "{policy}");
    assert!(
        page.text.contains("gatehouse.call"),
        "the page and its bridge"
    );
    // The inbox's own pages frame only this origin and are never framed.
    let shell = alice.get("/chats/work").await;
    let inbox = shell.headers["content-security-policy"].to_str().unwrap();
    assert!(inbox.contains("frame-src 'self'"), "{inbox}");
    assert!(inbox.contains("frame-ancestors 'none'"), "{inbox}");
    assert_eq!(shell.headers["x-frame-options"], "DENY");
    // Signed out: nothing.
    assert_eq!(Api::new(&base).get("/faces/triage").await.status, 401);
    assert_eq!(Api::new(&base).get("/api/faces").await.status, 401);

    // Calls are checked before the gadget runs: each refusal is one line,
    // and none of them staged or read anything.
    let call = &chat_path("work", "faces/triage/call");
    let reads_before = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter::default())
        .unwrap()
        .len();
    for (body, says) in [
        (
            json!({"name": "delete_everything"}),
            "offers no function \"delete_everything\"; it offers: [board, label]",
        ),
        (
            json!({"name": "label", "args": [1, 2]}),
            "must be a JSON object",
        ),
        (
            json!({"name": "label", "args": {"pad": "x".repeat(70 * 1024)}}),
            "at most 65536 are accepted",
        ),
    ] {
        let a = alice.post(call, body).await;
        assert_eq!(a.status, 400, "{}", a.text);
        assert!(a.error().contains(says), "{}", a.text);
    }
    let a = alice
        .post(
            &chat_path("work", "faces/script/call"),
            json!({"name": "x"}),
        )
        .await;
    assert_eq!(a.status, 400);
    assert!(a.error().contains("has no face"), "{}", a.text);
    // A chat Alice may not see answers like one that does not exist.
    w.kernel.person("bob").new_chat("bobs").expect("bob's chat");
    let theirs = alice
        .post(
            "/api/chats/bobs/faces/triage/call",
            json!({"name": "board"}),
        )
        .await;
    let missing = alice
        .post(
            "/api/chats/nothing/faces/triage/call",
            json!({"name": "board"}),
        )
        .await;
    assert_eq!(theirs.status, 404, "{}", theirs.text);
    assert_eq!(
        theirs.error().replace("bobs", "X"),
        missing.error().replace("nothing", "X")
    );
    assert_eq!(
        w.kernel
            .inspect()
            .ledger(&LedgerFilter::default())
            .unwrap()
            .len(),
        reads_before,
        "nothing ran"
    );
    // A call that runs: the answer, and the staged write shown as the inbox
    // shows any action.
    let a = alice
        .post(
            call,
            json!({"name": "label", "args": {"id": 2, "label": "enhancement"}}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let v = a.json();
    assert_eq!(v["ok"], true, "{v}");
    let id = v["answer"]["pending"].as_i64().expect("pending id");
    assert_eq!(v["staged"][0]["id"], id, "{v}");
    assert_eq!(v["staged"][0]["state"], "pending", "{v}");
    assert!(w.tracker.writes().is_empty());
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_a_collaborator_sees_through_a_face_only_what_his_verification_allows() {
    const CHAT: &str = "salary-board";
    let Shared { w, warehouse } = shared_world(&[]).await;
    w.install("notebook");
    let k = &w.kernel;
    let derived = k
        .operator().run(
            "notebook",
            CHAT,
            &json!({"op": "derive", "key": "pay", "service": "WAREHOUSE", "tool": "query", "args": {"table": "payroll"}})
                .to_string(),
        )
        .await
        .expect("the turn runs");
    assert!(derived.output.expect("answered").contains("\"ok\""));
    k.person("alice").share(CHAT, "bob", false).expect("shared");
    k.person("alice")
        .share(CHAT, "carol", false)
        .expect("shared");
    let server = serve(&w).await;
    let base = server.url();
    let call = format!("/api/chats/{CHAT}/faces/notebook/call");

    // Carol's account may not see payroll: the face answers her nothing.
    let carol = Api::signed_in(&w, &base, "carol").await;
    let refused = carol.post(&call, json!({"name": "notes"})).await;
    assert!(matches!(refused.status, 403 | 404), "{}", refused.text);
    assert!(refused.error().contains("payroll"), "{}", refused.text);

    // Bob, verified with his finance account, reads the note through the
    // face, and his read is recorded against payroll.
    let request = OpenRequest {
        link: None,
        accounts: [("wh-prod-7".to_owned(), "finance".to_owned())].into(),
    };
    let opened = k
        .person("bob")
        .open_chat(CHAT, &request)
        .await
        .expect("asked");
    assert!(matches!(opened, OpenOutcome::Admitted { .. }), "{opened:?}");
    let bob = Api::signed_in(&w, &base, "bob").await;
    let a = bob.post(&call, json!({"name": "notes"})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let notes = a.json()["answer"].clone();
    assert_eq!(notes[0]["key"], "pay", "{notes}");
    assert!(
        notes[0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("summary of"),
        "{notes}"
    );
    let reads: Vec<_> = k
        .inspect()
        .ledger(&LedgerFilter {
            chat: Some(CHAT.into()),
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .filter(|e| e.tool.as_deref() == Some("store-get"))
        .map(|e| serde_json::to_string(&e).unwrap())
        .collect();
    assert!(
        reads
            .iter()
            .any(|r| r.contains("payroll") && r.contains("bob")),
        "{reads:?}"
    );

    // The same in the browser, each in their own inbox: Bob opens the face
    // and it lists the note; Carol's inbox does not show her the chat at
    // all, so no face of it either.
    let driver = Driver::start();
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &w, &base, "bob").await;
    open_face(&c, &base, CHAT, "notebook").await;
    wait_for(
        &c,
        "Bob's notes",
        "return document.querySelector('#notes li[data-key=\"pay\"]') !== null",
    )
    .await;
    let note = text(&c, "return document.querySelector('#notes li').textContent").await;
    assert!(note.starts_with("pay: summary of"), "{note}");
    let _ = c.close().await;
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &w, &base, "carol").await;
    c.goto(&format!("{base}/chats/{CHAT}"))
        .await
        .expect("the chat page opens");
    wait_for(
        &c,
        "Carol's refusal",
        "return document.getElementById('error').textContent.startsWith('no chat named')",
    )
    .await;
    let frames = text(
        &c,
        "return String(document.querySelectorAll('iframe, button.open-face').length)",
    )
    .await;
    assert_eq!(frames, "0", "no face for Carol");
    let _ = c.close().await;
    drop(warehouse);
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_mcp_serve_offers_a_face_as_an_mcp_app_and_its_calls_pass_the_gate() {
    let w = World::standard(Trust::Byo).await;
    let serve = McpHttpServe::start(w.home(), "work", "alice");
    let mut c = McpClient::http(&serve.url, Some(&serve.token)).expect("the client connects");

    let resources = c.resources();
    assert_eq!(resources.len(), 1, "{resources:?}");
    assert_eq!(resources[0]["uri"], "ui://gatehouse/triage");
    assert_eq!(resources[0]["mimeType"], "text/html;profile=mcp-app");
    let read = c.read("ui://gatehouse/triage");
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "text/html;profile=mcp-app", "{read}");
    assert!(
        contents["text"]
            .as_str()
            .unwrap_or_default()
            .contains("ui/initialize"),
        "{read}"
    );
    assert_eq!(
        contents["_meta"]["ui"]["csp"]["connectDomains"],
        json!([]),
        "{read}"
    );
    assert!(c.read("ui://gatehouse/nothing").get("error").is_some());

    let tools = c.list();
    let find = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {tools:?}"))
            .clone()
    };
    assert_eq!(
        find("triage.face")["_meta"]["ui"]["resourceUri"],
        "ui://gatehouse/triage"
    );
    assert_eq!(
        find("triage.label")["_meta"]["ui"]["visibility"],
        json!(["app"])
    );
    assert_eq!(
        find("triage.board")["_meta"]["ui"]["visibility"],
        json!(["app"])
    );

    let board = c.call("triage.board", json!({}));
    assert_eq!(board["isError"], false, "{board}");
    assert_eq!(
        board["structuredContent"]["issues"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{board}"
    );
    let label = c.call("triage.label", json!({"id": 1, "label": "bug"}));
    assert_eq!(label["isError"], false, "{label}");
    let id = label["structuredContent"]["pending"]
        .as_i64()
        .expect("pending");
    let said: String = label["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        said.contains(&format!("pending #{id}: staged, nothing sent")),
        "{said}"
    );
    assert_eq!(state(&w, id), ActionState::Pending);
    assert!(
        w.tracker.writes().is_empty(),
        "nothing sent before a decision"
    );
    let unknown = c.call("triage.nothing", json!({}));
    assert_eq!(unknown["isError"], true, "{unknown}");
    drop(c);
    serve.stop();
}
