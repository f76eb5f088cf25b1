//! The surfaces a person uses: the CLI and its demo, the web inbox (API, browser, exposure, sign-in).

pub(crate) mod cli;
pub(crate) mod demo;
pub(crate) mod hostile_web;
pub(crate) mod web_api;
pub(crate) mod web_browser;
pub(crate) mod web_exposure;
pub(crate) mod web_signin;
