//! Grants (SPEC G3, G5, G6): the deployment's certificate authority and
//! the certificates it signs for workflow steps, and the allowed-calls
//! lists that approvals carry (G4).
//!
//! Owns key material, the certificate format and the pure checks (is this
//! certificate ours, for this run and step, unexpired? does this call fit
//! this list?). Revocation, coverage and the audit are stored state and
//! live in `crate::workflow` and `store::workflows`; this module may not
//! call components.
//!
//! A certificate is `base64url(claims JSON) "." base64url(ed25519 signature)`.
//! The CA key is a deployment secret (`deployment_secrets`, under
//! [`SHARED_KEY_NAME`]), made on first use and kept sealed with the
//! operator's key on either engine, so that a copy of the database alone
//! never signs a certificate; an older home's plaintext key file
//! `$GATEHOUSE_HOME/ca/ca.key` is moved in, sealed, when the home opens
//! ([`legacy_key_hex`], [`forget_legacy_key`]). The tenant is named by the
//! key's fingerprint, so a certificate from another deployment is refused
//! as foreign.

use crate::home::Home;
use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::path::PathBuf;

/// What a certificate binds (SPEC G3).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The deployment that issued it (derived from its CA key): a certificate
    /// of another deployment is foreign here.
    pub tenant: String,
    /// The workflow run it was issued to.
    pub run: i64,
    /// The step of that run; a certificate works only inside it.
    pub step: String,
    /// The approver(s) of the requests covering the step, else the run's
    /// initiator.
    pub authority: String,
    /// `KEY:tool` entries, fixed from the published design at run start.
    pub tools: Vec<String>,
    /// When it was issued, in ms since the epoch.
    pub issued_at: i64,
    /// When it stops working: certificates are short-lived.
    pub expires_at: i64,
    /// Unique per certificate; revocation is by serial.
    pub serial: String,
}

/// Why a certificate was refused. Each says what failed, never more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertRefusal {
    /// Not a token this kernel could have written.
    #[error("the certificate is malformed")]
    Malformed,
    /// Its signature is not this deployment's CA's.
    #[error("the certificate was not issued by this deployment's certificate authority")]
    Foreign,
    /// Issued to another run.
    #[error("the certificate was issued for run {got}, not run {want}")]
    WrongRun {
        /// The run it names.
        got: i64,
        /// The run presenting it.
        want: i64,
    },
    /// Issued to another step of the run.
    #[error("the certificate was issued for step {got:?}, not step {want:?}")]
    WrongStep {
        /// The step it names.
        got: String,
        /// The step presenting it.
        want: String,
    },
    /// Past its expiry.
    #[error("the certificate expired")]
    Expired,
    /// Revoked by serial: its step finished or was restarted.
    #[error("the certificate was revoked (its step has finished or was restarted)")]
    Revoked,
}

/// The name the authority's key is kept under (in `deployment_secrets`,
/// as the hex of its 32-byte seed, sealed): every host of a deployment
/// signs and verifies with the same authority.
pub(crate) const SHARED_KEY_NAME: &str = "certificate-authority";

/// The key an older home kept as a plaintext file, as hex, if that file is
/// still there (the kernel moves it into the state database, sealed, and
/// then removes it). Never creates one.
pub(crate) fn legacy_key_hex(home: &Home) -> anyhow::Result<Option<String>> {
    Ok(stored_seed(&key_path(home))?.map(hex::encode))
}

/// Remove an older home's plaintext key file once its key is kept sealed
/// in the state database.
pub(crate) fn forget_legacy_key(home: &Home) -> anyhow::Result<()> {
    let path = key_path(home);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot remove the certificate authority's plaintext key file {} (its key is now kept sealed in the state database); remove it by hand",
                path.display()
            )
        }),
    }
}

/// Where an older home kept its authority's key.
pub(crate) fn key_path(home: &Home) -> PathBuf {
    home.root().join("ca").join("ca.key")
}

/// The 32-byte seed at `path`, or `None` when there is none; a file of
/// another size is damaged and refused, never replaced.
fn stored_seed(path: &PathBuf) -> anyhow::Result<Option<[u8; 32]>> {
    match std::fs::read(path) {
        Ok(bytes) => bytes.as_slice().try_into().map(Some).map_err(|_| {
            anyhow::anyhow!(
                "the certificate authority key {} is damaged (expected 32 bytes); restore it from a backup, or remove it to start a new authority (outstanding certificates then stop working)",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The deployment's certificate authority.
pub struct Authority {
    key: SigningKey,
    tenant: String,
}

impl Authority {
    /// The authority whose key's seed is `hex` (the deployment keeps it
    /// under [`SHARED_KEY_NAME`]).
    pub(crate) fn from_seed_hex(hex: &str) -> anyhow::Result<Authority> {
        let seed: [u8; 32] = hex::decode(hex)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| anyhow::anyhow!("the deployment's certificate authority key is damaged (expected 32 bytes of hex); restore it from a backup"))?;
        Ok(Authority::from_key(SigningKey::from_bytes(&seed)))
    }

    /// A fresh authority that is not any deployment's (for tests of
    /// foreign certificates).
    pub fn ephemeral() -> anyhow::Result<Authority> {
        Ok(Authority::from_key(SigningKey::from_bytes(&seed()?)))
    }

    fn from_key(key: SigningKey) -> Authority {
        let fingerprint = Sha256::digest(key.verifying_key().as_bytes());
        Authority {
            tenant: format!("tenant-{}", hex::encode(&fingerprint[..8])),
            key,
        }
    }

    /// This deployment's tenant name, bound into every certificate it issues.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Sign `claims` (whose tenant must be this authority's).
    pub fn issue(&self, claims: &Claims) -> anyhow::Result<String> {
        let body = serde_json::to_vec(claims)?;
        let signature = self.key.sign(&body);
        Ok(format!(
            "{}.{}",
            B64.encode(&body),
            B64.encode(signature.to_bytes())
        ))
    }

    /// Check that `token` is a certificate this authority signed, for
    /// `run` and `step`, unexpired at `now`. Revocation is the caller's
    /// (it is stored state).
    pub fn verify(
        &self,
        token: &str,
        run: i64,
        step: &str,
        now: i64,
    ) -> Result<Claims, CertRefusal> {
        let (body, sig) = token.split_once('.').ok_or(CertRefusal::Malformed)?;
        let body = B64.decode(body).map_err(|_| CertRefusal::Malformed)?;
        let sig = B64.decode(sig).map_err(|_| CertRefusal::Malformed)?;
        let sig: [u8; 64] = sig.try_into().map_err(|_| CertRefusal::Malformed)?;
        let verifying: VerifyingKey = self.key.verifying_key();
        verifying
            .verify(&body, &Signature::from_bytes(&sig))
            .map_err(|_| CertRefusal::Foreign)?;
        let claims: Claims = serde_json::from_slice(&body).map_err(|_| CertRefusal::Malformed)?;
        if claims.tenant != self.tenant {
            return Err(CertRefusal::Foreign);
        }
        check_binding(&claims, run, step, now)?;
        Ok(claims)
    }
}

/// The checks a signed certificate must pass on every use: this run, this
/// step, not expired at `now`.
pub fn check_binding(claims: &Claims, run: i64, step: &str, now: i64) -> Result<(), CertRefusal> {
    if claims.run != run {
        return Err(CertRefusal::WrongRun {
            got: claims.run,
            want: run,
        });
    }
    if claims.step != step {
        return Err(CertRefusal::WrongStep {
            got: claims.step.clone(),
            want: step.to_owned(),
        });
    }
    if now >= claims.expires_at {
        return Err(CertRefusal::Expired);
    }
    Ok(())
}

fn seed() -> anyhow::Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
    Ok(seed)
}

// ----- allowed-calls lists (SPEC G4) -----

/// One input's agreed values.
#[derive(Clone, Debug)]
pub enum Constraint {
    /// Exactly this value (`{"eq": V}`).
    Eq(Value),
    /// One of these values (`{"in": [..]}`).
    In(Vec<Value>),
    /// A number within `[min, max]`, both included (`{"range": [min, max]}`).
    Range(f64, f64),
    /// A string the anchored pattern matches in full (`{"pattern": "..."}`).
    Pattern(regex::Regex),
}

/// An input's constraint and whether it may be omitted.
#[derive(Clone, Debug)]
pub struct InputRule {
    /// The values agreed for the input.
    pub constraint: Constraint,
    /// The call may leave the input out.
    pub optional: bool,
}

/// One tool's entry: any input (read-only tools, written by the kernel
/// only), or exactly these inputs.
#[derive(Clone, Debug)]
pub enum ToolRule {
    /// Any input: added by the kernel for read-only tools only.
    AnyInput,
    /// Exactly these inputs, each with its rule; any other input is refused.
    Inputs(Vec<(String, InputRule)>),
}

impl PartialEq for InputRule {
    fn eq(&self, o: &Self) -> bool {
        self.optional == o.optional && self.constraint == o.constraint
    }
}

impl PartialEq for Constraint {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Constraint::Eq(a), Constraint::Eq(b)) => a == b,
            (Constraint::In(a), Constraint::In(b)) => a == b,
            (Constraint::Range(a, b), Constraint::Range(c, d)) => a == c && b == d,
            (Constraint::Pattern(a), Constraint::Pattern(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// Why a call does not fit a list: the input and the agreed range, never
/// the value given (SPEC G7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misfit {
    /// The input at fault (its name); `None` when the tool itself is not in
    /// the list.
    pub input: Option<String>,
    /// What failed and the agreed range.
    pub reason: String,
}

/// Parse a gadget's allowed-calls list. The gadget may not write "any
/// input" entries (only the kernel adds them, for read-only tools).
pub fn parse_allowed(json: &str) -> Result<Vec<(String, ToolRule)>, String> {
    // Stored with the request and shown to the approver: capped like args.
    if json.len() > crate::store::MAX_ARGS_BYTES {
        return Err(format!(
            "the allowed-calls list is {} bytes; at most {} are accepted",
            json.len(),
            crate::store::MAX_ARGS_BYTES
        ));
    }
    let v: Value = serde_json::from_str(json)
        .map_err(|e| format!("the allowed-calls list is not JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("the allowed-calls list must be an object of \"KEY:tool\" entries")?;
    let mut rules = Vec::new();
    for (tool, inputs) in obj {
        if !tool.contains(':') {
            return Err(format!("{tool:?} must name a tool as KEY:tool"));
        }
        let inputs = match inputs {
            Value::String(s) if s == "any" => {
                return Err(format!(
                    "{tool}: only the kernel may grant \"any input\" (it does so for read-only tools); list each input's agreed values"
                ));
            }
            Value::Object(m) => m,
            _ => return Err(format!("{tool}: the entry must be an object of inputs")),
        };
        let mut parsed = Vec::new();
        for (input, rule) in inputs {
            parsed.push((input.clone(), parse_rule(tool, input, rule)?));
        }
        rules.push((tool.clone(), ToolRule::Inputs(parsed)));
    }
    Ok(rules)
}

fn parse_rule(tool: &str, input: &str, rule: &Value) -> Result<InputRule, String> {
    let m = rule
        .as_object()
        .ok_or_else(|| format!("{tool}.{input}: a constraint must be an object"))?;
    let optional = match m.get("optional") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("{tool}.{input}: optional must be true or false")),
    };
    let kinds: Vec<&String> = m.keys().filter(|k| *k != "optional").collect();
    let [kind] = kinds.as_slice() else {
        return Err(format!(
            "{tool}.{input}: give exactly one of eq, in, range, pattern"
        ));
    };
    let value = &m[kind.as_str()];
    let constraint = match kind.as_str() {
        "eq" => Constraint::Eq(value.clone()),
        "in" => match value.as_array() {
            Some(a) if !a.is_empty() => Constraint::In(a.clone()),
            _ => return Err(format!("{tool}.{input}: in must be a non-empty array")),
        },
        "range" => match value.as_array().map(|a| a.as_slice()) {
            Some([lo, hi]) => match (lo.as_f64(), hi.as_f64()) {
                (Some(lo), Some(hi)) if lo <= hi => Constraint::Range(lo, hi),
                _ => return Err(format!("{tool}.{input}: range must be [min, max] numbers")),
            },
            _ => return Err(format!("{tool}.{input}: range must be [min, max]")),
        },
        "pattern" => {
            let p = value
                .as_str()
                .ok_or_else(|| format!("{tool}.{input}: pattern must be a string"))?;
            // Anchored: the whole value must match, not a part of it.
            let re = regex::Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| format!("{tool}.{input}: bad pattern: {e}"))?;
            Constraint::Pattern(re)
        }
        other => {
            return Err(format!(
                "{tool}.{input}: unknown constraint {other:?}; use eq, in, range or pattern"
            ));
        }
    };
    Ok(InputRule {
        constraint,
        optional,
    })
}

impl Constraint {
    /// The agreed range, for people and for denials.
    pub fn describe(&self) -> String {
        match self {
            Constraint::Eq(v) => format!("exactly {v}"),
            Constraint::In(vs) => format!(
                "one of [{}]",
                vs.iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Constraint::Range(lo, hi) => format!("a number from {lo} to {hi}"),
            Constraint::Pattern(re) => format!("text matching {}", pattern_source(re)),
        }
    }

    fn admits(&self, v: &Value) -> bool {
        match self {
            Constraint::Eq(want) => v == want,
            Constraint::In(set) => set.contains(v),
            Constraint::Range(lo, hi) => v.as_f64().is_some_and(|n| *lo <= n && n <= *hi),
            Constraint::Pattern(re) => v.as_str().is_some_and(|s| re.is_match(s)),
        }
    }
}

/// The pattern as its author wrote it (without the anchoring we add).
fn pattern_source(re: &regex::Regex) -> &str {
    let p = re.as_str();
    p.strip_prefix("^(?:")
        .and_then(|p| p.strip_suffix(")$"))
        .unwrap_or(p)
}

/// Does a call of `tool` with `args` fit `list` (SPEC G5)? The tool must be
/// listed; every input given must be named; every required input present;
/// every value inside its range.
pub fn fits(
    list: &[(String, ToolRule)],
    tool: &str,
    args: &Map<String, Value>,
) -> Result<(), Misfit> {
    let Some((_, rule)) = list.iter().find(|(t, _)| t == tool) else {
        return Err(Misfit {
            input: None,
            reason: format!("{tool} is not in the approved allowed-calls list"),
        });
    };
    let ToolRule::Inputs(inputs) = rule else {
        return Ok(());
    };
    for name in args.keys() {
        if !inputs.iter().any(|(n, _)| n == name) {
            return Err(Misfit {
                input: Some(name.clone()),
                reason: format!("input {name} is not in the approved list for {tool}"),
            });
        }
    }
    for (name, r) in inputs {
        match args.get(name) {
            None if r.optional => {}
            None => {
                return Err(Misfit {
                    input: Some(name.clone()),
                    reason: format!(
                        "required input {name} is missing (agreed: {})",
                        r.constraint.describe()
                    ),
                });
            }
            Some(v) if r.constraint.admits(v) => {}
            Some(_) => {
                return Err(Misfit {
                    input: Some(name.clone()),
                    reason: format!(
                        "input {name} is outside what was approved (agreed: {})",
                        r.constraint.describe()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The list as JSON, for storage and for the approver (kernel-added
/// entries appear as `"any"`).
pub fn allowed_to_json(list: &[(String, ToolRule)]) -> Value {
    let mut out = Map::new();
    for (tool, rule) in list {
        let v = match rule {
            ToolRule::AnyInput => Value::String("any".into()),
            ToolRule::Inputs(inputs) => {
                let mut m = Map::new();
                for (name, r) in inputs {
                    let mut c = Map::new();
                    match &r.constraint {
                        Constraint::Eq(v) => {
                            c.insert("eq".into(), v.clone());
                        }
                        Constraint::In(vs) => {
                            c.insert("in".into(), Value::Array(vs.clone()));
                        }
                        Constraint::Range(lo, hi) => {
                            c.insert("range".into(), serde_json::json!([lo, hi]));
                        }
                        Constraint::Pattern(re) => {
                            c.insert("pattern".into(), Value::String(pattern_source(re).into()));
                        }
                    }
                    if r.optional {
                        c.insert("optional".into(), Value::Bool(true));
                    }
                    m.insert(name.clone(), Value::Object(c));
                }
                Value::Object(m)
            }
        };
        out.insert(tool.clone(), v);
    }
    Value::Object(out)
}

/// Read a stored list back (kernel-written `"any"` entries included).
pub fn allowed_from_stored(json: &str) -> Result<Vec<(String, ToolRule)>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let obj = v.as_object().ok_or("not an object")?;
    let mut rules = Vec::new();
    for (tool, entry) in obj {
        if entry.as_str() == Some("any") {
            rules.push((tool.clone(), ToolRule::AnyInput));
            continue;
        }
        let single = serde_json::json!({ tool: entry }).to_string();
        rules.extend(parse_allowed(&single)?);
    }
    Ok(rules)
}

/// SHA-256 of a call's arguments: the audit keeps this, never the values.
pub fn args_digest(args: &str) -> String {
    hex::encode(Sha256::digest(args.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_certificate_verifies_only_here_for_its_run_and_step_until_it_expires() -> anyhow::Result<()>
    {
        let ca = Authority::ephemeral()?;
        let claims = Claims {
            tenant: ca.tenant().to_owned(),
            run: 7,
            step: "launch".into(),
            authority: "alice".into(),
            tools: vec!["CLOUD:launchInstance".into()],
            issued_at: 0,
            expires_at: 1_000,
            serial: "s1".into(),
        };
        let token = ca.issue(&claims)?;
        assert_eq!(ca.verify(&token, 7, "launch", 10), Ok(claims.clone()));
        assert_eq!(
            ca.verify(&token, 8, "launch", 10),
            Err(CertRefusal::WrongRun { got: 7, want: 8 })
        );
        assert!(matches!(
            ca.verify(&token, 7, "tag", 10),
            Err(CertRefusal::WrongStep { .. })
        ));
        assert_eq!(
            ca.verify(&token, 7, "launch", 1_000),
            Err(CertRefusal::Expired)
        );
        assert_eq!(
            Authority::ephemeral()?.verify(&token, 7, "launch", 10),
            Err(CertRefusal::Foreign)
        );
        // Widening the tool set breaks the signature.
        let (body, sig) = token.split_once('.').unwrap_or_default();
        let mut wide: Claims = serde_json::from_slice(&B64.decode(body)?)?;
        wide.tools.push("CLOUD:deleteEverything".into());
        let forged = format!("{}.{sig}", B64.encode(serde_json::to_vec(&wide)?));
        assert_eq!(
            ca.verify(&forged, 7, "launch", 10),
            Err(CertRefusal::Foreign)
        );
        assert_eq!(
            ca.verify("nonsense", 7, "launch", 10),
            Err(CertRefusal::Malformed)
        );
        Ok(())
    }

    #[test]
    fn lists_admit_exactly_what_was_agreed_and_denials_never_quote_the_value() {
        let list = parse_allowed(
            &json!({"CLOUD:launchInstance": {
                "type": {"in": ["small", "medium"]},
                "region": {"eq": "eu-1"},
                "count": {"range": [1, 3], "optional": true},
                "name": {"pattern": "web-[a-z]+", "optional": true}
            }})
            .to_string(),
        )
        .unwrap_or_default();
        let t = "CLOUD:launchInstance";
        assert_eq!(
            fits(&list, t, &args(json!({"type": "small", "region": "eu-1"}))),
            Ok(())
        );
        assert_eq!(
            fits(
                &list,
                t,
                &args(json!({"type": "small", "region": "eu-1", "count": 3, "name": "web-a"}))
            ),
            Ok(())
        );
        let e = fits(&list, t, &args(json!({"type": "xlarge", "region": "eu-1"}))).unwrap_err();
        assert_eq!(e.input.as_deref(), Some("type"));
        assert!(
            e.reason.contains("one of [small, medium]") && !e.reason.contains("xlarge"),
            "{}",
            e.reason
        );
        let e = fits(
            &list,
            t,
            &args(json!({"type": "small", "region": "eu-1", "userData": "x"})),
        )
        .unwrap_err();
        assert_eq!(e.input.as_deref(), Some("userData"));
        let e = fits(&list, t, &args(json!({"type": "small"}))).unwrap_err();
        assert!(
            e.reason.contains("required input region is missing"),
            "{}",
            e.reason
        );
        assert!(
            fits(
                &list,
                t,
                &args(json!({"type": "small", "region": "eu-1", "count": 4}))
            )
            .is_err()
        );
        assert!(
            fits(
                &list,
                t,
                &args(json!({"type": "small", "region": "eu-1", "name": "web-a; rm"}))
            )
            .is_err()
        );
        assert!(fits(&list, "CLOUD:tagInstance", &args(json!({}))).is_err());
        // Round trip through storage.
        let stored = allowed_to_json(&list).to_string();
        let back = allowed_from_stored(&stored).unwrap_or_default();
        assert_eq!(allowed_to_json(&back).to_string(), stored);
    }

    #[test]
    fn a_gadget_cannot_write_any_input_or_malformed_constraints() {
        assert!(
            parse_allowed(r#"{"CLOUD:describeInstances": "any"}"#)
                .unwrap_err()
                .contains("only the kernel")
        );
        assert!(parse_allowed(r#"{"launch": {}}"#).is_err());
        assert!(parse_allowed(r#"{"C:t": {"x": {"range": [3, 1]}}}"#).is_err());
        assert!(parse_allowed(r#"{"C:t": {"x": {"eq": 1, "in": [1]}}}"#).is_err());
        assert!(parse_allowed(r#"{"C:t": {"x": {"pattern": "("}}}"#).is_err());
        assert!(parse_allowed("[]").is_err());
    }
}
