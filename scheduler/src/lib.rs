//! spillway's scheduling core: the domain model, the GPU catalog, and (as they land) the cloud
//! boundary, the control loop and the HTTP API.
//!
//! Everything here sees the cloud only through the `Cloud` trait and time only through a `Clock`,
//! so the simulator can drive the very same code in virtual time.

pub mod catalog;
pub mod clock;
pub mod cloud;
pub mod model;

pub use catalog::Catalog;
