//! Who may do what (SPEC W): the one authorization rule.
//!
//! For a person and a chat, [`Access`] answers: may see (the inbox, the
//! ledger, observations, prompts), may decide, may share, may enable a rule.
//! Every surface (CLI, web, MCP, hooks, workflows) asks the kernel, and the
//! kernel asks this module; none decides it itself. The claim transaction
//! asks it again, inside the transaction, so that a decision can never be
//! taken by someone who lost the right a moment before.
//!
//! The rule, in full (docs/security-model.md has it as a table):
//! - the owner sees, decides, shares, enables rules and manages hooks;
//! - a collaborator sees nothing until they have passed re-verification
//!   with their own accounts (SPEC S2), and loses it when a check fails or
//!   they are removed; once verified they see, and decide (and enable rules
//!   and manage hooks in that one chat) only if the owner granted it; they
//!   never share;
//! - a workflow run's approvers (named by its initiator) see and decide the
//!   run's approval requests and nothing else of its chat;
//! - a locked-down chat (O3) is the owner's alone;
//! - anyone else gets exactly the answer a chat that does not exist gets.
//!
//! Owns the rule only: what a person's standing is comes from the store
//! (`store::sharing::standing`), and this module may not write anything.

use serde::Serialize;

/// A person's relation to a chat, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "standing", rename_all = "kebab-case")]
pub enum Standing {
    /// Created the chat: sees, decides and shares it, lockdown or not.
    Owner,
    /// Invited by the owner (`gatehouse share`); what they may do depends
    /// on re-verification and on what the owner granted.
    Collaborator {
        /// Passed re-verification (S2) and nothing failed since.
        verified: bool,
        /// The owner granted them the right to decide.
        may_decide: bool,
    },
    /// Named by a workflow run's initiator to decide the run's approval
    /// requests (SPEC G2): sees the requests and the run's audit (argument
    /// digests only), decides them, and sees nothing else of the chat.
    Approver,
    /// Neither owner nor collaborator (or no such chat).
    Stranger,
}

/// What a person may do in a chat. Built only by [`Access::of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Access {
    standing: Standing,
    latched: bool,
}

impl Access {
    /// Apply the rule to a person's standing in a chat and the chat's latch.
    pub fn of(standing: Standing, latched: bool) -> Access {
        Access { standing, latched }
    }

    /// Nobody: the answer for a chat that does not exist.
    pub fn none() -> Access {
        Access::of(Standing::Stranger, false)
    }

    pub(crate) fn standing(&self) -> Standing {
        self.standing
    }

    /// Whether the chat was locked down (O3) when this was read: the latch
    /// is read with the standing, so a caller that asked for both has it.
    pub(crate) fn latched(&self) -> bool {
        self.latched
    }

    /// See the chat's inbox, ledger, observations and approval prompts.
    pub fn may_see(&self) -> bool {
        match self.standing {
            Standing::Owner => true,
            Standing::Collaborator { verified, .. } => verified && !self.latched,
            Standing::Approver | Standing::Stranger => false,
        }
    }

    /// Act in the chat: run a gadget's turn there (or an external agent's,
    /// or a hook's or workflow step's for this person), make its calls, and
    /// have what they staged sent with this person's accounts. The owner,
    /// and a collaborator exactly while they may see it (verified, the
    /// chat not latched). Asked at every call and every claim, not once a
    /// turn: standing lost mid-turn stops the turn's next call.
    pub fn may_act(&self) -> bool {
        self.may_see()
    }

    /// Approve or reject the chat's actions and workflow requests.
    pub fn may_decide(&self) -> bool {
        match self.standing {
            Standing::Owner => true,
            Standing::Collaborator { may_decide, .. } => may_decide && self.may_see(),
            Standing::Approver | Standing::Stranger => false,
        }
    }

    /// See a workflow run's approval requests, their allowed-calls lists
    /// and its audit: whoever sees the chat, and its approvers.
    pub fn may_see_requests(&self) -> bool {
        self.may_see() || (self.standing == Standing::Approver && !self.latched)
    }

    /// Approve, reject or withdraw a workflow run's approval requests:
    /// whoever decides in the chat, and its approvers.
    pub fn may_decide_requests(&self) -> bool {
        self.may_decide() || (self.standing == Standing::Approver && !self.latched)
    }

    /// Share the chat, create links, remove collaborators, grant deciding.
    pub fn may_share(&self) -> bool {
        self.standing == Standing::Owner
    }

    /// Enable an auto-approval rule that applies in this chat: whoever may
    /// decide there (key two is a person's decision made in advance).
    pub fn may_enable_rule(&self) -> bool {
        self.may_decide()
    }

    /// Bind a trigger to a gadget in the chat (add a hook), enable or
    /// disable one (SPEC H1): whoever may decide there. An enabled hook
    /// starts turns for the person who enabled it without them at a
    /// terminal, so it is a decision made in advance, like a rule.
    pub fn may_manage_hooks(&self) -> bool {
        self.may_decide()
    }

    /// Change the chat itself (introduce services): the owner only.
    pub fn may_manage(&self) -> bool {
        self.standing == Standing::Owner
    }

    /// Whether the person is the chat's owner.
    pub fn is_owner(&self) -> bool {
        self.standing == Standing::Owner
    }
}

/// What a surface asks for, to word a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// See the chat's inbox, ledger, observations and prompts.
    See,
    /// Approve or reject the chat's actions.
    Decide,
    /// Share the chat or change who may decide in it.
    Share,
    /// Enable an auto-approval rule that applies in the chat (key two).
    EnableRule,
    /// Add, enable or disable a hook in the chat.
    Hooks,
    /// Introduce services into the chat.
    Manage,
    /// See a workflow run's approval requests and its audit.
    SeeRequests,
    /// Approve, reject or withdraw a workflow run's approval requests.
    DecideRequests,
}

impl Access {
    /// Check one need. A person who may not even see the chat is told
    /// exactly what they would be told if it did not exist (W2); one who
    /// sees it is told what they lack.
    pub fn require(&self, need: Need, chat: &str, person: &str) -> Result<(), Refusal> {
        let ok = match need {
            Need::See => self.may_see(),
            Need::Decide => self.may_decide(),
            Need::Share => self.may_share(),
            Need::EnableRule => self.may_enable_rule(),
            Need::Hooks => self.may_manage_hooks(),
            Need::Manage => self.may_manage(),
            Need::SeeRequests => self.may_see_requests(),
            Need::DecideRequests => self.may_decide_requests(),
        };
        if ok {
            return Ok(());
        }
        if !self.may_see_requests() {
            return Err(Refusal::NoSuchChat(chat.to_owned()));
        }
        Err(match need {
            Need::See | Need::SeeRequests => Refusal::NoSuchChat(chat.to_owned()),
            Need::Decide | Need::EnableRule | Need::Hooks | Need::DecideRequests => {
                Refusal::MayNotDecide {
                    chat: chat.to_owned(),
                    person: person.to_owned(),
                }
            }
            Need::Share | Need::Manage => Refusal::OwnerOnly {
                chat: chat.to_owned(),
                person: person.to_owned(),
            },
        })
    }
}

/// Why a person was refused. `NoSuchChat` is worded exactly as for a chat
/// that does not exist: a person may not learn a chat exists by asking.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The person may not see the chat (or it does not exist: the two are
    /// told apart by nobody but the store). Carries the chat's name as asked.
    #[error("no chat named {0:?}; `gatehouse chats` lists the chats you may see")]
    NoSuchChat(String),
    /// The person sees the chat but the owner has not let them decide.
    #[error(
        "{person} may see chat {chat:?} but not decide in it; its owner can grant it with `gatehouse share {chat} --with {person} --may-decide`"
    )]
    MayNotDecide {
        /// The chat's name.
        chat: String,
        /// The refused person.
        person: String,
    },
    /// Sharing, granting decisions and introducing services are the
    /// owner's alone, even for a collaborator who may decide.
    #[error(
        "only the owner of chat {chat:?} may share it, change who may decide, or introduce services; {person} is a collaborator"
    )]
    OwnerOnly {
        /// The chat's name.
        chat: String,
        /// The refused person (a collaborator).
        person: String,
    },
    /// A collaborator's re-verification (SPEC S2) failed: their accounts
    /// may not see what the chat has read. Carries the sanitised line.
    #[error("{0}")]
    Unverified(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collaborator(verified: bool, may_decide: bool) -> Standing {
        Standing::Collaborator {
            verified,
            may_decide,
        }
    }

    #[test]
    fn the_table_of_who_may_do_what() {
        // (standing, latched) -> (see, decide, share, rule)
        let table = [
            (Standing::Owner, false, (true, true, true, true)),
            (Standing::Owner, true, (true, true, true, true)),
            (collaborator(true, true), false, (true, true, false, true)),
            (
                collaborator(true, false),
                false,
                (true, false, false, false),
            ),
            (
                collaborator(false, true),
                false,
                (false, false, false, false),
            ),
            (
                collaborator(false, false),
                false,
                (false, false, false, false),
            ),
            (collaborator(true, true), true, (false, false, false, false)),
            (Standing::Approver, false, (false, false, false, false)),
            (Standing::Stranger, false, (false, false, false, false)),
        ];
        for (standing, latched, want) in table {
            let a = Access::of(standing, latched);
            let got = (
                a.may_see(),
                a.may_decide(),
                a.may_share(),
                a.may_enable_rule(),
            );
            assert_eq!(got, want, "{standing:?} latched={latched}");
        }
        // Workflow requests: approvers see and decide them, and nothing
        // else; a viewer sees them but does not decide.
        let approver = Access::of(Standing::Approver, false);
        assert!(approver.may_see_requests() && approver.may_decide_requests());
        let viewer = Access::of(collaborator(true, false), false);
        assert!(viewer.may_see_requests() && !viewer.may_decide_requests());
        assert!(!Access::of(Standing::Approver, true).may_decide_requests());
        assert!(!Access::none().may_see_requests());
    }

    #[test]
    fn a_stranger_is_told_exactly_what_a_missing_chat_would_tell() {
        let stranger = Access::none().require(Need::Decide, "work", "mallory");
        let unverified =
            Access::of(collaborator(false, true), false).require(Need::See, "work", "bob");
        let missing = Refusal::NoSuchChat("work".into());
        assert_eq!(stranger, Err(missing.clone()));
        assert_eq!(unverified, Err(missing));
        let viewer = Access::of(collaborator(true, false), false);
        assert!(matches!(
            viewer.require(Need::Decide, "work", "bob"),
            Err(Refusal::MayNotDecide { .. })
        ));
    }
}
