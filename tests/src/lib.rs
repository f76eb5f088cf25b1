//! Test fixtures: a fresh world per test.
//!
//! A [`World`] is a temporary `$GATEHOUSE_HOME`, a real issue tracker on an
//! ephemeral 127.0.0.1 port, and a kernel opened on that home. Guests are
//! the real components built from `gadgets/` and `gatekeepers/` by the host's
//! build script. Nothing here stands in for the thing under test.

use gatehouse::store::Trust;
use gatehouse::{Home, Kernel, Limits};
use gatehouse_services::tracker::Tracker;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub mod bare;
pub mod langs;
pub mod mcp;
pub mod oauth;
pub mod oidc;
pub mod remote;
pub use gatehouse_pg_cluster as postgres;

/// The tracker credential stored as the secret `tracker-token`.
pub const TOKEN: &str = "tok-3c9e1f0d-never-shown-to-guests";

/// The key a shared database's secrets are sealed with in the tests (a
/// shared database needs the operator's key): fixed, so every host and CLI
/// process of a test holds the same one. Base64 of
/// "Gatehouse test key -- not secret".
pub const SHARED_KEY: &str = "R2F0ZWhvdXNlIHRlc3Qga2V5IC0tIG5vdCBzZWNyZXQ=";

/// [`SHARED_KEY`] as a key.
pub fn shared_key() -> gatehouse::seal::Key {
    gatehouse::seal::Key::parse(SHARED_KEY, gatehouse::seal::Origin::Env)
        .expect("the tests' key is a key")
}

/// `cmd` as a host of the shared database at `url`: the one place a
/// test process is given a database and the key its secrets are sealed
/// with.
pub fn on_database<'c>(cmd: &'c mut Command, url: &str) -> &'c mut Command {
    cmd.env("GATEHOUSE_DATABASE_URL", url)
        .env("GATEHOUSE_KEY", SHARED_KEY)
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub tracker: Tracker,
    pub kernel: Kernel,
    /// The shared PostgreSQL database the kernel serves from, when it
    /// does; `None` for the embedded home.
    pub database: Option<String>,
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
        World::build_before(limits, World::tracker(tokens, Keys::Honoured))
    }

    fn build_before(limits: Limits, tracker: Tracker) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kernel = Kernel::open(Home::at(dir.path()), limits).expect("the kernel opens");
        World {
            dir,
            tracker,
            kernel,
            database: None,
        }
    }

    /// A fresh world whose kernel is one host of the shared database at
    /// `url` (migrated to the schema here); its home keeps only this
    /// host's compiled components. Needs a multi-threaded runtime.
    pub async fn shared(url: &str) -> World {
        World::shared_before(url, Keys::Honoured).await
    }

    async fn shared_before(url: &str, keys: Keys) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let o = on_database(&mut cli_command(dir.path(), &["db", "migrate"]), url)
            .output()
            .expect("gatehouse runs");
        assert!(o.status.success(), "db migrate: {}", stderr(&o));
        let tracker = World::tracker(&[], keys);
        let kernel = Kernel::open_shared(Home::at(dir.path()), url, test_limits(), shared_key())
            .await
            .expect("the kernel opens on the shared database");
        World {
            dir,
            tracker,
            kernel,
            database: Some(url.to_owned()),
        }
    }

    /// [`World::standard_with`] on the shared database at `url`.
    pub async fn standard_shared(
        url: &str,
        trust: Trust,
        settings: Vec<(String, String)>,
    ) -> World {
        World::standard_shared_before(url, trust, settings, Keys::Honoured).await
    }

    /// [`World::standard_shared`] before a tracker that honours or
    /// ignores idempotency keys as `keys` says.
    pub async fn standard_shared_before(
        url: &str,
        trust: Trust,
        settings: Vec<(String, String)>,
        keys: Keys,
    ) -> World {
        let w = World::shared_before(url, keys).await;
        w.set_up(trust, settings).await;
        w
    }

    /// Another host of this world's shared database: a kernel on a home
    /// of its own (`home`), in this process.
    pub async fn host(&self, home: &Path) -> Kernel {
        let url = self
            .database
            .as_deref()
            .expect("a world on a shared database");
        Kernel::open_shared(Home::at(home), url, test_limits(), shared_key())
            .await
            .expect("another host opens")
    }

    /// The CLI as a separate host: a process on `home`, serving from this
    /// world's shared database (or on the world's home when it has none).
    pub fn cli_host(&self, home: &Path, args: &[&str]) -> Command {
        let mut c = cli_command(home, args);
        if let Some(url) = &self.database {
            on_database(&mut c, url);
        }
        c
    }

    fn tracker(tokens: &[&str], keys: Keys) -> Tracker {
        let mut tracker = Tracker::builder();
        if keys == Keys::Ignored {
            tracker = tracker.ignore_idempotency_keys();
        }
        for t in tokens {
            tracker = tracker.token(t);
        }
        tracker
            .token(TOKEN)
            .issue("Login page shows a blank screen", &["bug"])
            .issue("Export to CSV drops the header row", &[])
            .start()
            .expect("the tracker starts on 127.0.0.1")
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
            .operator()
            .install(gadget, &bytes, &|_| {})
            .expect("the gadget installs");
    }

    /// Add a gatekeeper fronting the tracker, with the tracker's token.
    pub async fn add_gatekeeper(&self, component: &str, name: &str, trust: Trust) {
        self.add_gatekeeper_with(component, name, trust, Vec::new())
            .await
    }

    /// [`World::add_gatekeeper`] with these `--set KEY=VALUE` settings
    /// (`idempotency-key=ignored`: a tracker instance whose tools do not
    /// honour the kernel's idempotency key).
    pub async fn add_gatekeeper_with(
        &self,
        component: &str,
        name: &str,
        trust: Trust,
        settings: Vec<(String, String)>,
    ) {
        self.front(
            name,
            component,
            trust,
            vec![self.tracker.host()],
            Some(("tracker-token", TOKEN)),
            settings,
        )
        .await
        .expect("the gatekeeper is added");
    }

    /// Add gatekeeper `name` from the guest `component` in front of any
    /// service: reaching `hosts`, with `secret` (name, value) stored and
    /// given as its operator credential, and `settings`. The kernel's
    /// answer, so that a test of a refusal can read it.
    pub async fn front(
        &self,
        name: &str,
        component: &str,
        trust: Trust,
        hosts: Vec<String>,
        secret: Option<(&str, &str)>,
        settings: Vec<(String, String)>,
    ) -> anyhow::Result<()> {
        if let Some((secret, value)) = secret {
            self.kernel.operator().put_secret(secret, value)?;
        }
        let bytes = std::fs::read(guest(component)).expect("guest built");
        self.kernel
            .operator()
            .add_gatekeeper(
                name,
                &bytes,
                trust,
                hosts,
                secret.map(|(s, _)| s.to_owned()),
                settings,
                &|_| {},
            )
            .await
            .map(drop)
    }

    /// [`World::front`] as most tests use it: gatekeeper `name` from the
    /// guest of the same name, as `trust`, reaching the one `host`, with
    /// `secret` (name, value) stored as its operator credential.
    pub async fn front_service(
        &self,
        name: &str,
        trust: Trust,
        host: String,
        secret: (&str, &str),
    ) {
        self.front(name, name, trust, vec![host], Some(secret), Vec::new())
            .await
            .unwrap_or_else(|e| panic!("gatekeeper {name:?} is not added: {e:#}"));
    }

    /// Chat `chat` of `owner`, with each `(gatekeeper, key)` introduced
    /// (every tool granted). Chainable, like [`World::users`] and
    /// [`World::connect`], so that a world's people, accounts and chats
    /// read as one setup.
    pub fn chat_with(&self, chat: &str, owner: &str, introduced: &[(&str, &str)]) -> &World {
        self.kernel.person(owner).new_chat(chat).expect("chat");
        self.introduce(chat, owner, introduced)
    }

    /// Each `(gatekeeper, key)` introduced into `chat` by `owner` (every
    /// tool granted).
    pub fn introduce(&self, chat: &str, owner: &str, introduced: &[(&str, &str)]) -> &World {
        for (gatekeeper, key) in introduced {
            self.kernel
                .person(owner)
                .introduce(chat, gatekeeper, key, None)
                .expect("introduce");
        }
        self
    }

    /// These people known to the deployment, in this order.
    pub fn users(&self, people: &[&str]) -> &World {
        for person in people {
            self.kernel.operator().add_user(person).expect("user");
        }
        self
    }

    /// `person`'s own `token` connected as their account `main` at
    /// `gatekeeper` (`default`: made their default account there).
    pub fn connect(&self, person: &str, gatekeeper: &str, token: &str, default: bool) -> &World {
        self.kernel
            .person(person)
            .connect_account(gatekeeper, "main", token, default)
            .expect("the account connects");
        self
    }

    /// A world where `person` has an account of their own at the tracker:
    /// the tracker also takes their `token`, `gadgets` are installed, the
    /// `issues` gatekeeper is added as `trust` (with the operator's
    /// token), `people` are known, and `token` is connected as `person`'s
    /// account at `issues` (`default`: made their default there). No chat
    /// yet: [`World::chat_with`] says whose, with what.
    pub async fn with_account(
        gadgets: &[&str],
        trust: Trust,
        people: &[&str],
        (person, token): (&str, &str),
        default: bool,
    ) -> World {
        let w = World::with_tokens(&[token]);
        for gadget in gadgets {
            w.install(gadget);
        }
        w.add_gatekeeper("issues", "issues", trust).await;
        w.users(people).connect(person, "issues", token, default);
        w
    }

    /// The usual setup: `script` and `triage` installed, the `issues`
    /// gatekeeper added as `trust`, chat `work` with it introduced as ISSUES.
    pub async fn standard(trust: Trust) -> World {
        World::standard_with(trust, Vec::new()).await
    }

    /// [`World::standard`], the `issues` instance added with `settings`.
    pub async fn standard_with(trust: Trust, settings: Vec<(String, String)>) -> World {
        World::standard_before(trust, settings, Keys::Honoured).await
    }

    /// [`World::standard_with`] before a tracker that honours or ignores
    /// idempotency keys as `keys` says (whatever the operator stated).
    pub async fn standard_before(
        trust: Trust,
        settings: Vec<(String, String)>,
        keys: Keys,
    ) -> World {
        let w = World::build_before(test_limits(), World::tracker(&[], keys));
        w.set_up(trust, settings).await;
        w
    }

    async fn set_up(&self, trust: Trust, settings: Vec<(String, String)>) {
        self.install("script");
        self.install("triage");
        self.add_gatekeeper_with("issues", "issues", trust, settings)
            .await;
        self.chat_with("work", "alice", &[("issues", "ISSUES")]);
    }

    /// Run the `script` gadget with these steps; returns its JSON answer.
    pub async fn script(&self, chat: &str, steps: Value) -> Value {
        let input = json!({ "steps": steps }).to_string();
        let report = self
            .kernel
            .operator()
            .run("script", chat, &input)
            .await
            .expect("the turn runs");
        let out = report
            .output
            .unwrap_or_else(|e| panic!("script gadget failed: {e}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("script output {out:?}: {e}"))
    }

    /// Stage one `addLabel` of issue 1 in `work` through the `script`
    /// gadget; the pending action's id.
    pub async fn stage_label(&self, label: &str) -> i64 {
        self.stage_label_on("work", 1, label).await
    }

    /// Stage one `addLabel` of `label` on issue `issue` in `chat` through
    /// the `script` gadget; the pending action's id (the step must be
    /// pending: one that is not fails the test).
    pub async fn stage_label_on(&self, chat: &str, issue: i64, label: &str) -> i64 {
        let out = self.script(chat, add_label(issue, label)).await;
        pending_id(&out[0])
    }

    /// Stage in `work` a write that needs a person (`createIssue`), then an
    /// eligible one (`addLabel`), which waits behind it (SPEC U2); their
    /// ids.
    pub async fn stage_manual_then_eligible(&self) -> (i64, i64) {
        let out = self
            .script(
                "work",
                json!([
                    call("ISSUES", "createIssue", json!({"title": "needs a person"})),
                    call("ISSUES", "addLabel", json!({"id": 1, "label": "auto"})),
                ]),
            )
            .await;
        (pending_id(&out[0]), pending_id(&out[1]))
    }

    /// Assert that the actions `ids`, staged as labels `l0`, `l1`, ... in
    /// that order, reached the tracker once each, in id order, and that
    /// none was claimed before the one before it finished (SPEC U2, U3).
    pub fn assert_sent_once_in_order(&self, ids: &[i64]) {
        let labels: Vec<String> = self
            .tracker
            .writes()
            .iter()
            .map(|r| {
                serde_json::from_str::<Value>(&r.body).expect("a JSON body")["label"].to_string()
            })
            .collect();
        let want: Vec<String> = (0..ids.len()).map(|i| format!("\"l{i}\"")).collect();
        assert_eq!(labels, want, "each sent once, in id order");
        let actions: Vec<_> = ids
            .iter()
            .map(|id| self.kernel.inspect().action(*id).unwrap().unwrap())
            .collect();
        for pair in actions.windows(2) {
            assert!(
                pair[1].decided_at >= pair[0].finished_at,
                "action {} was claimed at {:?}, before action {} finished at {:?}",
                pair[1].id,
                pair[1].decided_at,
                pair[0].id,
                pair[0].finished_at
            );
        }
    }

    /// The embedded home's database, opened beside the kernel, for a test
    /// that reads what was stored or sets up a state no command makes.
    /// It waits for the kernel's writes rather than failing on them.
    pub fn sqlite(&self) -> rusqlite::Connection {
        let db = rusqlite::Connection::open(self.home().join("gatehouse.db"))
            .expect("the home's database opens");
        db.busy_timeout(Duration::from_secs(30))
            .expect("a busy timeout");
        db
    }

    /// Latch chat `chat`'s lockdown in the embedded home's database, as
    /// if it had read owner-only data: what a test of a locked-down chat
    /// starts from.
    pub fn lock_down(&self, chat: &str) {
        self.sqlite()
            .execute("UPDATE chats SET latched = 1 WHERE name = ?1", [chat])
            .expect("the chat is latched");
    }

    /// How many POST requests reached the tracker, whatever became of
    /// them (refused, answered from a key, applied): each one a send.
    pub fn posts_received(&self) -> usize {
        self.tracker
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count()
    }

    /// A one-time sign-in token for `user`, good for a minute: what
    /// `gatehouse token create` hands a person for the web inbox.
    pub fn signin_token(&self, user: &str) -> String {
        self.kernel
            .operator()
            .create_signin_token(user, 60_000)
            .expect("a sign-in token")
    }

    /// The ledger's observations in chat `chat` (every read recorded
    /// there), oldest first.
    pub fn observations(&self, chat: &str) -> Vec<gatehouse::store::LedgerEntry> {
        self.kernel
            .inspect()
            .ledger(&gatehouse::store::LedgerFilter {
                chat: Some(chat.into()),
                kind: Some(gatehouse::store::LedgerKind::Observation),
                ..Default::default()
            })
            .expect("the ledger")
    }

    /// `person`'s rule auto-approving `issues:addLabel` in every chat of
    /// theirs: the second key of two-key auto-approval (SPEC U1). What
    /// enabling it reported (the first key, what it drained).
    pub async fn label_rule(&self, person: &str) -> gatehouse::overseer::RuleReport {
        self.kernel
            .person(person)
            .add_rule("issues:addLabel", None)
            .await
            .expect("the rule is added")
    }

    /// Run the CLI as a separate process on this world's home (and its
    /// shared database, if it has one).
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_host(self.home(), args)
            .output()
            .expect("the gatehouse binary runs")
    }
}

/// The setting that makes an `issues` instance front a tracker that does
/// not honour idempotency keys: its tools declare no key and send none, so
/// the kernel keeps the at-most-once rule for them (SPEC P3). The default.
pub fn keys_ignored() -> Vec<(String, String)> {
    vec![("idempotency-key".into(), "ignored".into())]
}

/// The operator's statement that an `issues` instance's service honours
/// idempotency keys: its writes then declare `honours-idempotency-key` and
/// send the kernel's key. Recovery believes it only for a vetted instance
/// (SPEC P9).
pub fn keys_honoured() -> Vec<(String, String)> {
    vec![("idempotency-key".into(), "honoured".into())]
}

/// Whether the world's tracker honours `Idempotency-Key` headers (it does
/// by default) or ignores them, as many real services do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// A repeated key gets the first answer and applies nothing.
    Honoured,
    /// Every request is applied, key or no key.
    Ignored,
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

/// A CLI command on `home`, with a quiet log and a fixed user. Hermetic: it
/// starts from an empty environment (a developer's `RUST_BACKTRACE` or
/// `GATEHOUSE_*` never changes a result), plus `PATH` and a `HOME`.
pub fn cli_command(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(cli_binary());
    c.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
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

/// The stderr of a CLI refusal, checked to be one: a failed exit, said
/// in one line (what an operator reads in a log or a terminal).
pub fn one_line(o: &Output) -> String {
    let e = stderr(o);
    assert!(!o.status.success(), "expected a refusal: {}", stdout(o));
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    e
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

/// The CLI's `hook add` binding `trigger` of the `issues` gatekeeper to
/// the `triage` gadget in chat `work`, then `more` arguments.
pub fn add_hook<'a>(trigger: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "hook",
        "add",
        "work",
        "--gatekeeper",
        "issues",
        "--trigger",
        trigger,
        "--gadget",
        "triage",
    ];
    args.extend_from_slice(more);
    args
}

/// The `script` steps of `n` writes, labels `l0`, `l1`, ... on issue 1.
pub fn labels(n: usize) -> Value {
    (0..n)
        .map(|i| {
            call(
                "ISSUES",
                "addLabel",
                json!({"id": 1, "label": format!("l{i}")}),
            )
        })
        .collect()
}

/// A `script` step that labels issue `issue` with `label` (`addLabel`,
/// through the chat's `ISSUES`).
pub fn label_step(issue: i64, label: &str) -> Value {
    call("ISSUES", "addLabel", json!({"id": issue, "label": label}))
}

/// A `script` step that opens an issue titled `title` (`createIssue`,
/// through the chat's `ISSUES`).
pub fn create_step(title: &str) -> Value {
    call("ISSUES", "createIssue", json!({ "title": title }))
}

/// The `script` steps of one `addLabel` of `label` on issue `issue`.
pub fn add_label(issue: i64, label: &str) -> Value {
    json!([label_step(issue, label)])
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
            .operator()
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

// ----- hostile input -----

/// Crafted files, written by a small generator here rather than checked in
/// as binaries: components nested deeper than any compiler stack takes, and
/// blueprints carrying them.
pub mod crafted {
    use sha2::{Digest as _, Sha256};

    /// `\0asm`, component-model version 0x0d, layer 1.
    pub const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    /// A non-negative number as a signed LEB128 (`s33`, how a value type
    /// names a type index).
    fn sleb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 && byte & 0x40 == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len(), out);
        out.extend_from_slice(body);
    }

    /// A component with one type: `depth` component types, each declaring
    /// the next (`(type (component (type (component ...))))`).
    pub fn nested_component_types(depth: usize) -> Vec<u8> {
        nested_types(depth, 0x41)
    }

    /// The same with instance types (`(type (instance (type (instance ...))))`).
    pub fn nested_instance_types(depth: usize) -> Vec<u8> {
        nested_types(depth, 0x42)
    }

    fn nested_types(depth: usize, kind: u8) -> Vec<u8> {
        let mut body = vec![1u8];
        for _ in 0..depth {
            body.extend([kind, 1, 0x01]);
        }
        body.extend([0x41, 0]);
        let mut out = COMPONENT_HEADER.to_vec();
        section(7, &body, &mut out);
        out
    }

    /// `depth` components, each the only section of the one around it.
    pub fn nested_components(depth: usize) -> Vec<u8> {
        let mut inner = COMPONENT_HEADER.to_vec();
        for _ in 0..depth {
            let mut outer = COMPONENT_HEADER.to_vec();
            section(4, &inner, &mut outer);
            inner = outer;
        }
        inner
    }

    /// A value type nested `depth` deep (`(list (list ... u8))`), each
    /// level referring to the type before it.
    pub fn nested_value_types(depth: usize) -> Vec<u8> {
        let mut body = Vec::new();
        leb(depth + 1, &mut body);
        body.push(0x7d); // u8
        for i in 0..depth {
            body.push(0x70); // list
            sleb(i, &mut body); // of the type before
        }
        let mut out = COMPONENT_HEADER.to_vec();
        section(7, &body, &mut out);
        out
    }

    /// A blueprint (`gatehouse export`'s format) carrying `component`.
    pub fn blueprint(name: &str, component: &[u8]) -> Vec<u8> {
        use base64::Engine as _;
        serde_json::json!({
            "format": "gatehouse-blueprint/1",
            "gadget": {
                "name": name,
                "sha256": hex::encode(Sha256::digest(component)),
                "component": base64::engine::general_purpose::STANDARD.encode(component),
            },
            "requirements": [],
        })
        .to_string()
        .into_bytes()
    }
}

/// A loopback HTTP service that answers every request with what it was
/// sent: `{"method", "path", "headers": {name: value}}` (a misbehaving
/// service that echoes request headers, credentials included). Every
/// request is kept for the test to inspect.
pub struct EchoService {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl EchoService {
    /// Answer every request with `status`.
    pub fn start(status: u16) -> EchoService {
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("an echo port");
        let addr = listener.local_addr().expect("its address");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or("").to_owned();
                    let path = parts.next().unwrap_or("").to_owned();
                    let mut headers = serde_json::Map::new();
                    let mut length = 0usize;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                            if k == "content-length" {
                                length = v.parse().unwrap_or(0);
                            }
                            headers.insert(k, Value::String(v));
                        }
                    }
                    let mut body = vec![0u8; length];
                    let _ = reader.read_exact(&mut body);
                    let echoed = json!({"method": method, "path": path, "headers": headers});
                    log.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(echoed.clone());
                    let text = echoed.to_string();
                    let mut out = &stream;
                    let _ = write!(
                        out,
                        "HTTP/1.1 {status} Echo\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                });
            }
        });
        EchoService { addr, seen }
    }

    /// `127.0.0.1:PORT`, for `--allow-host`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Send `signal` (`TERM`, `KILL`) to a process, with the system's `kill`.
pub fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{signal} {pid} failed");
}

/// Kernels draining over and over, each on a task of its own, until
/// [`Drainers::stop`] (as other processes or hosts would, each after its
/// own events).
pub struct Drainers {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drainers {
    pub fn start(kernels: Vec<Kernel>) -> Drainers {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = kernels
            .into_iter()
            .map(|k| {
                let done = done.clone();
                tokio::spawn(async move {
                    while !done.load(std::sync::atomic::Ordering::SeqCst) {
                        k.drain().await.expect("a drain");
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        Drainers { done, tasks }
    }

    /// Stop draining, once every drain under way has ended.
    pub async fn stop(self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("a drainer");
        }
    }
}

/// A `gatehouse serve --port 0` process, stopped (killed) when dropped.
pub struct Serving {
    pub child: std::process::Child,
    /// The inbox's address, as the process printed it (no trailing `/`).
    pub url: String,
    /// The rest of its output, kept open: the server keeps serving.
    _out: std::io::BufReader<std::process::ChildStdout>,
}

impl Serving {
    /// Start `serve` (`cmd` is the whole command, environment set) and
    /// wait for the address it prints first.
    pub fn start(mut cmd: Command) -> Serving {
        use std::io::BufRead as _;
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("serve prints its address");
        let url = first
            .strip_prefix("serving the inbox at ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .trim_end_matches('/')
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Serving {
            child,
            url,
            _out: out,
        }
    }

    /// The one-time token of the sign-in link `token create` printed in
    /// `o`, which must point at this server.
    pub fn token_from(&self, o: &Output) -> String {
        assert!(o.status.success(), "{}", stderr(o));
        let link = stdout(o).trim().to_owned();
        assert!(
            link.starts_with(&format!("{}/signin?token=", self.url)),
            "{link} vs {}",
            self.url
        );
        link.rsplit('=').next().unwrap_or_default().to_owned()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
