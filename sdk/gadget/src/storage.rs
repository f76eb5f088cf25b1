//! Gadget storage, typed: a small key-value store of this gadget in this
//! chat, kept across turns. Owns only the translation of the contract's
//! `store-*` calls into `Result`s of this crate's [`CallError`]; it may not
//! decide who reads a value (the kernel hands a value only to a person who
//! may see what it was derived from, and hides it from anyone else).

use crate::bindings::gatehouse::os::kernel;
use crate::call::CallError;

/// The value stored under `key` in this chat, if there is one the turn's
/// person may read. Reading it counts as reading what it was derived from.
pub fn get(key: &str) -> Result<Option<String>, CallError> {
    kernel::store_get(key).map_err(CallError::from)
}

/// Stores `value` under `key`, replacing any value there (a key is 1 to 256
/// bytes, a value at most 64 KiB, at most 256 keys per gadget and chat).
pub fn put(key: &str, value: &str) -> Result<(), CallError> {
    kernel::store_put(key, value).map_err(CallError::from)
}

/// Removes `key`; a key that is not there is not an error.
pub fn delete(key: &str) -> Result<(), CallError> {
    kernel::store_delete(key).map_err(CallError::from)
}

/// The keys the turn's person may read, in byte order.
pub fn keys() -> Result<Vec<String>, CallError> {
    kernel::store_keys().map_err(CallError::from)
}
