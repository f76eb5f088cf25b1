//! The runtime: wasmtime engine, sandbox limits, compiled-component cache.
//!
//! Owns how components are compiled, cached, validated and instantiated, and
//! the limits every store runs under (SPEC X1-X3). It may not decide policy:
//! what a gadget's kernel calls *do* is the kernel's business, reached only
//! through the narrow [`view::KernelView`] the kernel implements; this
//! module only wires them in and never imports the kernel.

pub mod gadget;
pub mod gatekeeper;
pub mod nesting;
pub mod sessions;
pub mod view;

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How much of a pooled memory or table slot stays mapped when its instance
/// is dropped, on Linux 6.7 or later (`PAGEMAP_SCAN`). Why: every call gets
/// a fresh instance, and by default wasmtime hands a dropped slot's pages
/// back to the kernel (`madvise`), so the next instance faults each page it
/// touches in again, and each drop's `madvise` makes every CPU flush its TLB. A
/// third of a bare host's gadget turn went there, as profiled.
/// With the scan, wasmtime finds the pages the instance dirtied and resets
/// only those to the component's initial image, up to this many bytes, and
/// returns the rest as before. The reset is wasmtime's own: a new instance
/// still sees only its initial memory (`x_sandbox::sandbox::a_fresh_instance_remembers_nothing`).
/// One MiB covers a Rust guest's stack top and heap; a slot keeps at most
/// this much resident, and only the slots in use.
const KEEP_RESIDENT: usize = 1 << 20;

/// The epoch advances this often; deadlines are counted in ticks of it.
const TICK: Duration = Duration::from_millis(10);

/// How often a long compile reports that it is still going.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Sandbox limits for one store (one gadget turn or one gatekeeper call).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-clock budget of one gadget turn (X1).
    pub gadget_deadline: Duration,
    /// Wall-clock budget of one gatekeeper call, guest code and host I/O
    /// together (X1; epochs alone do not interrupt host code).
    pub gatekeeper_deadline: Duration,
    /// Linear memory per store (X2).
    pub memory_bytes: usize,
    /// Tables per store, and as many memories: a component that nests core
    /// instances needs a few of each (X2).
    pub tables: usize,
    /// Elements per table (X2).
    pub table_elements: usize,
    /// Instances per store (X2); in the pool, core instances per component.
    pub instances: usize,
    /// Captured stdout/stderr per turn.
    pub output_bytes: usize,
    /// Calls one gadget turn may make into the kernel (reads, actions,
    /// polls); past it each call is refused, so a turn cannot hammer a
    /// service for its whole deadline.
    pub turn_calls: u32,
    /// Use the pooling allocator (the default) or allocate on demand.
    pub pooling: bool,
    /// The certificate authorities gatekeepers' HTTPS trusts.
    pub roots: gatekeeper::Roots,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            gadget_deadline: Duration::from_secs(30),
            gatekeeper_deadline: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            tables: 20,
            table_elements: 100_000,
            instances: 50,
            output_bytes: 64 << 10,
            turn_calls: 1000,
            pooling: true,
            roots: gatekeeper::Roots::default(),
        }
    }
}

impl Limits {
    /// Defaults, overridden by `GATEHOUSE_GADGET_DEADLINE_MS`,
    /// `GATEHOUSE_GATEKEEPER_DEADLINE_MS`, `GATEHOUSE_MEMORY_MIB`,
    /// `GATEHOUSE_TURN_CALLS` and `GATEHOUSE_TRUST_ROOTS` (a PEM file of
    /// certificate authorities gatekeepers trust besides the web's).
    pub fn from_env() -> anyhow::Result<Limits> {
        let mut l = Limits::default();
        let var = |name: &str| -> anyhow::Result<Option<u64>> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .with_context(|| format!("{name}={v:?} is not a whole number")),
                Err(_) => Ok(None),
            }
        };
        if let Some(ms) = var("GATEHOUSE_GADGET_DEADLINE_MS")? {
            l.gadget_deadline = Duration::from_millis(ms);
        }
        if let Some(ms) = var("GATEHOUSE_GATEKEEPER_DEADLINE_MS")? {
            l.gatekeeper_deadline = Duration::from_millis(ms);
        }
        if let Some(mib) = var("GATEHOUSE_MEMORY_MIB")? {
            l.memory_bytes = (mib as usize) << 20;
        }
        if let Some(n) = var("GATEHOUSE_TURN_CALLS")? {
            l.turn_calls = u32::try_from(n).with_context(|| {
                format!(
                    "GATEHOUSE_TURN_CALLS={n} is too large; at most {}",
                    u32::MAX
                )
            })?;
        }
        if let Some(pem) = std::env::var_os("GATEHOUSE_TRUST_ROOTS").filter(|v| !v.is_empty()) {
            l.roots = gatekeeper::Roots::with_file(std::path::Path::new(&pem))
                .context("GATEHOUSE_TRUST_ROOTS")?;
        }
        Ok(l)
    }

    /// Epoch ticks for a wall-clock budget (at least one).
    pub fn ticks(d: Duration) -> u64 {
        (d.as_millis() / TICK.as_millis()).max(1) as u64
    }
}

/// Per-store resource limiter that remembers *why* it said no, so a trap can
/// be reported as "exceeded its memory limit" rather than a bare trap.
pub struct Limiter {
    inner: wasmtime::StoreLimits,
    memory_bytes: usize,
    pub hit_memory: bool,
}

impl Limiter {
    pub fn new(l: &Limits) -> Limiter {
        Limiter {
            inner: wasmtime::StoreLimitsBuilder::new()
                .memory_size(l.memory_bytes)
                .table_elements(l.table_elements)
                .tables(l.tables)
                .memories(l.tables)
                .instances(l.instances)
                .trap_on_grow_failure(true)
                .build(),
            memory_bytes: l.memory_bytes,
            hit_memory: false,
        }
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.hit_memory = true;
        }
        self.inner.memory_growing(current, desired, maximum)
    }
    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }
    fn instances(&self) -> usize {
        self.inner.instances()
    }
    fn tables(&self) -> usize {
        self.inner.tables()
    }
    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

/// Which world a component must satisfy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Exports the `gadget` (or `step`) world: runs turns, calls the kernel.
    Gadget,
    /// Exports the `gatekeeper` world's `tool` interface: fronts one service.
    Gatekeeper,
}

impl Role {
    fn noun(self) -> &'static str {
        match self {
            Role::Gadget => "gadget",
            Role::Gatekeeper => "gatekeeper",
        }
    }
}

/// The engine, the two linkers and the compiled-component cache.
pub struct Runtime {
    engine: Engine,
    gadget_linker: Linker<gadget::GadgetState>,
    gatekeeper_linker: Linker<gatekeeper::GatekeeperState>,
    cache_dir: PathBuf,
    engine_key: String,
    /// The limits every store of this runtime runs under.
    pub limits: Limits,
    /// Gatekeepers' connections kept across their reads.
    pub connections: gatekeeper::Connections,
    /// MCP sessions held across gatekeepers' reads.
    pub sessions: sessions::Sessions,
    loaded_gadgets: Mutex<HashMap<String, gadget::GadgetPre<gadget::GadgetState>>>,
    loaded_gatekeepers:
        Mutex<HashMap<String, gatekeeper::GatekeeperPre<gatekeeper::GatekeeperState>>>,
    ticker_stop: Arc<AtomicBool>,
    /// Where a component's bytes come from when this host's cache does not
    /// have them: a shared database, from which any host serves any chat,
    /// so a host need not have installed a component to run it. `None` on a
    /// home, whose cache is where they were put.
    sources: Option<Sources>,
}

/// Fetches the bytes of an installed component by digest, or `None` when
/// nobody kept them.
pub type Sources = Box<dyn Fn(&str) -> anyhow::Result<Option<Vec<u8>>> + Send + Sync>;

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// An engine configured for `limits` (pooling allocator, epoch deadlines),
    /// with its epoch ticker thread running until the runtime is dropped, and
    /// compiled components cached under `cache_dir` (keyed by the engine's
    /// compatibility hash, so a new wasmtime never loads a stale compile).
    pub fn new(cache_dir: PathBuf, limits: Limits) -> anyhow::Result<Runtime> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        if limits.pooling {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(200)
                .total_core_instances(1000)
                .total_memories(400)
                .total_tables(400)
                .total_stacks(200)
                .max_memory_size(limits.memory_bytes)
                .max_core_instances_per_component(limits.instances as u32)
                .max_memories_per_component(limits.tables as u32)
                .max_tables_per_component(limits.tables as u32)
                .max_component_instance_size(1 << 20)
                .max_core_instance_size(1 << 20);
            // `Auto`, not `Yes`: were the scan to vanish between this
            // check and the engine's own, the engine still starts.
            if PoolingAllocationConfig::is_pagemap_scan_available() {
                pool.pagemap_scan(wasmtime::Enabled::Auto)
                    .linear_memory_keep_resident(KEEP_RESIDENT)
                    .table_keep_resident(KEEP_RESIDENT);
            }
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(anyhow::Error::from)?;

        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("gatehouse-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(TICK);
                        engine.increment_epoch();
                    }
                })
                .context("cannot start the epoch ticker thread")?;
        }

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());

        std::fs::create_dir_all(&cache_dir)
            .with_context(|| format!("cannot create {}", cache_dir.display()))?;
        let connections = gatekeeper::Connections::new(&limits.roots);
        Ok(Runtime {
            gadget_linker: gadget::linker(&engine)?,
            gatekeeper_linker: gatekeeper::linker(&engine)?,
            engine,
            cache_dir,
            engine_key,
            limits,
            connections,
            sessions: sessions::Sessions::default(),
            loaded_gadgets: Mutex::new(HashMap::new()),
            loaded_gatekeepers: Mutex::new(HashMap::new()),
            ticker_stop: stop,
            sources: None,
        })
    }

    /// The wasmtime engine, to make stores for the prepared components.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Validate a component for `role` and cache its compiled form.
    /// Returns its content digest. Nothing is recorded as installed here:
    /// the caller does that only after this succeeded (X3).
    pub fn admit(
        &self,
        bytes: &[u8],
        role: Role,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<String> {
        check_header(bytes)?;
        // Before anything that recurses reads the bytes (X3): a deeply
        // nested component must be refused, never crash the process.
        nesting::check(bytes)?;
        let digest = hex::encode(Sha256::digest(bytes));
        let source = self.source_path(&digest);
        let component = self.compile_cached(&digest, bytes, progress)?;
        let checked = check_exports(&self.engine, &component, role).and_then(|()| match role {
            Role::Gadget => self.gadget_pre(&digest, component).map(drop),
            Role::Gatekeeper => self.gatekeeper_pre(&digest, component).map(drop),
        });
        if let Err(e) = checked {
            // A refused component leaves nothing behind, not even its
            // compiled form (unless the same bytes were admitted before).
            if !source.exists() {
                let compiled = self.compiled_path(&digest);
                let _ = std::fs::remove_file(compiled.with_extension("cwasm.sha256"));
                let _ = std::fs::remove_file(compiled);
            }
            return Err(e);
        }
        if !source.exists() {
            write_atomic(&source, bytes)?;
        }
        Ok(digest)
    }

    /// Take components this host's cache lacks from `sources` (a host
    /// serving from a shared database).
    pub fn fetch_sources_from(&mut self, sources: Sources) {
        self.sources = Some(sources);
    }

    /// The prepared gadget component with this digest.
    pub fn gadget(&self, digest: &str) -> anyhow::Result<gadget::GadgetPre<gadget::GadgetState>> {
        if let Some(pre) = lock(&self.loaded_gadgets).get(digest) {
            return Ok(pre.clone());
        }
        let component = self.load(digest)?;
        self.gadget_pre(digest, component)
    }

    /// The prepared gatekeeper component with this digest.
    pub fn gatekeeper(
        &self,
        digest: &str,
    ) -> anyhow::Result<gatekeeper::GatekeeperPre<gatekeeper::GatekeeperState>> {
        if let Some(pre) = lock(&self.loaded_gatekeepers).get(digest) {
            return Ok(pre.clone());
        }
        let component = self.load(digest)?;
        self.gatekeeper_pre(digest, component)
    }

    fn gadget_pre(
        &self,
        digest: &str,
        component: Component,
    ) -> anyhow::Result<gadget::GadgetPre<gadget::GadgetState>> {
        let pre = link(&self.gadget_linker, &component, Role::Gadget)?;
        let pre = gadget::GadgetPre::new(pre).map_err(|e| exports_error(e, Role::Gadget))?;
        lock(&self.loaded_gadgets).insert(digest.to_owned(), pre.clone());
        Ok(pre)
    }

    fn gatekeeper_pre(
        &self,
        digest: &str,
        component: Component,
    ) -> anyhow::Result<gatekeeper::GatekeeperPre<gatekeeper::GatekeeperState>> {
        let pre = link(&self.gatekeeper_linker, &component, Role::Gatekeeper)?;
        let pre =
            gatekeeper::GatekeeperPre::new(pre).map_err(|e| exports_error(e, Role::Gatekeeper))?;
        lock(&self.loaded_gatekeepers).insert(digest.to_owned(), pre.clone());
        Ok(pre)
    }

    /// The bytes of an installed component, checked against its digest
    /// (for blueprints, SPEC B1).
    pub fn component_bytes(&self, digest: &str) -> anyhow::Result<Vec<u8>> {
        let source = self.source_path(digest);
        let missing = || {
            format!(
                "the installed component {digest} is missing from {}; install it again",
                source.display()
            )
        };
        let bytes = match (std::fs::read(&source), &self.sources) {
            (Ok(bytes), _) => bytes,
            (Err(e), Some(fetch)) if e.kind() == std::io::ErrorKind::NotFound => {
                let bytes = fetch(digest)?.with_context(missing)?;
                if hex::encode(Sha256::digest(&bytes)) != digest {
                    bail!(
                        "the shared database's copy of component {digest} does not match its digest; install it again"
                    );
                }
                // Kept in this host's cache: later loads read the file.
                write_atomic(&source, &bytes)?;
                return Ok(bytes);
            }
            (Err(e), _) => return Err(e).with_context(missing),
        };
        if hex::encode(Sha256::digest(&bytes)) != digest {
            bail!(
                "the stored component {} does not match its digest; install it again",
                source.display()
            );
        }
        Ok(bytes)
    }

    fn source_path(&self, digest: &str) -> PathBuf {
        self.cache_dir.join(format!("{digest}.wasm"))
    }

    fn compiled_path(&self, digest: &str) -> PathBuf {
        self.cache_dir
            .join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// Load an installed component: the precompiled artifact when it is
    /// intact, else recompile from the stored source.
    fn load(&self, digest: &str) -> anyhow::Result<Component> {
        if let Some(c) = self.load_compiled(digest)? {
            return Ok(c);
        }
        let bytes = self.component_bytes(digest)?;
        self.compile_cached(digest, &bytes, &|_| {})
    }

    /// The cached artifact, if present and intact. The cache is keyed by the
    /// component's digest and the engine's configuration (wasmtime checks
    /// that compatibility again at load). Each artifact carries a seal
    /// ([`Seal`]): its SHA-256, taken when it was written, and the file's
    /// identity and change time as they were when that hash was last
    /// verified. A damaged or tampered entry is rebuilt, never trusted.
    ///
    /// Why not hash on every load: a Python or JavaScript artifact is
    /// 35-50 MB, and hashing it was 80-90% of a cached load.
    /// Any write to the file, in place or by replacing it, changes its
    /// change time (`ctime`, which no unprivileged process can set back)
    /// or its inode, so an unchanged identity means unchanged bytes since
    /// the hash was verified; a changed one sends the load through the full
    /// hash again. The file is then mapped, not read and copied.
    fn load_compiled(&self, digest: &str) -> anyhow::Result<Option<Component>> {
        let path = self.compiled_path(digest);
        let sum_path = path.with_extension("cwasm.sha256");
        let Ok(seal) = std::fs::read_to_string(&sum_path) else {
            return Ok(None);
        };
        let seal = Seal::parse(&seal);
        let Ok(now) = FileStamp::of(&path) else {
            return Ok(None);
        };
        if seal.stamp != Some(now) {
            let Ok(bytes) = std::fs::read(&path) else {
                return Ok(None);
            };
            if hex::encode(Sha256::digest(&bytes)) != seal.sha256 {
                tracing::warn!(path = %path.display(), "compiled cache entry is damaged; recompiling");
                let _ = std::fs::remove_file(&path);
                return Ok(None);
            }
            // Verified: remember this file as it is now. A failed write
            // only means the next load verifies again.
            if let Ok(stamp) = FileStamp::of(&path)
                && stamp == now
            {
                let _ = write_atomic(&sum_path, Seal::render(&seal.sha256, stamp).as_bytes());
            }
        }
        // SAFETY: the file was produced by `Engine::precompile_component` of
        // an engine with this configuration (its name carries the
        // compatibility hash, and wasmtime checks it again) and is unchanged
        // since its hash was verified (checked just above). It is only ever
        // replaced by a rename, never written in place by Gatehouse, so the
        // mapping stays what was verified.
        match unsafe { Component::deserialize_file(&self.engine, &path) } {
            // Still the verified file after mapping it (not replaced
            // between the check and the open).
            Ok(c) if FileStamp::of(&path).is_ok_and(|s| s == now) => Ok(Some(c)),
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "compiled cache entry refused; recompiling");
                Ok(None)
            }
        }
    }

    fn compile_cached(
        &self,
        digest: &str,
        bytes: &[u8],
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<Component> {
        if let Some(c) = self.load_compiled(digest)? {
            return Ok(c);
        }
        progress(&format!(
            "compiling {} KiB of WebAssembly (once; later runs load the compiled form)",
            bytes.len() / 1024
        ));
        let started = Instant::now();
        let compiled = self.precompile_reporting(bytes, progress).map_err(|e| {
            anyhow::anyhow!(
                "not a valid WebAssembly component: {}",
                one_line(&format!("{e:#}"))
            )
        })?;
        progress(&format!(
            "compiling done in {:.1} s; the compiled form is cached",
            started.elapsed().as_secs_f64()
        ));
        let path = self.compiled_path(digest);
        write_atomic(&path, &compiled)?;
        let sha256 = hex::encode(Sha256::digest(&compiled));
        let stamp = FileStamp::of(&path).ok();
        let seal = match stamp {
            Some(stamp) => Seal::render(&sha256, stamp),
            None => sha256,
        };
        write_atomic(&path.with_extension("cwasm.sha256"), seal.as_bytes())?;
        // SAFETY: produced just now by this engine.
        let c = unsafe { Component::deserialize(&self.engine, &compiled) }
            .map_err(anyhow::Error::from)?;
        Ok(c)
    }
}

impl Runtime {
    /// Compile on a helper thread and note the elapsed time every
    /// [`PROGRESS_EVERY`] meanwhile: a Python or JavaScript component
    /// bundles its language's runtime (10-20 MB) and takes seconds, and a
    /// silent `install` looks hung. `progress` need not be `Send`, so only
    /// this thread calls it. Every note starts with "compiling", the one
    /// word a person (or a test) needs to tell a compile from a cache hit.
    fn precompile_reporting(
        &self,
        bytes: &[u8],
        progress: &dyn Fn(&str),
    ) -> wasmtime::Result<Vec<u8>> {
        let started = Instant::now();
        std::thread::scope(|scope| {
            let (done, finished) = std::sync::mpsc::channel();
            let engine = &self.engine;
            scope.spawn(move || {
                // The receiver outlives this thread (the scope waits for
                // it), so the send cannot fail in a way that matters.
                let _ = done.send(engine.precompile_component(bytes));
            });
            loop {
                match finished.recv_timeout(PROGRESS_EVERY) {
                    Ok(result) => return result,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => progress(&format!(
                        "compiling ... {} s so far",
                        started.elapsed().as_secs()
                    )),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(wasmtime::Error::msg("the compiler thread stopped early"));
                    }
                }
            }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn link<T>(
    linker: &Linker<T>,
    component: &Component,
    role: Role,
) -> anyhow::Result<InstancePre<T>> {
    linker.instantiate_pre(component).map_err(|e| {
        anyhow::anyhow!(
            "this {} imports something Gatehouse does not provide: {}; a {} may import only the gatehouse:os interfaces and WASI",
            role.noun(),
            one_line(&format!("{e:#}")),
            role.noun()
        )
    })
}

/// Check what a component exports before linking its imports, so that a
/// component of the other role is told what it is, not what it imports.
fn check_exports(engine: &Engine, component: &Component, role: Role) -> anyhow::Result<()> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
    let imports = ty.imports(engine).map(|(n, _)| n.to_owned());
    if let Some(version) = older_contract(imports.chain(exports.iter().cloned())) {
        bail!(
            "this {} was built against gatehouse:os@{version}, and this Gatehouse speaks gatehouse:os@{CONTRACT_VERSION}: rebuild it against the current SDK or wit/gatehouse.wit",
            role.noun()
        );
    }
    let has = |iface: &str| exports.iter().any(|n| n.starts_with(iface));
    let (want, other, other_role, how) = match role {
        Role::Gadget => (
            "gatehouse:os/run",
            "gatehouse:os/tool",
            "gatekeeper",
            "add it with `gatehouse gatekeeper add`",
        ),
        Role::Gatekeeper => (
            "gatehouse:os/tool",
            "gatehouse:os/run",
            "gadget",
            "install it with `gatehouse install`",
        ),
    };
    if has(want) {
        return Ok(());
    }
    if has(other) {
        bail!(
            "this component is a {other_role}, not a {}: a {} must export {want}; {how}",
            role.noun(),
            role.noun()
        );
    }
    bail!(
        "this component is not a {}: it must export {want} (it exports: {})",
        role.noun(),
        if exports.is_empty() {
            "nothing".to_owned()
        } else {
            exports.join(", ")
        }
    )
}

/// The version of `wit/gatehouse.wit` this host implements. A component
/// names the version it was built against in every `gatehouse:os` import
/// and export; a 0.x minor version changes shapes, so an older one would
/// fail to link with a message about a missing instance, not about the
/// rebuild that fixes it.
const CONTRACT_VERSION: &str = "0.3.0";

/// The first `gatehouse:os` version among `names` other than the one this
/// host speaks.
fn older_contract(names: impl IntoIterator<Item = String>) -> Option<String> {
    names.into_iter().find_map(|name| {
        let (_, version) = name.strip_prefix("gatehouse:os/")?.split_once('@')?;
        (version != CONTRACT_VERSION).then(|| version.to_owned())
    })
}

fn exports_error(e: wasmtime::Error, role: Role) -> anyhow::Error {
    let want = match role {
        Role::Gadget => "gatehouse:os/run (world `gadget`)",
        Role::Gatekeeper => "gatehouse:os/tool (world `gatekeeper`)",
    };
    anyhow::anyhow!(
        "this component is not a {}: it must export {want} ({})",
        role.noun(),
        one_line(&format!("{e:#}"))
    )
}

/// Refuse what is not a component before Cranelift sees it, with a message
/// that says what the file is.
fn check_header(bytes: &[u8]) -> anyhow::Result<()> {
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        bail!(
            "not a WebAssembly file (it does not start with \\0asm); build a component for wasm32-wasip2"
        );
    }
    match (
        bytes[4..6] == [1, 0],
        bytes[6..8] == [0, 0],
        bytes[6..8] == [1, 0],
    ) {
        (true, true, _) => bail!(
            "this is a core WebAssembly module, not a component; build for wasm32-wasip2 or wrap it with `wasm-tools component new`"
        ),
        (_, _, true) => Ok(()),
        _ => bail!("unknown WebAssembly binary version; build a component for wasm32-wasip2"),
    }
}

/// What a compiled artifact's `.cwasm.sha256` file holds: the artifact's
/// SHA-256 on the first line, and on the second the [`FileStamp`] of the
/// file whose bytes last matched it (absent in caches written before
/// stamps, which are then verified once and stamped).
struct Seal {
    sha256: String,
    stamp: Option<FileStamp>,
}

impl Seal {
    fn parse(text: &str) -> Seal {
        let mut lines = text.lines();
        Seal {
            sha256: lines.next().unwrap_or_default().trim().to_owned(),
            stamp: lines.next().and_then(FileStamp::parse),
        }
    }

    fn render(sha256: &str, stamp: FileStamp) -> String {
        format!("{sha256}\n{}\n", stamp.render())
    }
}

/// A file's identity and last change: device, inode, size, and the
/// modification and change times in nanoseconds. Any write to the file
/// changes its change time; replacing it changes its inode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileStamp([i128; 6]);

impl FileStamp {
    #[cfg(unix)]
    fn of(path: &Path) -> std::io::Result<FileStamp> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(path)?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(FileStamp([
            i128::from(m.dev()),
            i128::from(m.ino()),
            i128::from(m.size()),
            ns(m.mtime(), m.mtime_nsec()),
            ns(m.ctime(), m.ctime_nsec()),
            1,
        ]))
    }

    /// Without a change time, no stamp ever matches: every load verifies.
    #[cfg(not(unix))]
    fn of(_: &Path) -> std::io::Result<FileStamp> {
        Ok(FileStamp([0, 0, 0, 0, 0, 0]))
    }

    fn parse(line: &str) -> Option<FileStamp> {
        let v: Vec<i128> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let stamp = FileStamp(v.try_into().ok()?);
        // Stamp version 1; anything else is verified again.
        (stamp.0[5] == 1).then_some(stamp)
    }

    fn render(&self) -> String {
        self.0.map(|v| v.to_string()).join(" ")
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub use crate::prompt::one_line;

/// Turn a trap into a sentence naming the cause.
pub fn explain_trap(e: &wasmtime::Error, who: &str, limits: &Limits, hit_memory: bool) -> String {
    if hit_memory {
        return format!(
            "{who} exceeded its memory limit of {} MiB and was stopped",
            limits.memory_bytes >> 20
        );
    }
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        if *trap == wasmtime::Trap::Interrupt {
            return format!("{who} ran past its deadline and was interrupted");
        }
        return format!("{who} crashed ({trap})");
    }
    format!("{who} failed: {}", one_line(&format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::{CONTRACT_VERSION, older_contract};

    #[test]
    fn the_contract_version_is_the_wit_files() {
        let wit = include_str!("../../../wit/gatehouse.wit");
        assert!(
            wit.contains(&format!("package gatehouse:os@{CONTRACT_VERSION};")),
            "wit/gatehouse.wit declares another version than CONTRACT_VERSION"
        );
    }

    #[test]
    fn an_older_contract_is_named_and_others_are_not() {
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            older_contract(names(&[
                "wasi:cli/environment@0.2.6",
                "gatehouse:os/kernel@0.2.0"
            ])),
            Some("0.2.0".to_owned())
        );
        assert_eq!(
            older_contract(names(&[
                "wasi:io/streams@0.2.0",
                &format!("gatehouse:os/run@{CONTRACT_VERSION}")
            ])),
            None
        );
    }
}
