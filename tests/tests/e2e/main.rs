//! End-to-end tests, one module per SPEC area. One binary, so the kernel
//! and wasmtime are linked once.

mod actions;
mod apply;
mod classification;
mod introductions;
