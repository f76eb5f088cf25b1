//! Principals: who is acting (SPEC C5).
//!
//! Every call, action, observation and audit row records its principal and
//! the person it acts for. The person is what matters for policy: their
//! accounts are the ones a call runs under, and an action is sent with its
//! staging principal's own account, never another person's. The principal's
//! label is what people read in the ledger and the approval prompt.
//!
//! Owns the vocabulary and the one choice of credential
//! (`choose_credential`, a pure function of facts the store reads in the
//! caller's transaction); who may do what is `crate::access`.

use crate::seal::Sealed;
use serde::Serialize;

/// Who is acting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Principal {
    /// A person, directly (a `run` at the terminal, the web inbox).
    Person {
        /// The person.
        person: String,
    },
    /// The kernel's agent harness, running for the person who started it.
    Agent {
        /// The agent run.
        run: i64,
        /// Who started it, and whose accounts its turns use.
        person: String,
    },
    /// A workflow step, running for the run's initiator.
    Workflow {
        /// The workflow run.
        run: i64,
        /// The step running.
        step: String,
        /// The run's initiator.
        person: String,
    },
    /// A hook firing in a chat, for the person who enabled it.
    Hook {
        /// The hook that fired.
        hook: i64,
        /// The hook's chat.
        chat: String,
        /// Who enabled the hook.
        person: String,
    },
    /// An external agent (MCP client) in a chat, acting for a person.
    External {
        /// The chat `gatehouse mcp serve` offers.
        chat: String,
        /// The person the server was started as.
        person: String,
    },
}

impl Principal {
    /// A person acting directly.
    pub fn person(name: impl Into<String>) -> Principal {
        Principal::Person {
            person: name.into(),
        }
    }

    /// The person this principal acts for: whose accounts its calls use,
    /// and who answers for what it stages.
    pub fn acting_for(&self) -> &str {
        match self {
            Principal::Person { person }
            | Principal::Agent { person, .. }
            | Principal::Workflow { person, .. }
            | Principal::Hook { person, .. }
            | Principal::External { person, .. } => person,
        }
    }

    /// The hook whose turn this is, if any: what a hook's turns write to
    /// the ledger names it (SPEC L1).
    pub fn hook(&self) -> Option<i64> {
        match self {
            Principal::Hook { hook, .. } => Some(*hook),
            _ => None,
        }
    }

    /// How the ledger and the approval prompt name this principal.
    pub fn label(&self) -> String {
        match self {
            Principal::Person { person } => person.clone(),
            Principal::Agent { run, person } => format!("agent run {run} for {person}"),
            Principal::Workflow { run, step, person } => {
                format!("workflow run {run} step {step} for {person}")
            }
            Principal::Hook { hook, chat, person } => {
                format!("hook {hook} in {chat} for {person}")
            }
            Principal::External { chat, person } => {
                format!("external agent in {chat}, acting for {person}")
            }
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// The credential a call at a gatekeeper runs under (SPEC C4, C5).
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// One of the acting person's own accounts (`user/label`).
    Account {
        /// The account's name, `user/label`, as the ledger records it.
        id: String,
        /// Its secret as stored (sealed), opened by the kernel only to
        /// inject it; never shown or logged.
        secret: Sealed,
    },
    /// The gatekeeper's operator credential: only ever for the chat
    /// owner's own calls.
    Operator {
        /// The operator secret's name.
        name: String,
        /// Its value as stored (sealed), opened by the kernel only to
        /// inject it; never shown or logged.
        secret: Sealed,
    },
    /// No credential: the gatekeeper has none, and the person no account.
    Anonymous,
    /// No credential may be used, and the call may not be made: the
    /// person has no account there and the operator's is not theirs.
    Refused(String),
}

// Never print a secret, not even in a debug log.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({})", self.id())
    }
}

impl Credential {
    /// How the credential is named in facts and refusals; never the secret.
    pub fn id(&self) -> String {
        match self {
            Credential::Account { id, .. } => id.clone(),
            Credential::Operator { name, .. } => format!("operator:{name}"),
            Credential::Anonymous => "none".into(),
            Credential::Refused(_) => "refused".into(),
        }
    }

    /// The account recorded with an observation (`user/label`); `None` for
    /// the operator's own credential or none.
    pub fn account(&self) -> Option<String> {
        match self {
            Credential::Account { id, .. } => Some(id.clone()),
            _ => None,
        }
    }

    /// The secret to inject, if any, as stored (sealed): the kernel
    /// opens it with the deployment's key.
    pub fn secret(&self) -> Option<&Sealed> {
        match self {
            Credential::Account { secret, .. } | Credential::Operator { secret, .. } => {
                Some(secret)
            }
            Credential::Anonymous | Credential::Refused(_) => None,
        }
    }
}

/// What [`choose_credential`] decides from.
pub(crate) struct CredentialFacts<'a> {
    pub person: &'a str,
    pub gatekeeper: &'a str,
    /// The person owns the chat.
    pub is_owner: bool,
    /// The account the person chose for this gatekeeper when they opened
    /// the chat (collaborators), if any.
    pub chosen: Option<&'a str>,
    /// The person's account there (the chosen one, else their default):
    /// `(id, secret)`.
    pub own: Option<(String, Sealed)>,
    /// The gatekeeper's operator credential: its name, and its value if set.
    pub operator: Option<(&'a str, Option<Sealed>)>,
}

/// Which credential a call runs under: the person's own account; else, for
/// the chat's owner only, the gatekeeper's operator credential; else none
/// if the gatekeeper needs none; else the call is refused, so that a
/// collaborator's write can never go out under the owner's credential.
pub(crate) fn choose_credential(f: CredentialFacts<'_>) -> Credential {
    if let Some((id, secret)) = f.own {
        return Credential::Account { id, secret };
    }
    let (person, g) = (f.person, f.gatekeeper);
    if let Some(label) = f.chosen {
        return Credential::Refused(format!(
            "{person}'s account {label:?} at {g} is gone; open the chat again to choose another (`gatehouse open CHAT --account {g}=LABEL`)"
        ));
    }
    match f.operator {
        None => Credential::Anonymous,
        Some((name, Some(secret))) if f.is_owner => Credential::Operator {
            name: name.to_owned(),
            secret,
        },
        Some((name, None)) if f.is_owner => Credential::Refused(format!(
            "the secret {name:?} of gatekeeper {g:?} is not set; `gatehouse secret set {name}`"
        )),
        Some(_) => Credential::Refused(format!(
            "{person} has no account at {g}, and its operator credential serves only the chat owner's own calls; connect one with `gatehouse account connect {person} {g} --name LABEL`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_principal_names_the_person_it_acts_for() {
        let all = [
            Principal::person("alice"),
            Principal::Agent {
                run: 4,
                person: "alice".into(),
            },
            Principal::Workflow {
                run: 3,
                step: "tag".into(),
                person: "alice".into(),
            },
            Principal::Hook {
                hook: 12,
                chat: "work".into(),
                person: "alice".into(),
            },
            Principal::External {
                chat: "work".into(),
                person: "alice".into(),
            },
        ];
        for p in all {
            assert_eq!(p.acting_for(), "alice");
            assert!(p.label().contains("alice"), "{}", p.label());
        }
    }

    fn facts<'a>(is_owner: bool, own: bool, operator: bool) -> CredentialFacts<'a> {
        CredentialFacts {
            person: "bob",
            gatekeeper: "issues",
            is_owner,
            chosen: None,
            own: own.then(|| {
                let kept = Sealed::kept("secrets", "account/bob/issues/main", "b-secret".into());
                ("bob/main".to_owned(), kept)
            }),
            operator: operator.then(|| {
                let kept = Sealed::kept("secrets", "tracker-token", "op-secret".into());
                ("tracker-token", Some(kept))
            }),
        }
    }

    #[test]
    fn the_operator_credential_serves_only_the_owner() {
        assert_eq!(choose_credential(facts(false, true, true)).id(), "bob/main");
        assert_eq!(
            choose_credential(facts(true, false, true)).id(),
            "operator:tracker-token"
        );
        assert!(matches!(
            choose_credential(facts(false, false, true)),
            Credential::Refused(_)
        ));
        assert_eq!(choose_credential(facts(false, false, false)).id(), "none");
        let shown = format!("{:?}", choose_credential(facts(true, false, true)));
        assert!(!shown.contains("op-secret"), "{shown}");
    }
}
