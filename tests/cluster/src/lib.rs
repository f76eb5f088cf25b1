//! A throwaway PostgreSQL cluster for the tests, started by the tests
//! themselves so that they need no server set up beforehand: Debian's
//! server binaries, a data directory in a fresh temporary directory, a
//! loopback port chosen free, trust authentication for one role. `initdb`
//! refuses root, so as root the cluster runs as the `postgres` user the
//! Debian package creates.
//!
//! One cluster serves a whole test process; each test gets a database of
//! its own ([`Cluster::database`]). The server offers TLS (so that
//! `sslmode=verify-full` is tested against a real server) with
//! a certificate for `127.0.0.1` and `localhost` signed by an authority
//! made at start ([`Cluster::ca_file`]); a connection that does not ask
//! for TLS works as before. The cluster stops and its directory is
//! removed when the test process ends, whichever way it ends: a watcher
//! process started beside the server waits for the test process to exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The role every test connects as.
const ROLE: &str = "gatehouse";

/// A running cluster on 127.0.0.1.
pub struct Cluster {
    port: u16,
    bin: PathBuf,
    /// The PEM file of the authority that signed the server's certificate.
    ca: PathBuf,
}

/// The cluster of this test process, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(false).unwrap_or_else(|e| panic!("{e}")))
}

/// A cluster of its own that syncs its commits to disk as a production
/// server does (`fsync`, `synchronous_commit` on): for benchmarks, whose
/// figures would mean nothing on a cluster that never waits for the disk.
/// The tests' [`cluster`] skips the disk waits, which no test asserts on.
pub fn durable_cluster() -> Cluster {
    Cluster::start(true).unwrap_or_else(|e| panic!("{e}"))
}

/// Where Debian keeps PostgreSQL's server programs (the newest version
/// installed), else the directory of an `initdb` on PATH.
fn server_bin() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(bin) = found.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists())
        .ok_or_else(|| {
            "PostgreSQL's server is not installed (no initdb): install the Debian package `postgresql` (.ci/run does)".to_owned()
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program` with `args`, as the `postgres` user when this process is root,
/// with an environment of its own (nothing of the developer's leaks in).
fn as_server_user(program: &Path, args: &[&str], root: bool) -> Command {
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    };
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    cmd
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl Cluster {
    fn start(durable: bool) -> Result<Cluster, String> {
        let bin = server_bin()?;
        let root = is_root();
        // Not under a TempDir: the watcher removes it after this process
        // is gone, which no destructor of a static would do.
        let dir = std::env::temp_dir().join(format!(
            "gatehouse-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // The server's certificate, before the directory is handed to the
        // server's user: its key must be that user's, readable by it only.
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls).map_err(|e| format!("{}: {e}", tls.display()))?;
        let ca = tls.join("ca.pem");
        let authority = Authority::new("Gatehouse test cluster CA")?;
        write(&ca, &authority.pem)?;
        let (cert, key) = authority.server(&["127.0.0.1", "localhost"])?;
        write(&tls.join("server.crt"), &cert)?;
        write(&tls.join("server.key"), &key)?;
        restrict(&tls.join("server.key"))?;
        if root {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !chown.success() {
                return Err(format!("cannot give {} to postgres", dir.display()));
            }
        }
        let data = dir.join("data");
        let data_s = data.to_str().ok_or("a non-UTF-8 temporary directory")?;
        let init = as_server_user(
            &bin.join("initdb"),
            &[
                "-D",
                data_s,
                "-U",
                ROLE,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            root,
        )
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
        if !init.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&init.stderr)
            ));
        }
        let log = dir.join("server.log");
        let mut last = String::new();
        // A port found free may be taken before the server binds it: try
        // a few.
        for _ in 0..5 {
            let port = free_port()?;
            let disk = if durable {
                ""
            } else {
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            };
            let options = format!(
                "-p {port} -c listen_addresses=127.0.0.1 -k {} -c max_connections=300{disk} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                dir.display(),
                tls.join("server.crt").display(),
                tls.join("server.key").display()
            );
            let started = as_server_user(
                &bin.join("pg_ctl"),
                &[
                    "-D",
                    data_s,
                    "-l",
                    log.to_str().ok_or("a non-UTF-8 path")?,
                    "-o",
                    &options,
                    "-w",
                    "-t",
                    "120",
                    "start",
                ],
                root,
            )
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl: {e}"))?;
            if started.success() {
                watch(&bin, &dir, &data, root)?;
                return Ok(Cluster { port, bin, ca });
            }
            last = std::fs::read_to_string(&log).unwrap_or_default();
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(format!("the PostgreSQL server did not start: {last}"))
    }

    /// A fresh, empty database of this cluster, as a connection URL.
    pub fn database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// The PEM file of the authority that signed the server's certificate
    /// (for `sslrootcert=`).
    pub fn ca_file(&self) -> &Path {
        &self.ca
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{ROLE}@127.0.0.1:{}/{name}", self.port)
    }

    /// Run `sql` in database `name` with psql; its output, unaligned and
    /// without headers (`|` between columns).
    pub fn psql(&self, name: &str, sql: &str) -> String {
        let out = self.psql_output(name, sql);
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Cluster::psql`], whatever its outcome.
    pub fn psql_output(&self, name: &str, sql: &str) -> std::process::Output {
        self.psql_session(name)
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("psql runs")
    }

    /// A psql session on database `name`, to be given its statements (by
    /// `-c`, or on stdin).
    pub fn psql_session(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                ROLE,
                "-d",
                name,
            ]);
        cmd
    }
}

/// The database name in a URL this module made.
pub fn name_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// Start the watcher: once this test process is gone, stop the server at
/// once and remove its directory.
fn watch(bin: &Path, dir: &Path, data: &Path, root: bool) -> Result<(), String> {
    let pg_ctl = bin.join("pg_ctl");
    let stop = if root {
        format!(
            "runuser -u postgres -- '{}' -D '{}' -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    } else {
        format!(
            "'{}' -D '{}' -m immediate stop",
            pg_ctl.display(),
            data.display()
        )
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        dir = dir.display()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        // Its own process group: a Ctrl-C to the tests does not stop it
        // before it has stopped the server.
        cmd.process_group(0);
    }
    cmd.spawn()
        .map(|_| ())
        .map_err(|e| format!("the watcher: {e}"))
}

/// A certificate authority made for a test: its certificate as PEM, and
/// the means to sign a server's certificate.
pub struct Authority {
    /// The authority's own certificate, PEM.
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Authority {
    /// A fresh self-signed authority named `name`.
    pub fn new(name: &str) -> Result<Authority, String> {
        let fail = |e: rcgen::Error| format!("cannot make a test certificate authority: {e}");
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(fail)?;
        Ok(Authority {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// A server certificate for `names` (host names or IP addresses)
    /// signed by this authority, and its key, both PEM.
    pub fn server(&self, names: &[&str]) -> Result<(String, String), String> {
        let fail = |e: rcgen::Error| format!("cannot make a test server certificate: {e}");
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).map_err(fail)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "gatehouse test cluster");
        let cert = params.signed_by(&key, &self.issuer).map_err(fail)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Readable and writable by its owner only, as PostgreSQL demands of its
/// key.
fn restrict(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
