//! A deployment's state: PostgreSQL, many hosts on one database, operations under pressure.

pub(crate) mod database;
pub(crate) mod hostile_ops;
pub(crate) mod hosts;
