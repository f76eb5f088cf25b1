//! A gadget's face as an MCP App, in a host that is not ours: the official
//! `@modelcontextprotocol/ext-apps` SDK's AppBridge and MCP client
//! (tests/mcp-apps, bundled by its setup.sh) in a real headless Chromium,
//! reaching `gatehouse mcp serve --http` through a small Node server that
//! holds the bearer token. The triage board renders in the sandboxed
//! iframe, and its click is one more gated call: the write is staged
//! pending and nothing reaches the tracker until alice approves it.

use crate::chromium::{Driver, Screen, browser};
use crate::surfaces::web_api::PATIENCE;
use crate::surfaces::web_browser::{screenshot, text, wait_for};
use fantoccini::Locator;
use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::World;
use gatehouse_e2e::langs::{repo_root, tools_dir};
use gatehouse_e2e::mcp::McpHttpServe;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SETUP: &str =
    "run tests/mcp-apps/setup.sh (.ci/run does this) with the same CARGO_TARGET_DIR";

/// `<tools>/mcp-apps`, holding the host's bundle, checked to be there and
/// built from the host.js of this tree (an edited host.js with an old
/// bundle would test code that is not the one in the repository).
fn bundle_dir() -> PathBuf {
    let dir = tools_dir().join("mcp-apps");
    let bundle = dir.join("host.bundle.js");
    let built = std::fs::metadata(&bundle)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "the MCP App host is not built at {} ({e}): {SETUP}",
                bundle.display()
            )
        });
    let source = repo_root().join("tests/mcp-apps/host.js");
    let edited = std::fs::metadata(&source)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    assert!(
        built >= edited,
        "{} is older than {}: {SETUP}",
        bundle.display(),
        source.display()
    );
    dir
}

/// tests/mcp-apps/server.mjs under node: the host page and a forwarder of
/// `/mcp` to `serve` with its token. Stopped when dropped.
struct HostPage {
    child: Child,
    /// `http://127.0.0.1:PORT/`, the host page.
    url: String,
}

impl HostPage {
    fn start(serve: &McpHttpServe, bundles: &Path, log: &Path) -> HostPage {
        let node = crate::chromium::on_path("node")
            .unwrap_or_else(|| panic!("node is not on PATH; the MCP App host runs under it"));
        let stderr = std::fs::File::create(log).expect("the host server's log file");
        let mut child = Command::new(node)
            .arg(repo_root().join("tests/mcp-apps/server.mjs"))
            .arg(bundles)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("MCP_URL", &serve.url)
            .env("MCP_TOKEN", &serve.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("node starts the MCP App host's server");
        let mut first = String::new();
        let read = BufReader::new(child.stdout.take().expect("its stdout")).read_line(&mut first);
        let url = first.trim().to_owned();
        if read.is_err() || !url.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the MCP App host's server did not print its URL (got {url:?}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        HostPage { child, url }
    }
}

impl Drop for HostPage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn faces_an_mcp_app_renders_through_the_ext_apps_host_and_its_call_is_gated() {
    let bundles = bundle_dir();
    let driver = Driver::start();
    let w = World::standard(Trust::Byo).await;
    let serve = McpHttpServe::start(w.home(), "work", "alice");
    let host = HostPage::start(&serve, &bundles, &w.home().join("mcp-apps-host.stderr"));
    let c = browser(&driver, Screen::Desktop).await;
    c.goto(&host.url).await.expect("the host page opens");

    // The host connected, found the opener, read its page and handed the
    // app its input and result; or it says why not.
    wait_for(
        &c,
        "the host to connect or fail",
        "const t = document.getElementById('host-status').textContent; return t.startsWith('connected') || t.startsWith('error')",
    )
    .await;
    let status = text(
        &c,
        "return document.getElementById('host-status').textContent",
    )
    .await;
    assert_eq!(
        status,
        "connected: triage.face shows ui://gatehouse/triage",
        "the host server's stderr: {}",
        std::fs::read_to_string(w.home().join("mcp-apps-host.stderr")).unwrap_or_default()
    );
    let frame = c
        .find(Locator::Css("#app iframe"))
        .await
        .expect("the app's iframe");
    assert_eq!(
        frame.attr("sandbox").await.expect("its sandbox attribute"),
        Some("allow-scripts".to_owned()),
        "scripts, and no same origin"
    );
    frame.enter_frame().await.expect("into the app's iframe");
    assert_eq!(
        text(&c, "return String(window.origin)").await,
        "null",
        "the app runs in an opaque origin"
    );

    // The board, drawn from the tracker's issues through the host's calls.
    wait_for(
        &c,
        "the board's two issues",
        "return document.querySelectorAll('#issues tr[data-id]').length === 2",
    )
    .await;
    let apply = "button.apply[data-id=\"1\"]";
    let label = text(
        &c,
        &format!("return document.querySelector('{apply}').textContent"),
    )
    .await;
    let label = label
        .strip_prefix("Label ")
        .unwrap_or_else(|| panic!("the button says {label:?}"))
        .to_owned();
    assert!(
        w.kernel
            .inspect()
            .pending(Some("work"))
            .expect("the pending list")
            .is_empty()
    );
    assert!(w.tracker.writes().is_empty());

    c.find(Locator::Css(apply))
        .await
        .expect("the Label button of issue 1")
        .click()
        .await
        .expect("the click");
    let said_js = "document.getElementById('status').textContent";
    wait_for(
        &c,
        "the page to say whether the label was staged",
        &format!(
            "return {said_js}.startsWith('Staged as #') || {said_js}.startsWith('Not staged')"
        ),
    )
    .await;
    let said = text(&c, &format!("return {said_js}")).await;
    let id: i64 = said
        .strip_prefix("Staged as #")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the page says {said:?}"));
    assert_eq!(
        said,
        format!("Staged as #{id}: nothing is sent until someone approves it.")
    );

    // Held: the kernel has it pending, the tracker has nothing.
    let action = w
        .kernel
        .inspect()
        .action(id)
        .expect("the ledger reads")
        .unwrap_or_else(|| panic!("no action #{id}"));
    assert_eq!(action.state, ActionState::Pending, "{action:?}");
    assert_eq!(
        (
            action.chat.as_str(),
            action.tool.as_str(),
            action.gadget.as_deref()
        ),
        ("work", "addLabel", Some("triage")),
        "{action:?}"
    );
    let pending: Vec<i64> = w
        .kernel
        .inspect()
        .pending(Some("work"))
        .expect("the pending list")
        .iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(pending, [id]);
    assert!(w.tracker.writes().is_empty(), "{:?}", w.tracker.writes());
    // The board refreshed through the host too and lists it as pending.
    wait_for(
        &c,
        "the staged write on the board",
        &format!(
            "return [...document.querySelectorAll('#staged li')].some((li) => li.textContent === '#{id}: label {label} on issue #1 (pending)')"
        ),
    )
    .await;
    screenshot(&c, "faces-mcp-app-staged").await;

    // A person approves: now, and only now, the label is sent, once.
    let decided = tokio::time::timeout(PATIENCE, w.kernel.person("alice").approve(id))
        .await
        .expect("the approval finishes")
        .expect("the approval runs");
    assert!(
        matches!(decided, gatehouse::overseer::Decision::Applied { .. }),
        "{decided:?}"
    );
    let state = w
        .kernel
        .inspect()
        .action(id)
        .expect("the ledger reads")
        .map(|a| a.state);
    assert_eq!(state, Some(ActionState::Applied));
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].method.as_str(), writes[0].path.as_str()),
        ("POST", "/issues/1/labels")
    );
    assert!(writes[0].body.contains(&label), "{:?}", writes[0].body);
    let _ = c.close().await;
}
