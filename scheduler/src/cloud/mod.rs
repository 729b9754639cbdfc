//! The cloud boundary: one narrow trait between the scheduling logic and whatever provides VMs.
//!
//! Two implementations: `AzureCloud` (Azure Resource Manager: Compute Fleet, usages, SKUs) and
//! `SimCloud` (in the `simulator` crate). Errors are classified *here*, at the boundary, into
//! [`CloudError`]; nothing above this trait parses an Azure error string.
//!
//! Fleet creation (and resizing) is split into `begin_*` and `poll_operation` so the control loop
//! never blocks a round on a long-running operation: it starts the operation, stores the handle
//! with the attempt, and polls it in later rounds, which works the same in real and virtual time.

pub mod azure;
mod error;
mod fleet;

pub use crate::model::FailureClass;
pub use error::CloudError;
pub use fleet::{
    Fleet, FleetOperation, FleetPart, FleetPartStatus, FleetRequest, OperationStatus, ProvisioningState, ScaleSet,
    SizeRestriction, TAG_ATTEMPT, TAG_JOB,
};

use crate::model::{Offer, Quota};

/// What the scheduler needs from a cloud. Implementations must be cheap to share (`Arc<dyn Cloud>`)
/// and their futures `Send`, so the control loop can drive many operations at once.
#[async_trait::async_trait]
pub trait Cloud: Send + Sync {
    /// Offers (region × size × priority) with current prices, capacity estimates where known, and
    /// spot eviction rates, in the regions this cloud is configured for.
    async fn offers(&self) -> Result<Vec<Offer>, CloudError>;

    /// Quota pools of one region: `cores`, `lowPriorityCores` and every family, limit and usage.
    async fn quota(&self, region: &str) -> Result<Vec<Quota>, CloudError>;

    /// Sizes that cannot be used in a region (or some of its zones) by this subscription.
    async fn restrictions(&self, region: &str) -> Result<Vec<SizeRestriction>, CloudError>;

    /// Starts creating (or updating) a fleet. Refusals the cloud gives at once (quota, size not
    /// available, bad request) come back as classified errors.
    async fn begin_create_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError>;

    /// Starts changing the capacity of a fleet that exists (`request` names it, with its region,
    /// sizes, zones, minimums and spot cap as created, and the new capacity): how a job grows or
    /// shrinks where it already runs, instead of adding a fleet. On Azure a PUT of the new capacity
    /// on the same fleet name (`minCapacity` cannot change after creation). `CloudError::NotFound`
    /// when the fleet does not exist (a resize never creates one); refusals (quota for the growth,
    /// a property that cannot change, another operation in progress) come back classified. The
    /// operation is polled with [`Cloud::poll_operation`].
    async fn begin_resize_fleet(&self, request: &FleetRequest) -> Result<FleetOperation, CloudError>;

    /// Reads where a create operation is. A failed operation is `Ok(OperationStatus::Failed(_))`
    /// with its classified cause; `Err` means the poll itself failed.
    async fn poll_operation(&self, operation: &FleetOperation) -> Result<OperationStatus, CloudError>;

    /// One fleet by name; `CloudError::NotFound` when it does not exist.
    async fn get_fleet(&self, name: &str) -> Result<Fleet, CloudError>;

    /// Deletes a fleet and waits until the cloud accepts the deletion; `Ok` if it did not exist.
    async fn delete_fleet(&self, name: &str) -> Result<(), CloudError>;

    /// Every fleet in the scheduler's scope (resource group), all pages.
    async fn list_fleets(&self) -> Result<Vec<Fleet>, CloudError>;

    /// A fleet's scale sets, with the classified error of each that failed.
    async fn fleet_scale_sets(&self, name: &str) -> Result<Vec<ScaleSet>, CloudError>;
}
