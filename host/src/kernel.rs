//! The kernel: the only path between a gadget and the outside world.
//!
//! Owns the call path of SPEC C2-C5, K and A1: resolve an introduction for
//! the turn's principal, check the grant, ask `classify` (the only reader of
//! annotations), then either run a read and record its observation (O1) or
//! stage an action and answer `pending`. Approval and the one send path live
//! in `crate::overseer`; the record of reads in `crate::observations`; who
//! may do what in `crate::access`. This module may not read annotations
//! itself, and never sends an action.

use crate::classify::{self, Kind};
use crate::home::Home;
use crate::liveness::Liveness;
use crate::principal::Credential;
use crate::runtime::gadget::{Entry, TurnReport};
use crate::runtime::gatekeeper::{self as gk, Reach, wit as gkwit};
pub use crate::runtime::view::{ActionStatus, CallError, CallOutcome, PendingAction};
use crate::runtime::view::{Answer, KernelView};
use crate::runtime::{Limits, Runtime};
use crate::seal::Key;
use crate::store::{
    Action, Facts, GadgetRecord, GatekeeperRecord, NewAction, Observed, Resolved, StageError,
    StagedAction, Store, Unresolved,
};
use anyhow::{Context as _, bail};
use std::sync::Arc;

pub use crate::turn::{Harness, StepContext, Turn};

impl From<Unresolved> for CallError {
    fn from(u: Unresolved) -> CallError {
        match u {
            Unresolved::UnknownKey { key, known } => CallError::UnknownKey { key, known },
            Unresolved::NoStanding { chat } => {
                CallError::Refused(crate::access::Refusal::NoSuchChat(chat).to_string())
            }
            Unresolved::Removed { key } => CallError::Refused(format!(
                "the gatekeeper behind {key} was removed; ask the chat's owner to introduce a service again"
            )),
        }
    }
}

/// An introduction resolved for a turn, with the chat's pending actions at
/// its gatekeeper when that gatekeeper simulates (the overlay, SPEC V1).
#[derive(Clone, Debug)]
pub struct Binding {
    /// The introduction, its gatekeeper and credential for the turn's person.
    pub resolved: Arc<Resolved>,
    /// The chat's pending actions at a simulating gatekeeper, laid over its
    /// reads (SPEC V1); empty otherwise.
    pub overlay: Vec<Action>,
}

impl Binding {
    /// The gatekeeper instance the key names.
    pub fn gatekeeper(&self) -> &GatekeeperRecord {
        &self.resolved.gatekeeper
    }

    /// The tools this introduction grants, in the gatekeeper's order.
    pub fn granted_tools(&self) -> Vec<classify::Tool> {
        self.resolved
            .gatekeeper
            .manifest
            .tools
            .iter()
            .filter(|t| self.resolved.grants(&t.name))
            .cloned()
            .collect()
    }
}

/// Connections a host keeps to the shared database for its store calls
/// (besides its presence, its listener and a drain's flight, each one
/// connection of its own).
const SHARED_CONNECTIONS: usize = 8;

/// The kernel. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<Inner>,
}

struct Inner {
    home: Home,
    store: Store,
    runtime: Runtime,
    /// This process's owner token, and how it tells whether another's
    /// lives (claims carry the token; see `crate::liveness`).
    liveness: Liveness,
    /// Bumped whenever a host staged, decided or finished an action in the
    /// shared database (LISTEN/NOTIFY), so that live views wake without
    /// polling; listened for from the first ask on (a one-shot command
    /// never asks, and keeps no listening connection). Never bumped on a
    /// home, where the live view's tick reads the same file.
    elsewhere: tokio::sync::OnceCell<tokio::sync::watch::Receiver<u64>>,
    /// Single flight for auto-approval drains (see `crate::overseer`).
    drain_gate: tokio::sync::Mutex<()>,
    drain_wanted: std::sync::Mutex<DrainScope>,
    /// Work started beside a gadget (drains); awaited by [`Kernel::settle`].
    background: std::sync::Mutex<tokio::task::JoinSet<()>>,
    /// The certificate authority, opened on first use (SPEC G3).
    authority: std::sync::OnceLock<Arc<crate::grants::Authority>>,
    /// The deployment secret idempotency keys are derived from.
    idempotency_secret: String,
    /// Faces' pages, checked, per component digest (`crate::face`).
    faces: crate::manifest::Pages,
}

/// What an auto-approval drain must look at: every chat, or some. Kernel
/// state (the wanted scope lives in [`Kernel`] beside the drain's single
/// flight gate); the overseer's drain widens and takes it.
#[derive(Debug, Default, Clone)]
pub(crate) enum DrainScope {
    #[default]
    Nothing,
    Chats(std::collections::BTreeSet<String>),
    All,
}

impl DrainScope {
    pub(crate) fn chat(chat: &str) -> DrainScope {
        DrainScope::Chats([chat.to_owned()].into())
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, DrainScope::Nothing)
    }

    /// Widen this request by `other`.
    pub(crate) fn add(&mut self, other: DrainScope) {
        *self = match (std::mem::take(self), other) {
            (DrainScope::All, _) | (_, DrainScope::All) => DrainScope::All,
            (DrainScope::Nothing, o) | (o, DrainScope::Nothing) => o,
            (DrainScope::Chats(mut a), DrainScope::Chats(b)) => {
                a.extend(b);
                DrainScope::Chats(a)
            }
        };
    }
}

impl Kernel {
    /// Open the state under `home`, then recover interrupted claims (P3).
    ///
    /// Each process holds an exclusive lock on a file named by a fresh
    /// token for as long as it lives, and claims carry that token. A claim
    /// is interrupted exactly when its token's lock is free, so a CLI
    /// process starting up never fails the claim of another one that is
    /// still applying (the kernel is opened by every command).
    ///
    /// The home's secrets are sealed with its own key file, made on first
    /// use ([`crate::seal::Key::of_home`]); [`Kernel::open_keyed`] takes
    /// the operator's key instead.
    pub fn open(home: Home, limits: Limits) -> anyhow::Result<Kernel> {
        Kernel::open_keyed(home, limits, None)
    }

    /// [`Kernel::open`] with the key the home's secrets are sealed with:
    /// `key` if the operator gave one, else the home's own key file. What
    /// an older Gatehouse kept unsealed is sealed now (the secrets, the
    /// deployment secrets, webhook signing keys, and the certificate
    /// authority's key file, which moves into the database); a home
    /// sealed with another key is refused in one line naming both keys.
    pub fn open_keyed(home: Home, limits: Limits, key: Option<Key>) -> anyhow::Result<Kernel> {
        home.create()?;
        // A database that vanished is never silently replaced by an empty
        // one: that would forget every claim, rule and decision.
        let database = home.database();
        let marker = home.marker();
        if !database.exists() && marker.exists() {
            bail!(
                "the state database {} is missing, though this home held one (see {}); restore it from a backup, or move the directory aside to start afresh",
                database.display(),
                marker.display()
            );
        }
        let key = match key {
            Some(k) => k,
            None => Key::of_home(home.root())?,
        };
        let store = Store::open(&database, Arc::new(key))?;
        home.mark()?;
        store.seal_at_rest()?;
        adopt_authority_file(&home, &store)?;
        let liveness = Liveness::on_home(&home)?;
        let runtime = Runtime::new(home.cache_dir(), limits)?;
        Kernel::start(home, store, runtime, liveness)
    }

    /// Open the deployment held in the shared PostgreSQL database at `url`:
    /// any host serves any chat from it, and `home` keeps only this host's
    /// compiled-component cache.
    ///
    /// What a home keeps as files is kept as rows: an installed
    /// component's bytes (content-addressed, fetched into the local cache
    /// on first use), the certificate authority's key, the idempotency
    /// secret. The host announces itself with a presence lock (claims name
    /// it, and a claim is failed only once its host's connection is gone;
    /// see `crate::liveness`), and its live views listen for what other
    /// hosts decide ([`Kernel::decided_elsewhere`]). The database must be
    /// at this binary's schema (`gatehouse db migrate`); opening never
    /// migrates it.
    ///
    /// Its secrets are sealed with `key`, which the operator holds and
    /// gives every host; a database sealed with another key, or still
    /// holding unsealed secrets (`gatehouse db migrate` seals them), is
    /// refused.
    pub async fn open_shared(
        home: Home,
        url: &str,
        limits: Limits,
        key: Key,
    ) -> anyhow::Result<Kernel> {
        use crate::store::postgres;
        let url = postgres::DatabaseUrl::parse(url)?;
        home.create()?;
        let shared = postgres::Shared::open(&url, SHARED_CONNECTIONS).await?;
        let store = Store::on_shared(shared, Arc::new(key));
        let unsealed = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || store.has_unsealed())
                .await
                .context("checking the database's secrets panicked")??
        };
        if unsealed {
            bail!(
                "the database {url} holds secrets an older Gatehouse kept unsealed; run `gatehouse db migrate` with this key (GATEHOUSE_KEY_FILE) first, which seals them"
            );
        }
        let liveness = Liveness::on_database(&home, &url).await?;
        let mut runtime = Runtime::new(home.cache_dir(), limits)?;
        let sources = store.clone();
        runtime.fetch_sources_from(Box::new(move |digest| sources.component(digest)));
        Kernel::start(home, store, runtime, liveness)
    }

    /// A kernel on `store`, once this process is announced: the
    /// deployment's secrets read, interrupted claims and firings of gone
    /// processes recovered (P3), their leftover files swept.
    fn start(
        home: Home,
        store: Store,
        runtime: Runtime,
        liveness: Liveness,
    ) -> anyhow::Result<Kernel> {
        let idempotency_secret = store.deployment_secret(crate::idempotency::SECRET)?;
        let kernel = Kernel {
            inner: Arc::new(Inner {
                home,
                store,
                runtime,
                liveness,
                elsewhere: tokio::sync::OnceCell::new(),
                drain_gate: tokio::sync::Mutex::new(()),
                drain_wanted: Default::default(),
                background: std::sync::Mutex::new(tokio::task::JoinSet::new()),
                authority: std::sync::OnceLock::new(),
                idempotency_secret,
                faces: Default::default(),
            }),
        };
        kernel.recover()?;
        kernel
            .inner
            .store
            .recover_firings(&|db, o| kernel.is_present(db, o))?;
        kernel.inner.liveness.sweep();
        Ok(kernel)
    }

    /// Recover the claims of dead processes (SPEC P3): fail them, or, where
    /// the tool's service honours the idempotency key (as SPEC P9 believes
    /// it: key one, the declaration, the operator's word), take them over and
    /// re-send them with the same key through the one send path, as
    /// background work that [`Kernel::settle`] waits for. Without an async
    /// runtime to send on, a resumable claim is left for the next process.
    fn recover(&self) -> anyhow::Result<()> {
        let can_send = tokio::runtime::Handle::try_current().is_ok();
        let resume_as = can_send.then(|| self.owner().to_owned());
        let recovered = self
            .inner
            .store
            .recover(&|db, o| self.is_present(db, o), resume_as.as_deref())?;
        for id in recovered.failed {
            tracing::warn!(id, "action was interrupted while applying; marked failed");
        }
        for claim in recovered.resumed {
            let k = self.clone();
            self.spawn_background(async move {
                let id = claim.action().id;
                if let Err(e) = k.send(claim).await {
                    tracing::warn!(id, error = %format!("{e:#}"), "re-sending an interrupted action failed");
                }
            });
        }
        Ok(())
    }

    /// The other kernel processes alive on this home, by owner token.
    pub(crate) fn others_alive(&self) -> Vec<String> {
        self.inner.liveness.others_alive()
    }

    /// Whether the process or host named `owner` lives, asked in the
    /// caller's transaction `db` (see [`Liveness::is_present`]).
    pub(crate) fn is_present(
        &self,
        db: &dyn crate::store::sql::Sql,
        owner: &str,
    ) -> anyhow::Result<bool> {
        self.inner.liveness.is_present(db, owner)
    }

    /// Whether the process named `owner` lives on this home (its `serve`
    /// address file is current).
    pub(crate) fn is_alive(&self, owner: &str) -> bool {
        self.inner.liveness.is_alive(owner)
    }

    /// The state database. Kernel modules only: surfaces ask the kernel,
    /// which applies the one authorization rule; tests and operator tools
    /// read through [`Kernel::inspect`].
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Run the blocking `f` (store calls, which wait on SQLite's file or
    /// on PostgreSQL's round trips) on a thread that may block, with this
    /// kernel: an async path never holds an executor thread on them.
    pub(crate) async fn blocking<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Kernel) -> anyhow::Result<T> + Send + 'static,
    {
        let kernel = self.clone();
        tokio::task::spawn_blocking(move || f(&kernel))
            .await
            .context("a kernel task panicked")?
    }

    /// The gatekeeper named `name`, if any, read off the executor.
    pub(crate) async fn gatekeeper_named(
        &self,
        name: &str,
    ) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
        let name = name.to_owned();
        self.store().run(move |s| s.gatekeeper(&name)).await
    }

    /// A read-only view of the deployment's state for the operator, tests
    /// and benchmarks: no policy is applied, nothing can be changed. A
    /// surface acting for a person never uses it (it asks the kernel's
    /// person-scoped methods, which apply `crate::access`).
    pub fn inspect(&self) -> crate::inspect::Inspect<'_> {
        crate::inspect::Inspect::new(&self.inner.store)
    }

    /// The state directory this kernel runs on.
    pub fn home(&self) -> &Home {
        &self.inner.home
    }

    /// The runtime (engine, limits, compiled components). Kernel modules
    /// only: every call into a component goes through the kernel's paths.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// This deployment's certificate authority, created on first use.
    pub fn authority(&self) -> anyhow::Result<Arc<crate::grants::Authority>> {
        if let Some(a) = self.inner.authority.get() {
            return Ok(a.clone());
        }
        // One deployment signs with one key, on every host; kept sealed.
        let seed = self
            .inner
            .store
            .deployment_secret(crate::grants::SHARED_KEY_NAME)?;
        let a = Arc::new(crate::grants::Authority::from_seed_hex(&seed)?);
        Ok(self.inner.authority.get_or_init(|| a).clone())
    }

    pub(crate) fn owner(&self) -> &str {
        self.inner.liveness.owner()
    }

    /// Faces' checked pages, kept per component (`crate::face`).
    pub(crate) fn faces_kept(&self) -> &crate::manifest::Pages {
        &self.inner.faces
    }

    pub(crate) fn idempotency_secret(&self) -> &str {
        &self.inner.idempotency_secret
    }

    /// Take `gatekeeper`'s drain flight (SPEC U2, U3) where every process
    /// sharing this state meets it: the home's run directory, or the
    /// shared database.
    pub(crate) async fn flight(&self, gatekeeper: &str) -> anyhow::Result<crate::flight::Flight> {
        match self.inner.store.shared_url() {
            Some(url) => crate::flight::on_database(url, gatekeeper).await,
            None => crate::flight::on_home(&self.inner.home.run_dir(), gatekeeper).await,
        }
    }

    /// Bumped each time a host stages, decides or finishes an action in
    /// the shared database: a live view waits on `changed()` beside its
    /// tick (on a home, or if the database cannot be listened to, it never
    /// changes, and the tick alone wakes it). Listening starts at the first
    /// ask, and is in place when this returns.
    pub(crate) async fn decided_elsewhere(&self) -> tokio::sync::watch::Receiver<u64> {
        let url = self.inner.store.shared_url().cloned();
        self.inner
            .elsewhere
            .get_or_init(|| async move {
                let (tell, heard) = tokio::sync::watch::channel(0u64);
                let Some(url) = url else {
                    return heard;
                };
                let mut listener =
                    match crate::store::postgres::Listener::open(&url, crate::store::DECIDED)
                        .await
                    {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "cannot listen for other hosts' decisions; the live view looks every tick instead");
                            return heard;
                        }
                    };
                tokio::spawn(async move {
                    while listener.next().await.is_some() {
                        tell.send_modify(|n| *n = n.wrapping_add(1));
                        if tell.is_closed() {
                            return; // the kernel is gone
                        }
                    }
                });
                heard
            })
            .await
            .clone()
    }

    pub(crate) fn drain_gate(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.drain_gate
    }

    pub(crate) fn drain_wanted(&self) -> &std::sync::Mutex<DrainScope> {
        &self.inner.drain_wanted
    }

    pub(crate) fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(work);
    }

    /// Wait until the work started beside gadgets (auto-approval drains and
    /// what they resume) has finished. A process calls this before it exits,
    /// so that it never dies holding a claim.
    pub async fn settle(&self) {
        loop {
            let mut set = std::mem::take(
                &mut *self
                    .inner
                    .background
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if set.is_empty() {
                return;
            }
            while set.join_next().await.is_some() {}
        }
    }

    /// Where the deployment's database is, to be shown: the home's file,
    /// or the shared database's URL without its password.
    pub fn state_location(&self) -> String {
        self.store().location()
    }

    /// The schema version of the state database (opening it migrated it
    /// to this binary's newest).
    pub async fn state_schema(&self) -> anyhow::Result<i64> {
        self.store().run(|s| s.schema_version()).await
    }

    /// Returns once the state database's file was removed or replaced: a
    /// long-running process (`serve`) must stop writing into it then.
    pub async fn state_vanished(&self) {
        self.store().vanished().await
    }

    // ----- installing and introducing -----

    /// Ask an instance for its manifest, configured as it is (its settings)
    /// and reaching what it may reach, with its operator credential.
    pub(crate) async fn describe(
        &self,
        g: &GatekeeperRecord,
    ) -> anyhow::Result<classify::Manifest> {
        // The operator's credential, an OAuth grant's refreshed first.
        let credential = match &g.secret {
            Some(s) => Some(self.operator_token(s).await?.map_err(anyhow::Error::msg)?),
            None => None,
        };
        let pre = self.inner.runtime.gatekeeper(&g.digest)?;
        gk::describe(
            &pre,
            &self.inner.runtime.limits,
            &g.name,
            Reach::of(g, credential),
            settings_for(g),
        )
        .await
    }

    /// A secret's name: 1-128 printable characters.
    pub(crate) fn check_secret_name(&self, name: &str) -> anyhow::Result<()> {
        if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
            bail!("secret name {name:?} must be 1-128 printable characters");
        }
        Ok(())
    }

    // ----- the operator's listings (deployment-wide, not chat-scoped) -----

    /// Installed gadgets.
    pub fn gadgets(&self) -> anyhow::Result<Vec<GadgetRecord>> {
        self.inner.store.gadgets()
    }

    /// Gatekeeper instances, with their trust tiers and manifests.
    pub fn gatekeepers(&self) -> anyhow::Result<Vec<Arc<GatekeeperRecord>>> {
        self.inner.store.gatekeepers()
    }

    /// Run one turn with a given turn context (harness state).
    pub(crate) async fn run_turn(&self, turn: Turn, input: &str) -> anyhow::Result<TurnReport> {
        self.run_entry(turn, Entry::Run(input)).await
    }

    /// Run one turn of `entry` (the gadget's `run`, or a call of its
    /// face): the one path every gadget turn takes.
    pub(crate) async fn run_entry(
        &self,
        mut turn: Turn,
        entry: Entry<'_>,
    ) -> anyhow::Result<TurnReport> {
        let unsynced = turn.unsynced.get_or_insert_with(Arc::default).clone();
        let gadget = turn
            .gadget
            .clone()
            .context("a turn without a gadget runs nothing")?;
        let chat = turn.chat.clone();
        let g = self
            .store()
            .read_now(move |conn| {
                let Some((g, chat_exists)) = crate::store::turn_start_in(conn, &gadget, &chat)?
                else {
                    bail!(
                        "no gadget named {gadget:?}; install it with `gatehouse install FILE.wasm`"
                    );
                };
                if !chat_exists {
                    bail!("no chat named {chat:?}; create it with `gatehouse chat new {chat}`");
                }
                Ok(g)
            })
            .await?;
        // A turn pinned to a component (a hook's) runs exactly it: if the
        // name was re-installed since, the new code is not what the caller
        // vouched for, and nothing runs.
        if let Some(pinned) = &turn.pinned
            && *pinned != g.digest
        {
            bail!(
                "gadget {:?} was re-installed (it is now sha256 {}, not the sha256 {pinned} this turn was allowed to run); nothing ran",
                g.name,
                g.digest
            );
        }
        let pre = self.inner.runtime.gadget(&g.digest)?;
        let report = crate::runtime::gadget::turn(
            &pre,
            &self.inner.runtime.limits,
            Box::new(self.view(turn)),
            entry,
        )
        .await;
        // Whatever the gadget was told is durable before anyone hears how
        // its turn went (and a gadget that failed after staging leaves its
        // stages pending, as told).
        self.make_durable(&unsynced).await?;
        if !report.stdout.is_empty() || !report.stderr.is_empty() {
            tracing::info!(
                gadget = %g.name,
                stdout = %crate::prompt::terminal_line(&report.stdout),
                stderr = %crate::prompt::terminal_line(&report.stderr),
                "gadget output"
            );
        }
        Ok(report)
    }

    // ----- external agents (MCP clients, SPEC M2) -----

    /// The tools introduced into the turn's chat that its introductions
    /// grant, as `(key, tool)` in introduction then manifest order, with
    /// the manifest entries as stored (annotations unchanged). A key whose
    /// gatekeeper was removed offers nothing.
    pub async fn introduced_tools(
        &self,
        turn: &Turn,
    ) -> anyhow::Result<Vec<(String, classify::Tool)>> {
        let mut out = Vec::new();
        for key in self.env(turn).await? {
            if let Ok(binding) = self.resolve(turn, &key).await? {
                out.extend(
                    binding
                        .granted_tools()
                        .into_iter()
                        .map(|t| (key.clone(), t)),
                );
            }
        }
        Ok(out)
    }

    // ----- the gadget-facing calls -----

    /// The keys of the turn's chat; none for a person who may not act
    /// there (any more), as for a chat that does not exist (W2).
    pub(crate) async fn env(&self, turn: &Turn) -> anyhow::Result<Vec<String>> {
        let (chat, person) = (turn.chat.clone(), turn.person().to_owned());
        let intros = self
            .store()
            .run(move |s| {
                if !s.access(&chat, &person)?.may_act() {
                    return Ok(Vec::new());
                }
                s.introductions(&chat)
            })
            .await?;
        Ok(intros.into_iter().map(|i| i.key).collect())
    }

    /// Resolve a key of the turn's chat for the turn's person (SPEC C2-C5):
    /// one trip to the store for the introduction, its gatekeeper (with the
    /// trust tier as it is now, K3), the latch, the collaborators, the
    /// credential, and the overlay of a simulating gatekeeper.
    pub(crate) async fn resolve(
        &self,
        turn: &Turn,
        key: &str,
    ) -> anyhow::Result<Result<Binding, CallError>> {
        let resolved = self
            .store()
            .resolve_now(&turn.chat, key, turn.person())
            .await?;
        Ok(resolved
            .map(|(resolved, overlay)| Binding { resolved, overlay })
            .map_err(CallError::from))
    }

    /// Make a turn's stages durable if any are not yet (see
    /// [`Turn::unsynced`]): one group commit's fsync covers them all.
    async fn make_durable(&self, unsynced: &std::sync::atomic::AtomicBool) -> anyhow::Result<()> {
        if unsynced.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.store()
                .sync()
                .await
                .context("the turn's staged actions could not be made durable")?;
        }
        Ok(())
    }

    /// A call: classify, then read now or stage. This is what the gadget's
    /// `service.call` import does, and what every other caller without a
    /// gadget (an external agent) does; it is public so that embedders and
    /// benchmarks drive the exact same path.
    ///
    /// In a workflow step every call is checked against the step's
    /// certificate (SPEC G5): a plain call is refused, whoever makes it.
    pub async fn call(
        &self,
        turn: &Turn,
        key: &str,
        tool: &str,
        args: String,
    ) -> anyhow::Result<Result<CallOutcome, CallError>> {
        if turn.step.is_some() {
            return Ok(Err(CallError::Refused(
                "this is a workflow step: call through its certificate (workflow.step-certificate, then certificate.call)".into(),
            )));
        }
        self.dispatch(turn, key, tool, args).await
    }

    /// The call path proper, for plain calls and for a step's calls that
    /// its certificate found uncovered (normal rules apply).
    pub(crate) async fn dispatch(
        &self,
        turn: &Turn,
        key: &str,
        tool: &str,
        args: String,
    ) -> anyhow::Result<Result<CallOutcome, CallError>> {
        if turn.harness == Harness::Honest
            && let Some(id) = turn.awaited().first()
        {
            return Ok(Err(CallError::Refused(format!(
                "this turn ended: action #{id} awaits a decision; the kernel resumes you when it is applied"
            ))));
        }
        // A stage first tries the binding this process kept for the call,
        // without reading the policy epoch first: its staging transaction
        // reads it, and stages nothing if it moved. Anything else (a read,
        // a simulation, a refusal) comes back here undone, and is made on
        // a binding read now (see `Store::resolution_kept`).
        if let Some((resolved, at)) = self.store().resolution_kept(&turn.chat, key, turn.person()) {
            let binding = Binding {
                resolved,
                overlay: Vec::new(),
            };
            if let Ok(class) = classify_call(&binding, key, tool)
                && class.kind == Kind::Action
                && let Some(outcome) = self
                    .stage(turn, &binding, tool, &args, class, Some(at))
                    .await?
            {
                return Ok(self.staged(turn, outcome));
            }
        }
        let binding = match self.resolve(turn, key).await? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let class = match classify_call(&binding, key, tool) {
            Ok(class) => class,
            Err(e) => return Ok(Err(e)),
        };
        match class.kind {
            Kind::Read => self.read(turn, &binding, tool, args, None).await,
            Kind::Action => {
                let outcome = self
                    .stage(turn, &binding, tool, &args, class, None)
                    .await?
                    .unwrap_or_else(|| {
                        Err(CallError::Refused(StageError::PolicyMoved.to_string()))
                    });
                Ok(self.staged(turn, outcome))
            }
        }
    }

    /// What the turn's harness tells the gadget of a stage's `outcome`
    /// (auto-approval was started beside it by [`Kernel::stage`]).
    fn staged(
        &self,
        turn: &Turn,
        outcome: Result<CallOutcome, CallError>,
    ) -> Result<CallOutcome, CallError> {
        if let Ok(CallOutcome::Pending(p)) = &outcome {
            turn.staged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(p.action_id as i64);
            match turn.harness {
                Harness::Naive => return Ok(CallOutcome::Done("{}".into())),
                Harness::Honest if p.await_decision => turn
                    .awaited
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(p.action_id as i64),
                _ => {}
            }
        }
        outcome
    }

    /// The egress checks every outbound call of a turn passes before it is
    /// made, in this order (SPEC O3, C5, S3): the chat's latch (when the
    /// call reaches beyond a closed service), the credential of the person
    /// it acts for, and forward exclusion in a shared chat. `None` admits.
    async fn admit_egress(
        &self,
        turn: &Turn,
        binding: &Binding,
        tool: &str,
        invocation: &gkwit::Invocation,
        what: &str,
    ) -> anyhow::Result<Option<CallError>> {
        // Nothing leaves a turn before what it was told is durable.
        if let Some(unsynced) = &turn.unsynced {
            self.make_durable(unsynced).await?;
        }
        let g = binding.gatekeeper();
        let outbound = g
            .manifest
            .tool(tool)
            .is_none_or(|t| classify::classify(&t.annotations, g.trust).outbound);
        if outbound && binding.resolved.latched {
            return Ok(Some(CallError::Refused(format!(
                "chat {:?} is locked down (it read owner-only data): outbound {what} such as {}:{tool} are refused",
                turn.chat, g.name
            ))));
        }
        if let Credential::Refused(reason) = &binding.resolved.credential {
            return Ok(Some(CallError::Refused(format!(
                "{}:{tool} refused before it was made: {reason}",
                g.name
            ))));
        }
        // A shared chat admits only what every collaborator may see (S3).
        if !binding.resolved.collaborators.is_empty()
            && let Some(refusal) = self
                .exclude_forward(turn, g, invocation, &binding.resolved.collaborators)
                .await?
        {
            return Ok(Some(CallError::Refused(refusal)));
        }
        Ok(None)
    }

    /// A read (SPEC O1, O3, S3): refused when the chat is locked down and
    /// the read is outbound, when the person has no credential of their own
    /// for it, or when a collaborator could not see it; else made, and
    /// recorded before its data is handed over. `audit`: a workflow step's
    /// audit row, committed with the observation (G7).
    pub(crate) async fn read(
        &self,
        turn: &Turn,
        binding: &Binding,
        tool: &str,
        args: String,
        audit: Option<crate::store::workflows::AuditRow>,
    ) -> anyhow::Result<Result<CallOutcome, CallError>> {
        let args = match crate::store::validate_args(&args) {
            Ok(a) => a,
            Err(e) => return Ok(Err(CallError::InvalidArgs(e.to_string()))),
        };
        let g = binding.gatekeeper();
        let invocation = invocation_for(binding, tool, args.into());
        if let Some(refusal) = self
            .admit_egress(turn, binding, tool, &invocation, "reads")
            .await?
        {
            return Ok(Err(refusal));
        }
        let pre = self.runtime().gatekeeper(&g.digest)?;
        // A read keeps its connections for the next (an action's send
        // never does: `Connections`).
        let reach = match self.reach_for(binding).await? {
            Ok(r) => r,
            Err(refusal) => return Ok(Err(CallError::Refused(refusal))),
        }
        .keeping(&self.runtime().connections, &g.name)?;
        // So does its MCP session, per chat, introduction and credential
        // (`runtime::sessions`): handed to this fresh instance, held again
        // only if the read succeeds.
        let held = crate::runtime::sessions::SessionKey::of(
            &g.name,
            &g.digest,
            &turn.chat,
            &binding.resolved.key,
            &binding.resolved.credential.id(),
            reach.credential.as_deref(),
        );
        let mut invocation = invocation;
        if let Some(s) = self.runtime().sessions.take(&held) {
            invocation
                .settings
                .push((crate::runtime::sessions::SETTING.to_owned(), s.setting()));
        }
        let called = gk::call(&pre, &self.runtime().limits, &g.name, reach, invocation).await;
        if let (Ok(Ok(_)), Some(s)) = (&called.outcome, &called.witness.session) {
            self.runtime().sessions.keep(held, s.clone());
        }
        let output = match called.outcome {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => {
                let insecure: Vec<_> = called
                    .witness
                    .sent
                    .iter()
                    .filter_map(|s| match s {
                        gk::Sent::Insecure(h) => Some(h.as_str()),
                        _ => None,
                    })
                    .collect();
                if !insecure.is_empty() {
                    return Ok(Err(CallError::Service(format!(
                        "the kernel refused {}'s request to {} before it was sent: it would have carried the credential over plain http, which is allowed only to loopback; use https",
                        g.name,
                        insecure.join(", ")
                    ))));
                }
                let denied: Vec<_> = called
                    .witness
                    .sent
                    .iter()
                    .filter_map(|s| match s {
                        gk::Sent::Denied(h) => Some(h.as_str()),
                        _ => None,
                    })
                    .collect();
                if !denied.is_empty() {
                    return Ok(Err(CallError::Service(format!(
                        "the kernel refused {}'s request to {} before it was sent: it may reach only {}",
                        g.name,
                        denied.join(", "),
                        if g.hosts.is_empty() {
                            "no host".to_owned()
                        } else {
                            g.hosts.join(", ")
                        }
                    ))));
                }
                return Ok(Err(CallError::Service(format!(
                    "{} ({}): {}",
                    g.name,
                    tool,
                    gk::describe_tool_error(&e)
                ))));
            }
            Err(gk::Fault::Crashed(m)) => return Ok(Err(CallError::Service(m))),
        };
        // Record first; hand over only if the record was made (O1).
        let account = binding.resolved.credential.account();
        match crate::observations::record_read(self.store(), turn, g, tool, account, audit, &output)
            .await
        {
            Ok(Observed::Recorded(_)) => Ok(Ok(CallOutcome::Done(output.result))),
            Ok(Observed::RestrictedInSharedChat) => Ok(Err(CallError::Refused(format!(
                "chat {:?} is shared, and this read touched owner-only data, which is never handed over in a shared chat; the data was withheld and nothing was recorded",
                turn.chat
            )))),
            Err(e) => Ok(Err(CallError::Refused(format!(
                "the read could not be recorded, so its data is withheld: {e:#}"
            )))),
        }
    }

    /// Stage an action (SPEC A1-A5): checked as every egress is, simulated
    /// only once the checks passed (V1), recorded with the facts the claim
    /// revalidates (P7).
    ///
    /// `kept_at`: `binding` is the one this process kept, read under that
    /// policy epoch and not checked since (`Store::resolution_kept`). Then
    /// only a stage goes ahead, carrying the epoch for its transaction to
    /// check; a refusal, a simulation (a read of the service), or the
    /// epoch found moved returns `None` having done nothing, for the
    /// caller to stage again on a binding read now. With `None` for
    /// `kept_at`, the answer is always `Some`.
    async fn stage(
        &self,
        turn: &Turn,
        binding: &Binding,
        tool: &str,
        args: &str,
        class: classify::Classification,
        kept_at: Option<i64>,
    ) -> anyhow::Result<Option<Result<CallOutcome, CallError>>> {
        let g = binding.gatekeeper();
        if kept_at.is_some() && g.manifest.simulates {
            return Ok(None);
        }
        // Every refusal is given on a binding read now.
        let refuse = |e: CallError| Ok(kept_at.is_none().then_some(Err(e)));
        let args = match crate::store::validate_args(args) {
            Ok(a) => a,
            Err(e) => return refuse(CallError::InvalidArgs(e.to_string())),
        };
        if binding.resolved.latched {
            // Nothing is submitted from a locked-down chat (O3), and a
            // simulation would be an outbound request: refuse before it.
            return refuse(CallError::Refused(
                StageError::LockedDown(turn.chat.clone()).to_string(),
            ));
        }
        if let Some(entry) = g.manifest.tool(tool)
            && let Err(why) = check_schema(&entry.input_schema, args.as_str())
        {
            return refuse(CallError::InvalidArgs(format!(
                "{}:{tool} was not staged: {why}",
                g.name
            )));
        }
        let Some(facts) = Facts::of(&binding.resolved, tool) else {
            return refuse(CallError::NotGranted {
                key: binding.resolved.key.clone(),
                tool: tool.to_owned(),
                allowed: binding.resolved.granted_names(),
            });
        };
        if let Credential::Refused(reason) = &binding.resolved.credential {
            return refuse(CallError::Refused(format!(
                "{}:{tool} was not staged: {reason}",
                g.name
            )));
        }
        // A gatekeeper that can simulate tells the gadget what will happen;
        // one that cannot makes the gadget wait (SPEC V1, V2). A simulation
        // reads the service, so it passes every egress check first. The
        // latch and the credential were checked above, so a refusal here is
        // forward exclusion (S3): no simulation, and the action is staged to
        // await the decision, like any action of a gatekeeper that cannot
        // simulate.
        let provisional = if g.manifest.simulates {
            let invocation = invocation_for(binding, tool, args.as_str().to_owned());
            match self
                .admit_egress(turn, binding, tool, &invocation, "simulations")
                .await?
            {
                Some(_) => None,
                None => self.simulate(turn, binding, tool, invocation).await?,
            }
        } else {
            None
        };
        let action = NewAction {
            chat: turn.chat.clone(),
            principal: turn.principal.clone(),
            gadget: turn.gadget.clone(),
            key: binding.resolved.key.clone(),
            gatekeeper: g.name.clone(),
            tool: tool.to_owned(),
            classified_by: class.classified_by.as_str(),
            trust: g.trust,
            args,
            await_decision: provisional.is_none(),
            provisional: provisional.clone(),
            facts,
            resolved_at: kept_at,
        };
        let staged = match &turn.unsynced {
            Some(unsynced) => {
                let staged = self.store().stage_now(action).await?;
                if staged.is_ok() {
                    unsynced.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                staged
            }
            None => self.store().stage(action).await,
        };
        // The store's refusals other than the epoch were made in the
        // transaction that found the epoch unmoved: under the policy now.
        let id = match staged {
            Ok(StagedAction { id, rules }) => {
                // Auto-approval runs beside the gadget, never in its way (A1).
                if class.auto_approvable {
                    self.drain_if_covered(&turn.chat, &g.name, tool, rules);
                }
                id
            }
            Err(StageError::Store(e)) => return Err(e),
            Err(StageError::PolicyMoved) if kept_at.is_some() => return Ok(None),
            Err(
                e @ (StageError::NotAnObject(_)
                | StageError::NotJson(_)
                | StageError::TooLarge(_)
                | StageError::Ambiguous(_)),
            ) => {
                return Ok(Some(Err(CallError::InvalidArgs(e.to_string()))));
            }
            Err(e) => return Ok(Some(Err(CallError::Refused(e.to_string())))),
        };
        let message = format!(
            "staged as action #{id} ({}:{tool}); nothing has been sent. It waits for a person: `gatehouse approve {id}` or `gatehouse reject {id}`{}",
            g.name,
            if provisional.is_none() {
                ". Do not build on its effect until it is decided"
            } else {
                ""
            }
        );
        Ok(Some(Ok(CallOutcome::Pending(PendingAction {
            action_id: id as u64,
            message,
            await_decision: provisional.is_none(),
            provisional,
        }))))
    }

    /// Ask a simulating gatekeeper for a provisional result (SPEC V1). The
    /// caller has passed every egress check. A simulation reads the service,
    /// so what it hands over is recorded first, as a `simulation`
    /// observation (not under the server's read-only word); no answer means
    /// "await a decision".
    async fn simulate(
        &self,
        turn: &Turn,
        binding: &Binding,
        tool: &str,
        invocation: gkwit::Invocation,
    ) -> anyhow::Result<Option<String>> {
        let g = binding.gatekeeper();
        let pre = self.runtime().gatekeeper(&g.digest)?;
        let Ok(reach) = self.reach_for(binding).await? else {
            return Ok(None);
        };
        let called = gk::simulate(&pre, &self.runtime().limits, &g.name, reach, invocation).await;
        let Ok(Some(result)) = called.outcome else {
            return Ok(None);
        };
        let output = gkwit::Output {
            result,
            sources: Vec::new(),
        };
        let account = binding.resolved.credential.account();
        match crate::observations::record_simulation(self.store(), turn, g, tool, account, &output)
            .await
        {
            Ok(Observed::Recorded(_)) => Ok(Some(output.result)),
            Ok(Observed::RestrictedInSharedChat) | Err(_) => Ok(None),
        }
    }

    /// The status of an action of the turn's chat (SPEC A4).
    pub(crate) async fn action_result(
        &self,
        turn: &Turn,
        id: u64,
    ) -> anyhow::Result<Result<ActionStatus, CallError>> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(Err(CallError::Refused(format!(
                "no action #{id} in this chat"
            ))));
        };
        // Standing is asked at every call (a collaborator removed mid-turn
        // learns nothing more of the chat), and told like a missing action.
        let (chat, person) = (turn.chat.clone(), turn.person().to_owned());
        let action = self
            .store()
            .run(move |s| {
                if !s.access(&chat, &person)?.may_act() {
                    return Ok(None);
                }
                s.action(id)
            })
            .await?;
        let Some(a) = action.filter(|a| a.chat == turn.chat) else {
            return Ok(Err(CallError::Refused(format!(
                "no action #{id} in this chat (it may have been pruned)"
            ))));
        };
        use crate::store::ActionState as S;
        Ok(Ok(match a.state {
            S::Pending | S::Applying => ActionStatus::Pending,
            S::Rejected => {
                ActionStatus::Rejected("the action was not approved; it was never sent".into())
            }
            S::Expired => ActionStatus::Expired(
                "the action expired before anyone decided it; it was never sent".into(),
            ),
            S::Failed => ActionStatus::Failed {
                message: a.error.unwrap_or_default(),
                retryable: a.retryable == Some(true),
            },
            S::Applied => {
                let result = a.result.clone().unwrap_or_else(|| "null".into());
                match crate::observations::record_handover(self.store(), turn, &a, &result).await {
                    Ok(()) => ActionStatus::Applied(result),
                    Err(e) => {
                        return Ok(Err(CallError::Refused(format!(
                            "the result could not be recorded, so it is withheld: {e:#}"
                        ))));
                    }
                }
            }
        }))
    }
}

/// One turn of a gadget, as its sandbox sees the kernel: the kernel and
/// the turn it serves, behind the runtime's [`KernelView`]. Every method is
/// the kernel's own call path with the turn filled in, so a gadget reaches
/// nothing the kernel's rules do not pass.
pub struct TurnView {
    kernel: Kernel,
    turn: Turn,
    /// The keys that resolved for an `open` in this turn. `open` hands out
    /// a handle and grants nothing: every `call` and `tools` through it
    /// resolves again, at the time of use (SPEC C2, C3). So a key opened
    /// again in the same turn is answered from here instead of another
    /// trip to the store (a gadget that opens before each call, as the
    /// script gadget does, made two resolutions per read); a call refused
    /// through the handle forgets the key, so the next `open` asks again.
    opened: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Kernel {
    /// The view a gadget's sandbox gets of this kernel for `turn`.
    /// Public so that benchmarks instantiate sandboxes exactly as turns do.
    pub fn view(&self, turn: Turn) -> TurnView {
        TurnView {
            kernel: self.clone(),
            turn,
            opened: Default::default(),
        }
    }
}

impl TurnView {
    fn opened(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.opened.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl KernelView for TurnView {
    fn gadget(&self) -> Option<&str> {
        self.turn.gadget.as_deref()
    }

    fn env(&self) -> Answer<'_, Vec<String>> {
        Box::pin(self.kernel.env(&self.turn))
    }

    fn open<'a>(&'a self, key: &'a str) -> Answer<'a, Result<(), CallError>> {
        Box::pin(async move {
            if self.opened().contains(key) {
                return Ok(Ok(()));
            }
            let resolved = self.kernel.resolve(&self.turn, key).await?.map(drop);
            if resolved.is_ok() {
                self.opened().insert(key.to_owned());
            }
            Ok(resolved)
        })
    }

    fn tools<'a>(&'a self, key: &'a str) -> Answer<'a, Vec<classify::Tool>> {
        Box::pin(async move {
            Ok(match self.kernel.resolve(&self.turn, key).await? {
                Ok(b) => b.granted_tools(),
                Err(_) => Vec::new(),
            })
        })
    }

    fn action_result(&self, id: u64) -> Answer<'_, Result<ActionStatus, CallError>> {
        Box::pin(self.kernel.action_result(&self.turn, id))
    }

    fn call<'a>(
        &'a self,
        key: &'a str,
        tool: &'a str,
        args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>> {
        Box::pin(async move {
            let answer = self.kernel.call(&self.turn, key, tool, args).await;
            if !matches!(answer, Ok(Ok(_))) {
                self.opened().remove(key);
            }
            answer
        })
    }

    fn store_get<'a>(&'a self, key: &'a str) -> Answer<'a, Result<Option<String>, CallError>> {
        Box::pin(self.kernel.store_get(&self.turn, key))
    }

    fn store_put<'a>(&'a self, key: &'a str, value: String) -> Answer<'a, Result<(), CallError>> {
        Box::pin(self.kernel.store_put(&self.turn, key, value))
    }

    fn store_delete<'a>(&'a self, key: &'a str) -> Answer<'a, Result<(), CallError>> {
        Box::pin(self.kernel.store_delete(&self.turn, key))
    }

    fn store_keys(&self) -> Answer<'_, Result<Vec<String>, CallError>> {
        Box::pin(self.kernel.store_keys(&self.turn))
    }

    fn take_certificate(&self) -> Option<(String, crate::grants::Claims)> {
        self.turn.take_certificate()
    }

    fn request_approval<'a>(
        &'a self,
        allowed_calls: &'a str,
        reason: &'a str,
    ) -> Answer<'a, Result<u64, String>> {
        Box::pin(
            self.kernel
                .request_approval(&self.turn, allowed_calls, reason),
        )
    }

    fn certified_call<'a>(
        &'a self,
        token: &'a str,
        key: &'a str,
        tool: &'a str,
        args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>> {
        Box::pin(
            self.kernel
                .certified_call(&self.turn, token, key, tool, args),
        )
    }
}

/// The invocation a gatekeeper call is given for `binding`: the settings,
/// the account it runs under, and the overlay of pending actions.
pub(crate) fn invocation_for(binding: &Binding, tool: &str, args: String) -> gkwit::Invocation {
    gkwit::Invocation {
        tool: tool.to_owned(),
        args,
        settings: settings_for(binding.gatekeeper()),
        account: binding.resolved.credential.account(),
        pending: binding
            .overlay
            .iter()
            .map(|a| gkwit::Staged {
                action_id: a.id as u64,
                tool: a.tool.clone(),
                args: a.args.clone(),
            })
            .collect(),
        // Reads and simulations change nothing: no key.
        idempotency_key: None,
    }
}

/// Whether `args` (a JSON object, already checked) satisfy the tool's
/// declared input schema (SPEC A5): a malformed write is refused before it
/// is staged, with one line naming the field, instead of waiting for a
/// person and then failing. A schema that is not a usable JSON Schema
/// refuses the write too (fail closed); no schema is ever fetched from the
/// network or a file (the validator is built without resolvers).
pub(crate) fn check_schema(schema: &str, args: &str) -> Result<(), String> {
    let validator = validator_for(schema)?;
    let args: serde_json::Value =
        serde_json::from_str(args).map_err(|e| format!("the arguments are not JSON: {e}"))?;
    // Asked first without the errors: gathering them (their paths and
    // locations) is most of a validation's cost, and only a refusal
    // needs one.
    if validator.is_valid(&args) {
        return Ok(());
    }
    match validator.iter_errors(&args).next() {
        // Found invalid, yet no error to name: refuse all the same.
        None => Err("the arguments do not match the tool's input schema".into()),
        Some(e) => {
            let path = e.instance_path().to_string();
            let field = if path.is_empty() {
                "the arguments do".to_owned()
            } else {
                format!("argument {path} does")
            };
            Err(format!(
                "{field} not match the tool's input schema: {}",
                crate::prompt::excerpt(&e.to_string(), 300)
            ))
        }
    }
}

/// How `tool` through `binding` is classified (SPEC K1-K4), if the
/// introduction grants it and the gatekeeper offers it. The tier is the
/// one read with the binding, at the moment of use (K3).
fn classify_call(
    binding: &Binding,
    key: &str,
    tool: &str,
) -> Result<classify::Classification, CallError> {
    let offered = binding.gatekeeper().manifest.tool(tool);
    match offered.filter(|_| binding.resolved.grants(tool)) {
        Some(info) => Ok(classify::classify(
            &info.annotations,
            binding.gatekeeper().trust,
        )),
        None => Err(CallError::NotGranted {
            key: key.to_owned(),
            tool: tool.to_owned(),
            allowed: binding.resolved.granted_names(),
        }),
    }
}

/// How many compiled schemas [`compiled`] keeps. A schema is
/// compiled once and reused by every stage of its tool (compiling it on
/// every stage was a large part of a stage's cost); past this many
/// distinct schemas the cache starts again, so a gatekeeper with a huge
/// manifest costs memory only for the tools actually called.
const CACHED_VALIDATORS: usize = 1024;

/// Whether a read's structured result conforms to the output schema its
/// tool declares (MCP `outputSchema`), checked before `mcp serve` hands it
/// to a client that was promised that shape. `Err` is one line saying
/// where it does not; a schema that is not a usable JSON Schema fails too
/// (fail closed, as for input schemas, and built without resolvers).
pub(crate) fn check_output(schema: &str, result: &serde_json::Value) -> Result<(), String> {
    let validator = compiled(schema).map_err(|why| {
        format!(
            "the tool's output schema is {why}; ask the operator to fix or refresh the gatekeeper"
        )
    })?;
    if validator.is_valid(result) {
        return Ok(());
    }
    // Only where, never the value: the answer is withheld, so the line
    // must not carry it (the validator's own message quotes it).
    match validator.iter_errors(result).next() {
        None => Err("the result does not match the tool's output schema".into()),
        Some(e) => {
            let path = e.instance_path().to_string();
            let field = if path.is_empty() {
                "the result does".to_owned()
            } else {
                format!("result field {path} does")
            };
            Err(crate::prompt::excerpt(
                &format!(
                    "{field} not match the tool's output schema (at {})",
                    e.schema_path()
                ),
                300,
            ))
        }
    }
}

/// The compiled validator of an input schema (its text, as the manifest
/// stores it), or the one-line reason it is unusable.
fn validator_for(schema: &str) -> Result<Arc<jsonschema::Validator>, String> {
    compiled(schema).map_err(|why| {
        format!(
            "the tool's input schema is {why}; ask the operator to fix or refresh the gatekeeper"
        )
    })
}

/// The compiled validator of `schema` (its text, as the manifest stores
/// it), or what is wrong with it (`not JSON (...)`). Both outcomes are
/// cached: compiling is a pure function of the text, so a refreshed
/// manifest with a changed schema is simply another key.
fn compiled(schema: &str) -> Result<Arc<jsonschema::Validator>, String> {
    type Compiled = Result<Arc<jsonschema::Validator>, String>;
    static CACHE: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, Compiled>>,
    > = std::sync::LazyLock::new(Default::default);
    let cache = || CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = cache().get(schema) {
        return hit.clone();
    }
    let compiled: Compiled = match serde_json::from_str::<serde_json::Value>(schema) {
        Err(e) => Err(format!("not JSON ({e})")),
        Ok(value) => jsonschema::validator_for(&value)
            .map(Arc::new)
            .map_err(|e| {
                format!(
                    "not a usable JSON Schema ({})",
                    crate::prompt::excerpt(&e.to_string(), 200)
                )
            }),
    };
    let mut cache = cache();
    if cache.len() >= CACHED_VALIDATORS {
        cache.clear();
    }
    cache.insert(schema.to_owned(), compiled.clone());
    compiled
}

/// Which key a deployment's secrets are sealed with (`gatehouse key show`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyShown {
    /// The key's id (a fingerprint; never the key).
    pub id: String,
    /// Where this process got it, in words.
    pub origin: String,
}

/// What `gatehouse key rotate` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rotated {
    /// Secrets sealed again.
    pub sealed: usize,
    /// The old key's id.
    pub was: String,
    /// The new key's id.
    pub now: String,
    /// The home's own key file, removed because it held the old key.
    pub removed: Option<String>,
}

impl Kernel {
    /// Where a call through `binding` may reach, and with which
    /// credential, opened by [`Kernel::bearer`] (the one place a resolved
    /// credential is opened before it is injected; an OAuth account's
    /// token is refreshed there first). `Ok(Err(line))` refuses the call.
    pub(crate) async fn reach_for(
        &self,
        binding: &Binding,
    ) -> anyhow::Result<Result<Reach, String>> {
        let g = binding.gatekeeper();
        Ok(self
            .bearer(&g.name, &binding.resolved.credential)
            .await?
            .map(|c| Reach::of(g, c)))
    }
}

/// Move an older home's plaintext certificate authority key file into the
/// state database, sealed, then remove the file. A database that already
/// keeps another authority key is refused: which one signs is not guessed.
fn adopt_authority_file(home: &Home, store: &Store) -> anyhow::Result<()> {
    let Some(hex) = crate::grants::legacy_key_hex(home)? else {
        return Ok(());
    };
    let kept = store.keep_deployment_secret(crate::grants::SHARED_KEY_NAME, &hex)?;
    if kept != hex {
        bail!(
            "the home keeps a certificate authority key file {} besides the sealed key in its database, and they differ; move the file aside (the database's key is the one in use)",
            crate::grants::key_path(home).display()
        );
    }
    crate::grants::forget_legacy_key(home)
}

/// The settings a gatekeeper sees: the operator's, plus `allowed-hosts`.
pub(crate) fn settings_for(g: &GatekeeperRecord) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = g
        .settings
        .iter()
        // Both are the kernel's to give, never an operator's.
        .filter(|(k, _)| k != "allowed-hosts" && k != crate::runtime::sessions::SETTING)
        .cloned()
        .collect();
    s.push(("allowed-hosts".into(), g.hosts.join(",")));
    s
}

/// Every name a person gives (gadgets, gatekeepers, chats, people, accounts)
/// is printed on terminals and used in paths and commands: 1-64 ASCII
/// letters, digits, '.', '_' or '-', not starting with '.' or '-' (so never
/// `.`, `..` or something that reads as a flag, like `-rf`).
pub(crate) fn check_name(name: &str, what: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        bail!(
            "{what} name {:?} must be 1-64 letters, digits, '.', '_' or '-'",
            crate::prompt::terminal_line(&name.chars().take(80).collect::<String>())
        );
    }
    if name.starts_with(['.', '-']) {
        bail!(
            "{what} name {name:?} must start with a letter, digit or '_' (not '.' or '-', so it is never `.`, `..` or a flag)"
        );
    }
    Ok(())
}

// Kept reachable here for the surfaces that mint tokens through the kernel.
pub(crate) use crate::entropy::random_hex;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::Principal;
    use crate::store::{Introduction, Trust};

    /// `open` of a key this turn already opened is answered from the turn;
    /// a call through it still resolves at the time of use, and a refused
    /// call makes the next `open` ask the store again.
    #[test]
    fn a_turn_reopens_a_key_from_memory_but_every_call_resolves_again() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let kernel = Kernel::open(Home::at(dir.path()), Limits::default()).unwrap();
            let store = kernel.store();
            store
                .put_gatekeeper(&GatekeeperRecord {
                    name: "g".into(),
                    digest: "0".repeat(64),
                    trust: Trust::Byo,
                    hosts: vec![],
                    secret: None,
                    credential_host: None,
                    settings: vec![],
                    manifest: Arc::default(),
                    added_at: 0,
                })
                .unwrap();
            store.add_user("ann").unwrap();
            store.create_chat("c", "ann").unwrap();
            let intro = Introduction {
                chat: "c".into(),
                key: "K".into(),
                gatekeeper: "g".into(),
                tools: None,
            };
            store.introduce(&intro, "ann").unwrap();
            // The introduction withdrawn behind the kernel's back, as
            // another process would.
            let withdraw = || {
                store
                    .with(|db| db.exec("DELETE FROM introductions WHERE chat = 'c'", &[]))
                    .unwrap()
            };
            let view = kernel.view(Turn::new("gadget", "c", Principal::person("ann")));
            assert!(view.open("K").await.unwrap().is_ok());
            assert!(view.open("NOPE").await.unwrap().is_err());

            withdraw();
            assert!(
                view.open("K").await.unwrap().is_ok(),
                "opened before in this turn"
            );
            let refused = view.call("K", "send", "{}".into()).await.unwrap();
            assert!(
                matches!(&refused, Err(CallError::UnknownKey { key, .. }) if key == "K"),
                "{refused:?}"
            );
            assert!(
                view.open("K").await.unwrap().is_err(),
                "asked again after the refusal"
            );
            // Another turn never inherits what this one opened.
            store.introduce(&intro, "ann").unwrap();
            assert!(view.open("K").await.unwrap().is_ok());
            withdraw();
            let next = kernel.view(Turn::new("gadget", "c", Principal::person("ann")));
            assert!(next.open("K").await.unwrap().is_err());
        });
    }

    #[test]
    fn arguments_are_checked_against_the_input_schema() {
        let schema =
            r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#;
        assert!(check_schema(schema, r#"{"id": 3}"#).is_ok());
        let e = check_schema(schema, r#"{"id": "x"}"#).unwrap_err();
        assert!(e.starts_with("argument /id does not match"), "{e}");
        let e = check_schema(schema, "{}").unwrap_err();
        assert!(e.starts_with("the arguments do not match"), "{e}");
        // No schema fetched from anywhere: an external reference is refused.
        let remote = r#"{"$ref": "http://127.0.0.1:1/schema.json"}"#;
        assert!(check_schema(remote, "{}").is_err());
        assert!(check_schema("not json", "{}").is_err());
    }
}
