//! Test fixtures: a fresh world per test.
//!
//! A [`World`] is a temporary `$GATEHOUSE_HOME`, a real issue tracker on an
//! ephemeral 127.0.0.1 port, and a kernel opened on that home. Guests are
//! the real components built from `gadgets/` and `gatekeepers/` by the host's
//! build script. Nothing here stands in for the thing under test.

use gatehouse::demo::tracker::Tracker;
use gatehouse::store::Trust;
use gatehouse::{Home, Kernel, Limits};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub mod langs;

/// The tracker credential stored as the secret `tracker-token`.
pub const TOKEN: &str = "tok-3c9e1f0d-never-shown-to-guests";

pub struct World {
    pub dir: tempfile::TempDir,
    pub tracker: Tracker,
    pub kernel: Kernel,
}

/// Limits short enough that hostile guests are stopped quickly in tests.
pub fn test_limits() -> Limits {
    Limits {
        gadget_deadline: Duration::from_secs(20),
        gatekeeper_deadline: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        ..Limits::default()
    }
}

impl World {
    /// A fresh home and tracker, seeded with two issues.
    pub fn new() -> World {
        World::with_limits(test_limits())
    }

    pub fn with_limits(limits: Limits) -> World {
        World::build(limits, &[])
    }

    /// A fresh world whose tracker also accepts these people's own tokens
    /// (for accounts connected with `account connect`).
    pub fn with_tokens(tokens: &[&str]) -> World {
        World::build(test_limits(), tokens)
    }

    fn build(limits: Limits, tokens: &[&str]) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut tracker = Tracker::builder();
        for t in tokens {
            tracker = tracker.token(t);
        }
        let tracker = tracker
            .token(TOKEN)
            .issue("Login page shows a blank screen", &["bug"])
            .issue("Export to CSV drops the header row", &[])
            .start()
            .expect("the tracker starts on 127.0.0.1");
        let kernel = Kernel::open(Home::at(dir.path()), limits).expect("the kernel opens");
        World {
            dir,
            tracker,
            kernel,
        }
    }

    pub fn home(&self) -> &Path {
        self.dir.path()
    }

    /// Open a second kernel on the same home (as another process would).
    pub fn reopen(&self) -> Kernel {
        Kernel::open(Home::at(self.home()), test_limits()).expect("the kernel reopens")
    }

    pub fn install(&self, gadget: &str) {
        let bytes = std::fs::read(guest(gadget)).expect("guest built");
        self.kernel
            .install(gadget, &bytes, &|_| {})
            .expect("the gadget installs");
    }

    /// Add a gatekeeper fronting the tracker, with the tracker's token.
    pub async fn add_gatekeeper(&self, component: &str, name: &str, trust: Trust) {
        self.kernel
            .put_secret("tracker-token", TOKEN)
            .expect("secret stored");
        let bytes = std::fs::read(guest(component)).expect("guest built");
        self.kernel
            .add_gatekeeper(
                name,
                &bytes,
                trust,
                vec![self.tracker.host()],
                Some("tracker-token".into()),
                Vec::new(),
                &|_| {},
            )
            .await
            .expect("the gatekeeper is added");
    }

    /// The usual setup: `script` and `triage` installed, the `issues`
    /// gatekeeper added as `trust`, chat `work` with it introduced as ISSUES.
    pub async fn standard(trust: Trust) -> World {
        let w = World::new();
        w.install("script");
        w.install("triage");
        w.add_gatekeeper("issues", "issues", trust).await;
        w.kernel.new_chat("work", "alice").expect("chat");
        w.kernel
            .introduce("work", "issues", "ISSUES", None, "alice")
            .expect("introduce");
        w
    }

    /// Run the `script` gadget with these steps; returns its JSON answer.
    pub async fn script(&self, chat: &str, steps: Value) -> Value {
        let input = json!({ "steps": steps }).to_string();
        let report = self
            .kernel
            .run("script", chat, &input)
            .await
            .expect("the turn runs");
        let out = report
            .output
            .unwrap_or_else(|e| panic!("script gadget failed: {e}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("script output {out:?}: {e}"))
    }

    /// Run the CLI as a separate process on this world's home.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli_command(self.home(), args)
            .output()
            .expect("the gatehouse binary runs")
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

/// The path of a built guest component.
pub fn guest(name: &str) -> PathBuf {
    gatehouse::guests::path(name)
}

/// The gatehouse CLI binary of this crate. Cargo builds it next to the test
/// executables' `deps/` directory whenever this crate's tests are built.
pub fn cli_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executables live in target/<profile>/deps");
    profile_dir.join(format!("gatehouse{}", std::env::consts::EXE_SUFFIX))
}

/// A CLI command on `home`, with a quiet log and a fixed user.
pub fn cli_command(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(cli_binary());
    c.args(args)
        .env("GATEHOUSE_HOME", home)
        .env("GATEHOUSE_USER", "alice")
        .env("GATEHOUSE_GATEKEEPER_DEADLINE_MS", "5000")
        .env_remove("RUST_BACKTRACE");
    c
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Poll `cond` until it holds or `timeout` passes. Tests wait for
/// conditions, never for fixed sleeps.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A `call` step for the script gadget.
pub fn call(key: &str, tool: &str, args: Value) -> Value {
    json!({"call": {"key": key, "tool": tool, "args": args}})
}

/// The action id of a `pending` step result.
pub fn pending_id(step: &Value) -> i64 {
    step["pending"]["action_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected a pending action, got {step}"))
}

// ----- helpers for the sandbox, caps and install tests -----

/// [`test_limits`] with these two deadlines, for tests that wait for one.
pub fn limits_with_deadlines(gadget: Duration, gatekeeper: Duration) -> Limits {
    Limits {
        gadget_deadline: gadget,
        gatekeeper_deadline: gatekeeper,
        ..test_limits()
    }
}

impl World {
    /// Run one turn of any gadget. The kernel itself must accept the turn
    /// (gadget installed, chat exists); the gadget's own failure is in
    /// `output`.
    pub async fn turn(&self, gadget: &str, chat: &str, input: &str) -> gatehouse::TurnReport {
        self.kernel
            .run(gadget, chat, input)
            .await
            .unwrap_or_else(|e| panic!("the kernel refused to run {gadget:?} in {chat:?}: {e:#}"))
    }

    /// The names of the installed gadgets, in the store's order.
    pub fn gadget_names(&self) -> Vec<String> {
        self.kernel
            .gadgets()
            .unwrap_or_else(|e| panic!("listing gadgets failed: {e:#}"))
            .into_iter()
            .map(|g| g.name)
            .collect()
    }

    /// The names of the added gatekeepers, in the store's order.
    pub fn gatekeeper_names(&self) -> Vec<String> {
        self.kernel
            .gatekeepers()
            .unwrap_or_else(|e| panic!("listing gatekeepers failed: {e:#}"))
            .into_iter()
            .map(|g| g.name.clone())
            .collect()
    }
}

/// The compiled cache entries (`<home>/components/*.cwasm`), sorted.
pub fn compiled_files(home: &Path) -> Vec<PathBuf> {
    let dir = home.join("components");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    files.sort();
    files
}
