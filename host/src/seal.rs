//! Secrets at rest: every secret the deployment keeps in a recoverable form
//! is kept sealed with a key the operator holds.
//!
//! Owns the key (where it comes from, its id, the home's own key file) and
//! the one sealed form: XChaCha20-Poly1305 with a random 24-byte nonce, the
//! value's place (its table and row) as associated data, and the id of the
//! key that sealed it. It may not read or write the database nor decide
//! which values are secret: the store seals and opens its values through
//! [`Key::seal`] and [`Key::open`], and nothing else sees a secret as it is
//! kept.
//!
//! Why these choices (docs/security-model.md, "Secrets at rest"):
//! - The place as associated data: a sealed value copied into another row
//!   (an operator credential into a person's account, one hook's signing
//!   key into another's) does not open there.
//! - Random nonces of 24 bytes: sealing needs no counter kept anywhere, and
//!   the chance of two seals under one key sharing a nonce is negligible
//!   for any number of secrets a deployment could hold.
//! - The key's id with each value: a host given the wrong key says which
//!   key the values want, instead of failing on an authentication tag.

use anyhow::{Context as _, bail};
use base64::Engine as _;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// What every sealed value starts with; the version of the form follows.
const PREFIX: &str = "gh-sealed-1.";
/// Bytes of a key.
const KEY_BYTES: usize = 32;
/// Bytes of a nonce (XChaCha20).
const NONCE_BYTES: usize = 24;
/// The environment variable naming a key file.
pub const KEY_FILE_ENV: &str = "GATEHOUSE_KEY_FILE";
/// The environment variable holding a key itself (base64 or hex).
pub const KEY_ENV: &str = "GATEHOUSE_KEY";
/// The key file an embedded home makes for itself when given none.
pub const HOME_KEY_FILE: &str = "gatehouse.key";

/// Where a value is kept: its table and the row's name. Sealed into the
/// value as associated data, so it opens only where it was sealed.
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    /// The table (`secrets`, `deployment_secrets`, `hooks`).
    pub table: &'a str,
    /// The row's key in it (a secret's name, a hook's id).
    pub row: &'a str,
}

impl<'a> Place<'a> {
    /// The row `row` of `table`.
    pub fn new(table: &'a str, row: &'a str) -> Place<'a> {
        Place { table, row }
    }

    fn associated_data(&self) -> Vec<u8> {
        format!("gatehouse sealed v1\n{}\n{}", self.table, self.row).into_bytes()
    }
}

/// Where a host's key came from: named in errors, so the operator knows
/// which setting to change.
#[derive(Clone, Debug)]
pub enum Origin {
    /// A file named by `GATEHOUSE_KEY_FILE` (or `--key-file`).
    File(PathBuf),
    /// The `GATEHOUSE_KEY` environment variable.
    Env,
    /// The key file an embedded home made for itself.
    Home(PathBuf),
    /// Made in this process (`gatehouse key new`, tests).
    Fresh,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(p) => write!(f, "from the key file {}", p.display()),
            Origin::Env => write!(f, "from {KEY_ENV}"),
            Origin::Home(p) => write!(f, "from the home's own key file {}", p.display()),
            Origin::Fresh => f.write_str("made just now"),
        }
    }
}

/// A key secrets are sealed with. Its bytes are wiped when it is dropped
/// and never printed: `Debug` and `Display` show its id only.
#[derive(Clone)]
pub struct Key {
    bytes: Zeroizing<[u8; KEY_BYTES]>,
    id: String,
    origin: Origin,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({}, {})", self.id, self.origin)
    }
}

impl Key {
    /// A fresh random key.
    pub fn generate() -> anyhow::Result<Key> {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        getrandom::fill(bytes.as_mut())
            .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
        Ok(Key::from_bytes(bytes, Origin::Fresh))
    }

    fn from_bytes(bytes: Zeroizing<[u8; KEY_BYTES]>, origin: Origin) -> Key {
        let digest = Sha256::new()
            .chain_update(b"gatehouse key id v1\n")
            .chain_update(bytes.as_ref())
            .finalize();
        Key {
            id: hex::encode(&digest[..8]),
            bytes,
            origin,
        }
    }

    /// The key written as `text`: 32 bytes in base64 (padded or not,
    /// standard or URL-safe alphabet) or in hex, surrounding whitespace
    /// ignored. The text is never echoed in an error.
    pub fn parse(text: &str, origin: Origin) -> anyhow::Result<Key> {
        let text = Zeroizing::new(text.trim().to_owned());
        let decoded: Option<Zeroizing<Vec<u8>>> =
            if text.len() == 2 * KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                hex::decode(text.as_bytes()).ok().map(Zeroizing::new)
            } else {
                let unpadded = text.trim_end_matches('=');
                [
                    base64::engine::general_purpose::STANDARD_NO_PAD,
                    base64::engine::general_purpose::URL_SAFE_NO_PAD,
                ]
                .iter()
                .find_map(|e| e.decode(unpadded).ok())
                .map(Zeroizing::new)
            };
        let Some(decoded) = decoded.filter(|d| d.len() == KEY_BYTES) else {
            bail!(
                "the key {origin} is not a key (expected 32 bytes in base64 or hex, as `gatehouse key new` prints); make one with `gatehouse key new > FILE`"
            );
        };
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        bytes.copy_from_slice(&decoded);
        Ok(Key::from_bytes(bytes, origin))
    }

    /// The key in the file at `path`, which only its owner may read.
    pub fn from_file(path: &Path) -> anyhow::Result<Key> {
        Key::read_file(path, Origin::File(path.to_owned()))
    }

    fn read_file(path: &Path, origin: Origin) -> anyhow::Result<Key> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let meta = std::fs::metadata(path).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the key file {} ({e}); check {KEY_FILE_ENV}, or make a key with `gatehouse key new > FILE`",
                    path.display()
                )
            })?;
            if meta.permissions().mode() & 0o077 != 0 {
                bail!(
                    "the key file {} may be read by others than its owner; run `chmod 600 {}`, then retry",
                    path.display(),
                    path.display()
                );
            }
        }
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "cannot read the key file {} ({e}); check {KEY_FILE_ENV}",
                path.display()
            )
        })?);
        Key::parse(&text, origin)
    }

    /// The key this process was given, if any: the file named by
    /// `file` (from `--key-file` or `GATEHOUSE_KEY_FILE`), else the key
    /// in `GATEHOUSE_KEY` (`env_key`). Both at once is refused: which one
    /// was meant cannot be known.
    pub fn given(file: Option<&Path>, env_key: Option<&str>) -> anyhow::Result<Option<Key>> {
        let env_key = env_key.filter(|k| !k.trim().is_empty());
        match (file, env_key) {
            (Some(_), Some(_)) => {
                bail!("both {KEY_FILE_ENV} (or --key-file) and {KEY_ENV} are set; keep one of them")
            }
            (Some(path), None) => Key::from_file(path).map(Some),
            (None, Some(text)) => Key::parse(text, Origin::Env).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The key file an embedded home keeps when the operator gave none:
    /// `ROOT/gatehouse.key`, made on first use, owner-only. Kept beside
    /// the database it is no protection against whoever copies the whole
    /// home; moving it off the machine (and giving it back with
    /// `GATEHOUSE_KEY_FILE`) is what makes it a key the operator holds.
    pub fn of_home(root: &Path) -> anyhow::Result<Key> {
        let path = root.join(HOME_KEY_FILE);
        if path.exists() {
            return Key::read_file(&path, Origin::Home(path.clone()));
        }
        let fresh = Key::generate()?;
        write_owner_only(&path, fresh.encoded().as_bytes())?;
        // Two processes making it at once: the one linked first wins, and
        // both read it back.
        Key::read_file(&path, Origin::Home(path.clone()))
    }

    /// The path of the key file an embedded home at `root` makes for itself.
    pub fn home_file(root: &Path) -> PathBuf {
        root.join(HOME_KEY_FILE)
    }

    /// The key's id: the first 8 bytes of a SHA-256 of it, in hex. It is
    /// stored with every sealed value and names a key without revealing it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where this key came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The key as `gatehouse key new` prints it: standard base64, padded.
    pub fn encoded(&self) -> Zeroizing<String> {
        Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(self.bytes.as_ref()))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.bytes.as_ref().into())
    }

    /// `plain` sealed for `place`:
    /// `gh-sealed-1.KEYID.BASE64URL(nonce || ciphertext)`.
    pub fn seal(&self, place: Place<'_>, plain: &[u8]) -> anyhow::Result<String> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce)
            .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
        let aad = place.associated_data();
        let sealed = self
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: &aad,
                },
            )
            .map_err(|_| anyhow::anyhow!("cannot seal the secret {}", place.row))?;
        let mut body = nonce.to_vec();
        body.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}{}.{}",
            self.id,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body)
        ))
    }

    /// [`Key::seal`] of a text.
    pub fn seal_text(&self, place: Place<'_>, plain: &str) -> anyhow::Result<String> {
        self.seal(place, plain.as_bytes())
    }

    /// The value `stored` at `place` sealed, opened. A value sealed with
    /// another key, for another place, or damaged is refused in one line
    /// that says which and what to do; so is a value kept unsealed (every
    /// value is sealed when a store opens).
    pub fn open(&self, place: Place<'_>, stored: &str) -> anyhow::Result<Zeroizing<Vec<u8>>> {
        let what = || format!("the secret {} in {}", place.row, place.table);
        let Some((kid, body)) = split(stored) else {
            bail!(
                "{} is not sealed; open the deployment with this gatehouse once (`gatehouse db migrate`), which seals it",
                what()
            );
        };
        if kid != self.id {
            return Err(self.wrong_key(kid));
        }
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .filter(|b| b.len() > NONCE_BYTES)
            .with_context(|| format!("{} is damaged; set it again", what()))?;
        let (nonce, sealed) = body.split_at(NONCE_BYTES);
        let aad = place.associated_data();
        self.cipher()
            .decrypt(
                XNonce::from_slice(nonce),
                Payload { msg: sealed, aad: &aad },
            )
            .map(Zeroizing::new)
            .map_err(|_| {
                anyhow::anyhow!(
                    "{} does not open with key {}: it was sealed for another row or is damaged; set it again",
                    what(),
                    self.id
                )
            })
    }

    /// [`Key::open`] of a value that was a text.
    pub fn open_text(&self, place: Place<'_>, stored: &str) -> anyhow::Result<Zeroizing<String>> {
        let bytes = self.open(place, stored)?;
        let text = std::str::from_utf8(&bytes)
            .with_context(|| format!("the secret {} is not text", place.row))?;
        Ok(Zeroizing::new(text.to_owned()))
    }

    /// The refusal of values sealed with the key `want` given this key.
    pub fn wrong_key(&self, want: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "the deployment's secrets are sealed with key {want}…; this host was given key {}… ({}): set {KEY_FILE_ENV} to the file holding key {want}… (or {KEY_ENV} to that key)",
            self.id,
            self.origin
        )
    }
}

/// A secret as the store keeps it, with its place: carried sealed (a
/// resolved credential, kept in this process's cache of resolutions) and
/// opened with the key only where it is used. Never printed: `Debug`
/// shows its place.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    table: String,
    row: String,
    stored: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealed({}/{})", self.table, self.row)
    }
}

impl Sealed {
    /// The value `stored` as it was read from `row` of `table`.
    pub fn kept(table: &str, row: &str, stored: String) -> Sealed {
        Sealed {
            table: table.to_owned(),
            row: row.to_owned(),
            stored,
        }
    }

    /// The value as kept (sealed text; an older store's plaintext in the
    /// store's own tests).
    #[cfg(test)]
    pub(crate) fn stored(&self) -> &str {
        &self.stored
    }

    /// The secret, opened with `key`.
    pub fn open(&self, key: &Key) -> anyhow::Result<Zeroizing<String>> {
        key.open_text(Place::new(&self.table, &self.row), &self.stored)
    }
}

/// The id of the key `stored` was sealed with, if it is sealed.
pub fn sealed_with(stored: &str) -> Option<&str> {
    split(stored).map(|(kid, _)| kid)
}

/// Whether `stored` is in the sealed form (by its form alone).
pub fn is_sealed(stored: &str) -> bool {
    split(stored).is_some()
}

fn split(stored: &str) -> Option<(&str, &str)> {
    let rest = stored.strip_prefix(PREFIX)?;
    let (kid, body) = rest.split_once('.')?;
    (kid.len() == 16 && kid.bytes().all(|b| b.is_ascii_hexdigit()) && !body.is_empty())
        .then_some((kid, body))
}

/// Write `bytes` to a new file at `path`, readable by its owner only,
/// atomically: a half-written file is never read, and of two processes
/// writing at once the first linked wins (the other's is dropped).
pub fn write_owner_only(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let staging = path.with_extension(format!("new-{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let written = (|| -> std::io::Result<()> {
        let mut f = options.open(&staging)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&staging);
        return Err(e).with_context(|| format!("cannot write {}", staging.display()));
    }
    let linked = std::fs::hard_link(&staging, path);
    let _ = std::fs::remove_file(&staging);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

/// A fixed key for the crate's own tests (never used outside them).
#[cfg(test)]
pub(crate) fn test_key() -> std::sync::Arc<Key> {
    std::sync::Arc::new(Key::from_bytes(
        Zeroizing::new([7u8; KEY_BYTES]),
        Origin::Fresh,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_opens_only_at_its_place_and_with_its_key() {
        let key = Key::generate().expect("a key");
        let here = Place::new("secrets", "op");
        let sealed = key.seal_text(here, "tok-123").expect("sealed");
        assert!(!sealed.contains("tok-123"), "{sealed}");
        assert!(is_sealed(&sealed));
        assert_eq!(sealed_with(&sealed), Some(key.id()));
        assert_eq!(
            key.open_text(here, &sealed).expect("opens").as_str(),
            "tok-123"
        );
        // Sealed twice, two texts: the nonce is fresh each time.
        assert_ne!(sealed, key.seal_text(here, "tok-123").expect("sealed"));
        let moved = key
            .open_text(Place::new("secrets", "account/bob/g/work"), &sealed)
            .expect_err("another row");
        assert!(moved.to_string().contains("another row"), "{moved}");
        let other = Key::generate().expect("a key");
        let wrong = other.open_text(here, &sealed).expect_err("another key");
        let line = wrong.to_string();
        assert!(
            line.contains(key.id()) && line.contains(other.id()),
            "{line}"
        );
        assert!(
            line.contains(KEY_FILE_ENV) && !line.contains('\n'),
            "{line}"
        );
        let plain = key.open_text(here, "tok-123").expect_err("not sealed");
        assert!(!plain.to_string().contains("tok-123"), "{plain}");
    }

    #[test]
    fn a_key_reads_as_base64_or_hex_and_is_never_echoed() {
        let key = Key::generate().expect("a key");
        let b64 = key.encoded();
        let again = Key::parse(&format!("  {}\n", b64.as_str()), Origin::Env).expect("base64");
        assert_eq!(again.id(), key.id());
        let hex_text = hex::encode(key.bytes.as_ref());
        assert_eq!(
            Key::parse(&hex_text, Origin::Env).expect("hex").id(),
            key.id()
        );
        let bad = Key::parse("not-a-key-s3cret", Origin::Env).expect_err("refused");
        assert!(!bad.to_string().contains("s3cret"), "{bad}");
        assert!(!format!("{key:?}").contains(b64.as_str()));
    }

    #[cfg(unix)]
    #[test]
    fn a_home_makes_its_key_once_owner_only_and_a_shared_file_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let first = Key::of_home(dir.path()).expect("made");
        let path = Key::home_file(dir.path());
        let mode = std::fs::metadata(&path).expect("kept").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(Key::of_home(dir.path()).expect("read").id(), first.id());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let open = Key::from_file(&path).expect_err("readable by others");
        assert!(open.to_string().contains("chmod 600"), "{open}");
        let both = Key::given(Some(&path), Some("x")).expect_err("two keys");
        assert!(both.to_string().contains("keep one"), "{both}");
    }
}
