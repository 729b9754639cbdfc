//! spillway's scheduling core: the domain model, the GPU catalog, and (as they land) the cloud
//! boundary, the control loop and the HTTP API.
//!
//! Everything here sees the cloud only through the `Cloud` trait and time only through a `Clock`,
//! so the simulator can drive the very same code in virtual time.

pub mod accounting;
pub mod advice;
pub mod agents;
pub mod api;
pub mod catalog;
pub mod clock;
pub mod cloud;
pub mod control;
pub mod deadline;
pub mod jobs;
pub mod leader;
pub mod model;
pub mod quota_requests;
pub mod records;

pub use catalog::{Catalog, PriceRow};
