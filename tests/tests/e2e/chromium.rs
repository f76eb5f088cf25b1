//! Headless Chromium over WebDriver (chromedriver + fantoccini), shared by
//! the browser tests (`web_browser`) and the inbox benchmark
//! (`benches/web_inbox.rs`, which includes this file by path): Debian's
//! `chromium` and `chromium-driver`, installed by `.ci/run`. Without them
//! the tests fail with one line saying how to install them: they never
//! skip. Self-contained: it names nothing else of the test crate.

use fantoccini::{Client, ClientBuilder};
use serde_json::json;
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub const INSTALL: &str = "Chromium is not installed: run `apt-get install -y chromium chromium-driver` (Debian; .ci/run does this)";

pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// chromedriver on an ephemeral port, stopped when dropped.
pub struct Driver {
    child: Child,
    port: u16,
    /// chromedriver's and Chromium's `TMPDIR`: the profile and the
    /// singleton socket Chromium leaves behind when its driver is killed
    /// go with the test instead of piling up in the machine's `/tmp`.
    _tmp: tempfile::TempDir,
}

impl Driver {
    /// The port chromedriver listens on, for a test that needs its own
    /// session settings.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Start chromedriver. On a loaded machine one of many drivers started
    /// at once now and then exits before it listens: that start is tried
    /// again (three times at most) rather than failing the test, and its
    /// own words are in the panic when it never starts.
    pub fn start() -> Driver {
        let driver = on_path("chromedriver").unwrap_or_else(|| panic!("{INSTALL}"));
        if on_path("chromium").is_none() && on_path("chromium-browser").is_none() {
            panic!("{INSTALL}");
        }
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary directory: {e}"));
        let mut said = String::new();
        for _ in 0..3 {
            let mut child = Command::new(&driver)
                .arg("--port=0")
                .env("TMPDIR", tmp.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("chromedriver does not start ({e}); {INSTALL}"));
            let out = child.stdout.take().expect("chromedriver's stdout");
            let mut port = None;
            said.clear();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    port = rest.trim_end_matches('.').trim().parse().ok();
                    break;
                }
                said.push_str(&line);
                said.push(' ');
            }
            if let Some(port) = port {
                return Driver {
                    child,
                    port,
                    _tmp: tmp,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("chromedriver did not report its port three times (it said: {said:?}); {INSTALL}");
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The window a test looks through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// 1280×800, light.
    Desktop,
    /// 1280×800 with the system's dark colour scheme.
    DesktopDark,
    /// A phone: 390×844 CSS pixels, touch.
    Phone,
}

impl Screen {
    pub fn name(self) -> &'static str {
        match self {
            Screen::Desktop => "desktop",
            Screen::DesktopDark => "desktop-dark",
            Screen::Phone => "phone",
        }
    }
}

/// A headless Chromium session looking through `screen`.
pub async fn browser(driver: &Driver, screen: Screen) -> Client {
    let binary = on_path("chromium")
        .or_else(|| on_path("chromium-browser"))
        .unwrap_or_else(|| panic!("{INSTALL}"));
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ];
    let mut options = serde_json::Map::new();
    match screen {
        Screen::Desktop => args.push("--window-size=1280,800"),
        Screen::DesktopDark => {
            args.push("--window-size=1280,800");
            args.push("--force-dark-mode");
            args.push("--blink-settings=preferredColorScheme=0");
        }
        Screen::Phone => {
            args.push("--window-size=390,844");
            options.insert(
                "mobileEmulation".into(),
                json!({"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 1.0, "touch": true}}),
            );
        }
    }
    options.insert("binary".into(), json!(binary));
    options.insert("args".into(), json!(args));
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), options.into());
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("cannot start a Chromium session ({e}); {INSTALL}"));
    if screen != Screen::Phone {
        // The window's size counts its frame: make the page itself 1280×800.
        let frame = c
            .execute(
                "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]",
                vec![],
            )
            .await
            .unwrap_or_default();
        let extra = |i: usize| {
            frame[i]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0)
        };
        let _ = c.set_window_size(1280 + extra(0), 800 + extra(1)).await;
    }
    c
}

/// `<target>/screenshots/`, where the browser tests and the benchmark
/// leave their PNGs (CI keeps target/ as its artifacts), created.
pub fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let target = exe
        .parent()
        .and_then(|deps| deps.parent())
        .and_then(|profile| profile.parent())
        .expect("target/<profile>/deps");
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory");
    dir
}

/// `<target>/tools/web/node_modules/axe-core/axe.min.js` (or under
/// `$GATEHOUSE_TOOLS_DIR`), installed by `tests/web/setup.sh`.
pub fn axe_source() -> String {
    let tools = match std::env::var_os("GATEHOUSE_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => screenshot_dir()
            .parent()
            .expect("the target directory")
            .join("tools"),
    };
    let path = tools.join("web/node_modules/axe-core/axe.min.js");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core is not installed at {} ({e}): run tests/web/setup.sh (.ci/run does this)",
            path.display()
        )
    })
}
