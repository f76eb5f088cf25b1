//! End-to-end tests, in folders by SPEC letter (`c_capabilities/`, ...),
//! then the deployment and the surfaces. One binary, so the kernel and
//! wasmtime are linked once. Run one area with its folder's name as the
//! filter: `cargo test -p gatehouse-e2e --test e2e -- c_capabilities::`.

mod a_action_path;
mod b_blueprints;
mod c_capabilities;
mod chromium;
mod deployment;
mod f_faces;
mod g_workflows;
mod h_hooks_revert_expiry;
mod k_classification;
mod l_ledger;
mod m_mcp;
mod o_observations;
mod p_apply;
mod r_prompt;
mod s_sharing;
mod surfaces;
mod u_auto_approval;
mod v_pending;
mod w_who;
mod x_sandbox;
