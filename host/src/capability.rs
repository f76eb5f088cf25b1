//! Capability handles: the authority a call into the kernel acts with.
//!
//! Owns the handles a surface (the CLI, the web server, `mcp serve`, the
//! console, embedders, tests) must hold before it may reach a person's
//! chats or the deployment's set-up: [`Person`], acting as one person, and
//! [`Operator`], administering the deployment. A gadget's turn already
//! carries its authority in its [`crate::Turn`] (built by the kernel, or by
//! [`Person::external_turn`] for an external agent), which every call of
//! the call path takes.
//!
//! The handles only borrow the kernel and say who acts; the operations are
//! `impl Person` / `impl Operator` blocks beside the state they touch
//! (`crate::inbox`, `crate::sharing`, `crate::overseer`, ...). They hold no
//! policy of their own: who may do what in a chat stays `crate::access`,
//! asked through the store as before, so a handle is the *claim* of an
//! authority, checked where it always was. Building one verifies nothing:
//! the surface that builds it has verified who is there (a session, a
//! sign-in, the operator at the terminal), and the handle makes that claim
//! visible in the type of every call. This module may not reach the store
//! or the runtime itself.

use crate::kernel::Kernel;

/// One person acting: their chats, inbox, decisions, shares, accounts,
/// devices, rules, hooks and workflow requests. Built with
/// [`Kernel::person`] by a surface that knows who is there.
#[derive(Clone, Copy)]
pub struct Person<'a> {
    pub(crate) kernel: &'a Kernel,
    pub(crate) name: &'a str,
}

impl<'a> Person<'a> {
    /// Who acts.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The kernel this person acts in.
    pub fn kernel(&self) -> &'a Kernel {
        self.kernel
    }
}

impl std::fmt::Debug for Person<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Person").field(&self.name).finish()
    }
}

/// The deployment's operator: installs gadgets and gatekeepers, keeps
/// secrets and the sealing key, adds people, binds identities, moves the
/// database, and runs turns as a chat's owner from the terminal. Built
/// with [`Kernel::operator`] by a surface only the operator reaches (the
/// command line on the host, the operator's console).
#[derive(Clone, Copy)]
pub struct Operator<'a> {
    pub(crate) kernel: &'a Kernel,
}

impl<'a> Operator<'a> {
    /// The kernel being administered.
    pub fn kernel(&self) -> &'a Kernel {
        self.kernel
    }
}

impl std::fmt::Debug for Operator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Operator")
    }
}

impl Kernel {
    /// Act as `name`. The caller vouches that `name` is who is there (a
    /// verified session, the `--as` of the operator's own terminal);
    /// every operation then checks what that person may do.
    pub fn person<'a>(&'a self, name: &'a str) -> Person<'a> {
        Person { kernel: self, name }
    }

    /// Act as the deployment's operator.
    pub fn operator(&self) -> Operator<'_> {
        Operator { kernel: self }
    }
}
