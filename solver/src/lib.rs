//! Placement optimisation: pure functions, no I/O, no async.
