//! The embedding seam: what a program that hosts Gatehouse's components
//! *without* the kernel may use, and all that benchmarks use to build their
//! baselines (a bare forwarding host: the same components, no policy).
//!
//! It exposes the component runtime (engine, limits, compiled-component
//! cache), the generated bindings of the `gadget`/`step` and `gatekeeper`
//! worlds, and a plain gatekeeper call. None of it reaches the kernel's
//! state: a host built from these pieces has no introductions, no
//! classification, no store and no gate — which is exactly what a baseline
//! must lack. Programs that want the guarantees use [`crate::Kernel`].

pub use crate::runtime::{Limits, Role, Runtime};

/// The walk admission runs before any parser that recurses reads a
/// component (SPEC X3): refuses nesting deeper than the runtime accepts, in
/// one line, without recursing itself. Exposed for benchmarks and fuzzing.
pub use crate::runtime::nesting::check as check_nesting;

/// The gadget side: the `step` world (a gadget, plus workflows) as bindgen
/// generated it, the host types of its resources, and the narrow view of a
/// kernel a sandbox is given (an embedder supplies its own, or the
/// kernel's `Kernel::view`).
pub mod gadget {
    pub use crate::runtime::gadget::gatehouse::os::{kernel, types, workflow};
    pub use crate::runtime::gadget::{
        CertificateHandle, Gadget, GadgetPre, GadgetState, ServiceHandle, TurnReport,
        instantiate_fresh,
    };
    pub use crate::runtime::view::{Answer, KernelView};
}

/// The gatekeeper side: a sandboxed gatekeeper instance and one call into
/// it, with egress limited to `Reach`.
pub mod gatekeeper {
    pub use crate::runtime::gatekeeper::{
        Called, Fault, GatekeeperPre, GatekeeperState, Reach, Sent, Witness, call,
        instantiate_fresh, wit,
    };
}
