//! Gadget storage: a small key-value store per gadget per chat (the
//! `kernel.store-*` calls), and the rule that keeps derived data with the
//! sources it was derived from.
//!
//! The rule (docs/gadget-storage.md; rule O5 in docs/rules.md):
//! - every call re-checks the person's standing in the chat, as every other
//!   call does (`access`: one who may not act there is told what a missing
//!   chat would tell);
//! - a value records the chat's observation set as it is when the value is
//!   written: whatever the gadget wrote, it may have derived from any of it;
//! - a value is handed only to a person who may see every source in its
//!   set: the owner; or a collaborator, never for a set with owner-only
//!   data, and otherwise only where their stored observer bindings (the
//!   re-verification of `sharing`, made again before each of their turns)
//!   cover each source. To anyone else the value does not exist (hidden,
//!   not refused: a refusal would tell that a value is there);
//! - handing a value over observes its set again, through the one record
//!   of reads (`observations`' store path): a set with owner-only data
//!   latches the chat exactly as reading the source did, and a value whose
//!   set could not be recorded is withheld.
//!
//! Owns the limits, the shape of a value's observation set and the rule.
//! May not call gatekeepers, decide standing itself (`access` does) or
//! write anything but through the store's `gadget_storage` and observation
//! methods.

use crate::access::Refusal;
use crate::kernel::{CallError, Kernel, Turn};
use crate::store::{NewObservation, Observed, Observer, Source, Sources, StoragePut, Trust};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The keys one gadget may hold in one chat.
pub const MAX_KEYS: i64 = 256;

/// One source a value was derived from, as the ledger recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Derived {
    pub id: String,
    pub restricted: bool,
    pub title: String,
}

/// A value's observation set: per gatekeeper, each source once. Kept as
/// JSON beside the value, an array of [`Group`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<Group>", into = "Vec<Group>")]
pub(crate) struct ObservationSet(BTreeMap<String, Vec<Derived>>);

/// One gatekeeper's sources, as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Group {
    gatekeeper: String,
    sources: Vec<Derived>,
}

impl From<Vec<Group>> for ObservationSet {
    fn from(groups: Vec<Group>) -> ObservationSet {
        let mut set = ObservationSet::default();
        for g in groups {
            for d in g.sources {
                set.add(&g.gatekeeper, d.id, d.restricted, d.title);
            }
        }
        set
    }
}

impl From<ObservationSet> for Vec<Group> {
    fn from(set: ObservationSet) -> Vec<Group> {
        set.0
            .into_iter()
            .map(|(gatekeeper, sources)| Group {
                gatekeeper,
                sources,
            })
            .collect()
    }
}

impl ObservationSet {
    /// The chat's set from its ledger rows (gatekeeper, sources JSON), read
    /// the way a collaborator's open reads them (`sharing`).
    pub(crate) fn of_ledger(rows: Vec<(String, String)>) -> ObservationSet {
        let mut set = ObservationSet::default();
        for (gatekeeper, sources) in rows {
            for s in crate::sharing::parse_sources(&sources) {
                set.add(&gatekeeper, s.id, s.restricted, s.title);
            }
        }
        set
    }

    fn add(&mut self, gatekeeper: &str, id: String, restricted: bool, title: String) {
        let list = self.0.entry(gatekeeper.to_owned()).or_default();
        match list.iter_mut().find(|d| d.id == id) {
            // Owner-only once is owner-only for good.
            Some(d) => d.restricted |= restricted,
            None => list.push(Derived {
                id,
                restricted,
                title,
            }),
        }
    }

    /// The union of two sets.
    pub(crate) fn join(&mut self, other: &ObservationSet) {
        for (g, list) in &other.0 {
            for d in list {
                self.add(g, d.id.clone(), d.restricted, d.title.clone());
            }
        }
    }

    /// Whether any source is owner-only.
    pub(crate) fn restricted(&self) -> bool {
        self.0.values().flatten().any(|d| d.restricted)
    }

    fn to_json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string(self)?)
    }

    /// A stored set. One that does not parse is never read as empty:
    /// that would hand the value to anyone.
    fn parse(json: &str) -> anyhow::Result<ObservationSet> {
        Ok(serde_json::from_str(json)?)
    }
}

/// Who reads, as the rule needs them.
pub(crate) enum Reader<'a> {
    /// The chat's owner: sees all of their chat, lockdown or not.
    Owner,
    /// Anyone else who may act in the chat, with the observer bindings
    /// their last re-verification stored for them in this chat.
    Other { bindings: Vec<&'a Observer> },
}

/// The rule: may `reader` be handed a value derived from `set`?
pub(crate) fn readable(set: &ObservationSet, reader: &Reader<'_>) -> bool {
    match reader {
        Reader::Owner => true,
        // Owner-only data is never handed to anyone but the owner (O3).
        Reader::Other { .. } if set.restricted() => false,
        Reader::Other { bindings } => set.0.iter().all(|(gatekeeper, sources)| {
            let bound = bindings.iter().find(|o| &o.gatekeeper == gatekeeper);
            crate::sharing::binding_covers(bound.copied(), sources.iter().map(|d| d.id.as_str()))
        }),
    }
}

/// A key the kernel keeps: 1 to [`MAX_KEY_BYTES`] bytes, no control
/// characters (keys are listed one per line).
fn check_key(key: &str) -> Result<(), CallError> {
    if key.is_empty() {
        return Err(CallError::InvalidArgs(
            "a storage key may not be empty".into(),
        ));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(CallError::InvalidArgs(format!(
            "a storage key is at most {MAX_KEY_BYTES} bytes; this one is {}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(CallError::InvalidArgs(
            "a storage key may not contain control characters".into(),
        ));
    }
    Ok(())
}

impl Kernel {
    /// Who the turn's person is to the rule; `Err` when they may not act in
    /// the chat (any more), refused as a missing chat is.
    async fn reader(&self, turn: &Turn) -> anyhow::Result<Result<ReaderFacts, CallError>> {
        let Some(gadget) = turn.gadget.clone() else {
            return Ok(Err(CallError::Refused(
                "gadget storage belongs to a gadget, and this turn runs none".into(),
            )));
        };
        let (chat, person) = (turn.chat.clone(), turn.person().to_owned());
        let (access, observers) = self
            .store()
            .run(move |s| Ok((s.access(&chat, &person)?, s.observers(&chat)?)))
            .await?;
        if !access.may_act() {
            return Ok(Err(CallError::Refused(
                Refusal::NoSuchChat(turn.chat.clone()).to_string(),
            )));
        }
        let person = turn.person();
        let observers = if access.is_owner() {
            None
        } else {
            Some(observers.into_iter().filter(|o| o.user == person).collect())
        };
        Ok(Ok(ReaderFacts { gadget, observers }))
    }

    /// `kernel.store-get`.
    pub(crate) async fn store_get(
        &self,
        turn: &Turn,
        key: &str,
    ) -> anyhow::Result<Result<Option<String>, CallError>> {
        if let Err(e) = check_key(key) {
            return Ok(Err(e));
        }
        let facts = match self.reader(turn).await? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let (chat, gadget, k) = (turn.chat.clone(), facts.gadget.clone(), key.to_owned());
        let stored = self
            .store()
            .run(move |s| s.storage_get(&chat, &gadget, &k))
            .await?;
        let Some(stored) = stored else {
            return Ok(Ok(None));
        };
        let set = ObservationSet::parse(&stored.observed)?;
        if !readable(&set, &facts.reader()) {
            return Ok(Ok(None));
        }
        if let Err(e) = self.observe_set(turn, &set, stored.value.len()).await? {
            return Ok(Err(e));
        }
        Ok(Ok(Some(stored.value)))
    }

    /// `kernel.store-keys`: the keys of values the person may read; their
    /// sets are observed, since a key is data the gadget wrote too.
    pub(crate) async fn store_keys(
        &self,
        turn: &Turn,
    ) -> anyhow::Result<Result<Vec<String>, CallError>> {
        let facts = match self.reader(turn).await? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let (chat, gadget) = (turn.chat.clone(), facts.gadget.clone());
        let rows = self
            .store()
            .run(move |s| s.storage_keys(&chat, &gadget))
            .await?;
        let reader = facts.reader();
        let mut union = ObservationSet::default();
        let mut keys = Vec::new();
        for (key, observed) in rows {
            let set = ObservationSet::parse(&observed)?;
            if readable(&set, &reader) {
                union.join(&set);
                keys.push(key);
            }
        }
        let bytes = keys.iter().map(String::len).sum();
        if let Err(e) = self.observe_set(turn, &union, bytes).await? {
            return Ok(Err(e));
        }
        Ok(Ok(keys))
    }

    /// `kernel.store-put`: the value, with the chat's observation set now.
    pub(crate) async fn store_put(
        &self,
        turn: &Turn,
        key: &str,
        value: String,
    ) -> anyhow::Result<Result<(), CallError>> {
        if let Err(e) = check_key(key) {
            return Ok(Err(e));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Ok(Err(CallError::InvalidArgs(format!(
                "a stored value is at most {MAX_VALUE_BYTES} bytes; this one is {}; nothing was stored",
                value.len()
            ))));
        }
        let facts = match self.reader(turn).await? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        // The set is read after every earlier call of this turn was
        // recorded (a turn's calls are sequential), so it covers all this
        // gadget instance could have learnt.
        let chat = turn.chat.clone();
        let rows = self.store().run(move |s| s.observed_sources(&chat)).await?;
        let observed = ObservationSet::of_ledger(rows).to_json()?;
        let (chat, gadget, key_, by) = (
            turn.chat.clone(),
            facts.gadget,
            key.to_owned(),
            turn.principal.label(),
        );
        let written = self
            .store()
            .run(move |s| {
                s.storage_put(&StoragePut {
                    chat: &chat,
                    gadget: &gadget,
                    key: &key_,
                    value: &value,
                    observed: &observed,
                    by: &by,
                    max_keys: MAX_KEYS,
                })
            })
            .await?;
        Ok(written.map_err(|full| {
            CallError::Refused(format!(
                "this gadget already keeps {} keys in this chat, the most it may; delete one before storing {key:?}",
                full.held
            ))
        }))
    }

    /// `kernel.store-delete`: silent whether or not the key was there (or
    /// readable to the person), so that it tells nothing.
    pub(crate) async fn store_delete(
        &self,
        turn: &Turn,
        key: &str,
    ) -> anyhow::Result<Result<(), CallError>> {
        if let Err(e) = check_key(key) {
            return Ok(Err(e));
        }
        let facts = match self.reader(turn).await? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let (chat, gadget, key) = (turn.chat.clone(), facts.gadget, key.to_owned());
        self.store()
            .run(move |s| s.storage_delete(&chat, &gadget, &key))
            .await?;
        Ok(Ok(()))
    }

    /// Record that `set` was handed to the turn's gadget, one observation
    /// per gatekeeper, through the store path every read takes (so an
    /// owner-only source latches the chat, and is withheld in a shared
    /// one). `Err`: withhold the value.
    async fn observe_set(
        &self,
        turn: &Turn,
        set: &ObservationSet,
        bytes: usize,
    ) -> anyhow::Result<Result<(), CallError>> {
        for (gatekeeper, derived) in &set.0 {
            let name = gatekeeper.clone();
            let trust = self
                .store()
                .run(move |s| Ok(s.gatekeeper(&name)?.map(|g| g.trust)))
                .await?
                .unwrap_or(Trust::Byo);
            let list: Vec<Source<'_>> = derived
                .iter()
                .map(|d| Source {
                    id: &d.id,
                    restricted: d.restricted,
                    title: &d.title,
                })
                .collect();
            let o = NewObservation {
                chat: turn.chat.clone(),
                principal: turn.principal.clone(),
                gadget: turn.gadget.clone(),
                gatekeeper: gatekeeper.clone(),
                tool: "store-get".into(),
                classified_by: "default",
                trust,
                sources: Sources::of(&list),
                account: None,
                action_ref: None,
                result_bytes: bytes,
                audit: None,
            };
            match self.store().observe_now(o).await {
                Ok(Observed::Recorded(_)) => {}
                Ok(Observed::RestrictedInSharedChat) => {
                    return Ok(Err(CallError::Refused(format!(
                        "chat {:?} is shared, and this stored value was derived from owner-only data, which is never handed over in a shared chat; it was withheld",
                        turn.chat
                    ))));
                }
                Err(e) => {
                    return Ok(Err(CallError::Refused(format!(
                        "reading the stored value could not be recorded, so it is withheld: {e:#}"
                    ))));
                }
            }
        }
        Ok(Ok(()))
    }
}

/// What the rule needs of the turn's person, read once per call.
struct ReaderFacts {
    gadget: String,
    /// `None` for the owner; else the person's observer bindings here.
    observers: Option<Vec<Observer>>,
}

impl ReaderFacts {
    fn reader(&self) -> Reader<'_> {
        match &self.observers {
            None => Reader::Owner,
            Some(list) => Reader::Other {
                bindings: list.iter().collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(id: &str, restricted: bool) -> String {
        format!(r#"[{{"id":"{id}","restricted":{restricted},"title":"t {id}"}}]"#)
    }

    fn bound(gatekeeper: &str, scope: Option<&[&str]>) -> Observer {
        Observer {
            chat: "plans".into(),
            user: "bo".into(),
            gatekeeper: gatekeeper.into(),
            account: Some("bo/main".into()),
            scope: scope.map(|s| s.iter().map(|x| (*x).to_owned()).collect()),
        }
    }

    #[test]
    fn a_set_keeps_each_source_once_and_owner_only_for_good() {
        let set = ObservationSet::of_ledger(vec![
            ("db".into(), source("table:a", false)),
            ("db".into(), source("table:a", true)),
            ("mail".into(), source("inbox", false)),
        ]);
        assert!(set.restricted());
        assert_eq!(set.0["db"].len(), 1);
        let json = set.to_json().expect("json");
        assert!(json.starts_with('['), "stored as an array: {json}");
        let again = ObservationSet::parse(&json).expect("parses");
        assert_eq!(again, set);
        assert!(
            ObservationSet::parse("not json").is_err(),
            "a set that does not parse is never read as empty"
        );
    }

    #[test]
    fn the_owner_reads_everything() {
        let set = ObservationSet::of_ledger(vec![("db".into(), source("payroll", true))]);
        assert!(readable(&set, &Reader::Owner));
    }

    #[test]
    fn data_derived_from_owner_only_data_is_the_owner_s_alone() {
        let set = ObservationSet::of_ledger(vec![("db".into(), source("payroll", true))]);
        let b = bound("db", None);
        assert!(!readable(&set, &Reader::Other { bindings: vec![&b] }));
    }

    #[test]
    fn another_reader_needs_a_binding_covering_every_source() {
        let set = ObservationSet::of_ledger(vec![
            ("db".into(), source("table:a", false)),
            ("mail".into(), source("inbox", false)),
        ]);
        let (db, mail) = (bound("db", None), bound("mail", None));
        assert!(readable(
            &set,
            &Reader::Other {
                bindings: vec![&db, &mail]
            }
        ));
        assert!(
            !readable(
                &set,
                &Reader::Other {
                    bindings: vec![&db]
                }
            ),
            "never verified at mail: hidden"
        );
        let narrow = bound("db", Some(&["table:b"]));
        assert!(
            !readable(
                &set,
                &Reader::Other {
                    bindings: vec![&narrow, &mail]
                }
            ),
            "a scope without the source: hidden"
        );
        let wide = bound("db", Some(&["table:a", "table:b"]));
        assert!(readable(
            &set,
            &Reader::Other {
                bindings: vec![&wide, &mail]
            }
        ));
        assert!(
            readable(
                &ObservationSet::default(),
                &Reader::Other { bindings: vec![] }
            ),
            "a value derived from nothing is anyone's who may act here"
        );
    }

    #[test]
    fn keys_are_checked_in_one_line() {
        assert!(check_key("note").is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES)).is_ok());
        for bad in [String::new(), "k".repeat(MAX_KEY_BYTES + 1), "a\nb".into()] {
            let e = check_key(&bad).expect_err("refused");
            assert!(matches!(e, CallError::InvalidArgs(_)));
            assert!(!e.to_string().contains('\n'));
        }
    }
}
