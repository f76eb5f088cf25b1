//! End-to-end tests, one module per SPEC area. One binary, so the kernel
//! and wasmtime are linked once.

mod actions;
mod apply;
mod audit;
mod auto_approval;
mod blueprints;
mod caps;
mod chromium;
mod classification;
mod cli;
mod database;
mod demo;
mod exactly_once;
mod expiry;
mod hooks;
mod hostile_input;
mod hostile_ops;
mod hostile_web;
mod hosts;
mod install;
mod introductions;
mod languages;
mod lockdown;
mod mcp;
mod mcp_serve;
mod model;
mod notices;
mod pending_visibility;
mod revert;
mod sandbox;
mod secrets;
mod sharing;
mod side_doors;
mod web_api;
mod web_browser;
mod workflows;
