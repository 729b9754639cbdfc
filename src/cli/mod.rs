//! One module per command; each returns the process exit code.

pub mod catalog;
pub mod table;
pub mod validate;
