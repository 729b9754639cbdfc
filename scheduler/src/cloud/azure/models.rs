//! Serde models of Azure Resource Manager's wire format, hand-typed from the official definitions
//! (`azurefleet.json` 2024-11-01 and 2026-08-01, the ARM common types v5, Compute usages and
//! resource SKUs).
//!
//! Both sides use them: [`AzureCloud`](super::AzureCloud) to send and read, and the ARM emulator in
//! the `simulator` crate to answer, so both are `Serialize + Deserialize`.
//!
//! | model | wire |
//! | --- | --- |
//! | [`Fleet`], [`FleetProperties`], [`SpotPriorityProfile`], [`RegularPriorityProfile`], [`VmSizeProfile`], [`ComputeProfile`], [`AdditionalLocationsProfile`], [`LocationProfile`], [`ManagedServiceIdentity`], [`Plan`] | `Microsoft.AzureFleet/fleets` |
//! | [`Page`] (aliases [`FleetListResult`], [`VirtualMachineScaleSetListResult`], [`UsageListResult`], [`ResourceSkuListResult`]) | `{value, nextLink}` pages |
//! | [`VirtualMachineScaleSet`], [`ApiError`], [`ApiErrorBase`], [`InnerError`] | a fleet's scale sets and their errors |
//! | [`VirtualMachine`] (alias [`VirtualMachineListResult`]), [`VmOperationStatus`] | a fleet's VMs (2026-08-01) |
//! | [`FleetUpdate`] | the body of a PATCH |
//! | [`ErrorResponse`], [`ErrorDetail`], [`ErrorAdditionalInfo`] | the ARM error envelope `{"error": {...}}` (the bare inner object is accepted too) |
//! | [`OperationStatusResult`], [`OperationState`] | the body of an `Azure-AsyncOperation` status URL |
//! | [`Usage`], [`UsageName`] | `Microsoft.Compute/locations/{region}/usages` |
//! | [`ResourceSku`], [`ResourceSkuLocationInfo`], [`ResourceSkuCapability`], [`ResourceSkuRestriction`], [`ResourceSkuRestrictionInfo`] | `Microsoft.Compute/skus` |
//! | [`ResourceGraphQuery`], [`ResourceGraphOptions`], [`ResourceGraphResponse`], [`SpotEvictionRateRow`] | Azure Resource Graph (2024-04-01): spot eviction-rate bands |
//! | [`SpotPlacementScoresInput`], [`SpotPlacementScoresResponse`], [`PlacementScoreRow`], [`ResourceSize`] | `Microsoft.Compute/locations/{region}/placementScores/spot/generate` (2025-06-05) |
//! | [`SpotAllocationStrategy`], [`RegularPriorityAllocationStrategy`], [`EvictionPolicy`], [`ManagedServiceIdentityType`], [`RestrictionType`], [`RestrictionReasonCode`], [`ProvisioningState`], [`FleetMode`], [`CapacityType`] | open enums |
//!
//! Every enum is open: a value this build does not know is kept verbatim (`Other(String)`) instead
//! of failing the whole response, because Azure adds values without a new api-version. Unknown
//! fields are ignored on input for the same reason. Optional fields absent on input stay absent on
//! output, so what the emulator stores is what it returns.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::cloud::ProvisioningState;

/// Declares an open string enum: known values as variants, anything else kept in `Other`.
/// Parsing is case-insensitive (Azure is), output uses the documented spelling.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $wire:literal $(| $alias:literal)* ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this build does not know, kept verbatim.
            Other(String),
        }

        impl $name {
            /// Parses Azure's spelling (case-insensitive); unknown values are kept as `Other`.
            pub fn parse(s: &str) -> Self {
                $(
                    if s.eq_ignore_ascii_case($wire) $(|| s.eq_ignore_ascii_case($alias))* {
                        return Self::$variant;
                    }
                )+
                Self::Other(s.to_string())
            }

            /// Azure's spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $wire, )+
                    Self::Other(s) => s,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(Self::parse(&String::deserialize(d)?))
            }
        }
    };
}

open_enum! {
    /// How spot VMs are spread over the fleet's sizes.
    SpotAllocationStrategy {
        /// Default: balance price and capacity.
        PriceCapacityOptimized = "PriceCapacityOptimized",
        /// Cheapest first.
        LowestPrice = "LowestPrice",
        /// Most capacity first.
        CapacityOptimized = "CapacityOptimized",
    }
}

open_enum! {
    /// How regular VMs are spread over the fleet's sizes.
    RegularPriorityAllocationStrategy {
        /// Default: cheapest first.
        LowestPrice = "LowestPrice",
        /// By `vmSizesProfile[].rank`, lowest rank first.
        Prioritized = "Prioritized",
    }
}

open_enum! {
    /// What happens to an evicted spot VM.
    EvictionPolicy {
        /// Deleted; the fleet's capacity falls.
        Delete = "Delete",
        /// Stopped and deallocated.
        Deallocate = "Deallocate",
    }
}

open_enum! {
    /// Kinds of managed identity on a resource.
    ManagedServiceIdentityType {
        /// No identity.
        None = "None",
        /// System-assigned.
        SystemAssigned = "SystemAssigned",
        /// User-assigned.
        UserAssigned = "UserAssigned",
        /// Both.
        SystemAndUserAssigned = "SystemAssigned,UserAssigned",
    }
}

open_enum! {
    /// State of an asynchronous operation (`Azure-AsyncOperation` body `status`).
    OperationState {
        /// Not final.
        InProgress = "InProgress",
        /// Final: done.
        Succeeded = "Succeeded",
        /// Final: failed, `error` says why.
        Failed = "Failed",
        /// Final: cancelled (both spellings are accepted).
        Canceled = "Canceled" | "Cancelled",
    }
}

impl OperationState {
    /// `Succeeded`, `Failed` and `Canceled` are final; anything else (including unknown values) is not.
    pub fn is_final(&self) -> bool {
        matches!(self, OperationState::Succeeded | OperationState::Failed | OperationState::Canceled)
    }
}

open_enum! {
    /// How a fleet provisions its VMs (2026-08-01).
    FleetMode {
        /// Default: VMs in virtual machine scale sets.
        Managed = "Managed",
        /// VMs launched directly, managed by the customer.
        Launch = "Launch",
    }
}

open_enum! {
    /// What a priority profile's `capacity` counts (2026-08-01).
    CapacityType {
        /// Default: VMs.
        Vm = "VM",
        /// vCPUs.
        VCpu = "VCpu",
    }
}

open_enum! {
    /// Where a fleet's VM is (`VMOperationStatus`, 2026-08-01): only `Succeeded` runs.
    VmOperationStatus {
        /// Not yet accepted by Compute.
        Launching = "Launching",
        /// Being created.
        Creating = "Creating",
        /// Its last operation failed; `error` says why.
        Failed = "Failed",
        /// Created and running.
        Succeeded = "Succeeded",
    }
}

open_enum! {
    /// Scope of a SKU restriction.
    RestrictionType {
        /// The whole region.
        Location = "Location",
        /// Some zones of the region.
        Zone = "Zone",
    }
}

open_enum! {
    /// Why a SKU is restricted.
    RestrictionReasonCode {
        /// The subscription's offer type excludes it.
        QuotaId = "QuotaId",
        /// Not available to this subscription.
        NotAvailableForSubscription = "NotAvailableForSubscription",
    }
}

/// A Compute Fleet resource (`azurefleet.json#/definitions/Fleet`, a `TrackedResource`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// Resource id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Resource name (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Resource type, `Microsoft.AzureFleet/fleets` (read-only).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// ARM metadata (read-only), kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_data: Option<serde_json::Value>,
    /// Region (required).
    pub location: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Zones the fleet may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Managed identities of the fleet resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<ManagedServiceIdentity>,
    /// Marketplace plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// The fleet itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<FleetProperties>,
}

/// `FleetProperties`: what the fleet runs and how.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetProperties {
    /// Where the last operation is (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
    /// Spot part of the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_priority_profile: Option<SpotPriorityProfile>,
    /// Regular part of the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regular_priority_profile: Option<RegularPriorityProfile>,
    /// Sizes the fleet may use (required by the schema; tolerated absent on input).
    #[serde(default)]
    pub vm_sizes_profile: Vec<VmSizeProfile>,
    /// Attribute-based size selection, kept opaque (spillway always names sizes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_attributes: Option<serde_json::Value>,
    /// Further regions the fleet may span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_locations_profile: Option<AdditionalLocationsProfile>,
    /// What each VM is (required by the schema; tolerated absent on input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_profile: Option<ComputeProfile>,
    /// Creation time, RFC 3339 (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_created: Option<String>,
    /// Unique id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_id: Option<String>,
    /// `Managed` (the default: VMs in scale sets) or `Launch` (2026-08-01 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FleetMode>,
    /// Name prefix of the VMs of a `Launch` fleet (2026-08-01 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_name_prefix: Option<String>,
    /// What `capacity` counts, `VM` (the default) or `VCpu`; immutable (2026-08-01 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<CapacityType>,
    /// How VMs spread over zones, kept opaque. The 2026-08-01 examples send it although the
    /// definition's `FleetProperties` does not list it (its `ZoneAllocationPolicy` type exists): it is
    /// tolerated, as NOTES.md says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_allocation_policy: Option<serde_json::Value>,
}

/// `SpotPriorityProfile`. Capacities count VMs in this api-version.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotPriorityProfile {
    /// VMs wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// VMs below which the request is refused; cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_capacity: Option<u32>,
    /// Highest price per VM-hour paid.
    #[serde(default, rename = "maxPricePerVM", skip_serializing_if = "Option::is_none")]
    pub max_price_per_vm: Option<f64>,
    /// What eviction does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_policy: Option<EvictionPolicy>,
    /// How VMs spread over sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_strategy: Option<SpotAllocationStrategy>,
    /// Replace evicted VMs automatically (Azure's default is true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintain: Option<bool>,
}

/// `RegularPriorityProfile`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegularPriorityProfile {
    /// VMs wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// VMs below which the request is refused; cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_capacity: Option<u32>,
    /// How VMs spread over sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_strategy: Option<RegularPriorityAllocationStrategy>,
}

/// `VmSizeProfile`: one size and its rank (0–65535, lower preferred, used by `Prioritized`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmSizeProfile {
    /// Size name, e.g. `Standard_NC24ads_A100_v4`.
    pub name: String,
    /// Rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// `ComputeProfile`. The VM profile is kept as JSON: it is the user's template (image, network,
/// identity) merged with what spillway sets, and its schema belongs to Compute, not to us.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeProfile {
    /// `BaseVirtualMachineProfile`, as JSON.
    pub base_virtual_machine_profile: serde_json::Value,
    /// Microsoft.Compute api-version for the underlying scale sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_api_version: Option<String>,
    /// Fault domains of the underlying scale sets (1 = max spreading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_fault_domain_count: Option<i32>,
    /// `ultraSSDEnabled` / `hibernationEnabled`, kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_virtual_machine_capabilities: Option<serde_json::Value>,
}

/// `AdditionalLocationsProfile`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalLocationsProfile {
    /// One entry per extra region.
    #[serde(default)]
    pub location_profiles: Vec<LocationProfile>,
}

/// `LocationProfile`: an extra region, with an optional VM profile override merged over the base.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocationProfile {
    /// Region.
    pub location: String,
    /// Override of the base VM profile in that region, as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_profile_override: Option<serde_json::Value>,
}

/// `ManagedServiceIdentity` (common types v5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedServiceIdentity {
    /// Kind of identity.
    #[serde(rename = "type")]
    pub identity_type: ManagedServiceIdentityType,
    /// User-assigned identities by resource id; values are read-only details, kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_assigned_identities: Option<BTreeMap<String, serde_json::Value>>,
    /// Principal id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_id: Option<String>,
    /// Tenant id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// `Plan` (common types v5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Plan name.
    pub name: String,
    /// Publisher.
    pub publisher: String,
    /// Product.
    pub product: String,
    /// Promotion code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_code: Option<String>,
    /// Version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One page of a list: `{value, nextLink}`. An absent or `null` `nextLink` ends the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// Items on this page.
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    /// Absolute URL of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_link: Option<String>,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page { value: Vec::new(), next_link: None }
    }
}

/// `FleetListResult`.
pub type FleetListResult = Page<Fleet>;
/// `VirtualMachineScaleSetListResult`.
pub type VirtualMachineScaleSetListResult = Page<VirtualMachineScaleSet>;
/// Compute `ListUsagesResult`.
pub type UsageListResult = Page<Usage>;
/// Compute `ResourceSkusResult`.
pub type ResourceSkuListResult = Page<ResourceSku>;

/// `VirtualMachineScaleSet`: one scale set of a fleet, as the fleet reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineScaleSet {
    /// Name.
    pub name: String,
    /// Compute resource id.
    pub id: String,
    /// Resource type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// Where its last operation is.
    pub operation_status: ProvisioningState,
    /// Set when `operationStatus` is `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// `VirtualMachine` (2026-08-01): one VM of a fleet, as `GET …/fleets/{name}/virtualMachines`
/// lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachine {
    /// VM name.
    pub name: String,
    /// Compute resource id of the VM.
    pub id: String,
    /// Resource type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// Where its last operation is.
    pub operation_status: VmOperationStatus,
    /// Set when `operationStatus` is `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    /// Its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_size: Option<String>,
    /// Its zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `Spot` or `Regular` (a plain string in the definition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

/// `VirtualMachineListResult`.
pub type VirtualMachineListResult = Page<VirtualMachine>;

/// `FleetUpdate`: the body of a PATCH, every part optional (merged over the fleet).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetUpdate {
    /// Tags (replace the fleet's tags when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Identity, kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<serde_json::Value>,
    /// Plan, kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<serde_json::Value>,
    /// Properties to change, as JSON (a JSON merge patch over the fleet's `properties`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<serde_json::Value>,
}

/// `ApiError` (Fleet): code, message and one level of details.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    /// Error code, e.g. `AllocationFailed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Details.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ApiErrorBase>,
    /// Inner error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub innererror: Option<InnerError>,
}

/// `ApiErrorBase`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiErrorBase {
    /// Error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `InnerError`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InnerError {
    /// Exception type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception_type: Option<String>,
    /// Internal message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
}

/// ARM's `ErrorDetail`: code, message, target and nested details.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// Error code, e.g. `QuotaExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Nested details (the real cause is often one level down).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
    /// Additional info.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_info: Vec<ErrorAdditionalInfo>,
}

impl ErrorDetail {
    /// An error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ErrorDetail {
        ErrorDetail { code: Some(code.into()), message: Some(message.into()), ..ErrorDetail::default() }
    }
}

impl From<ApiError> for ErrorDetail {
    fn from(e: ApiError) -> ErrorDetail {
        ErrorDetail {
            code: e.code,
            message: e.message,
            target: e.target,
            details: e
                .details
                .into_iter()
                .map(|d| ErrorDetail { code: d.code, message: d.message, target: d.target, ..ErrorDetail::default() })
                .collect(),
            additional_info: Vec::new(),
        }
    }
}

/// ARM's `ErrorAdditionalInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorAdditionalInfo {
    /// Kind of info.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub info_type: Option<String>,
    /// The info, opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

/// ARM's error envelope `{"error": ErrorDetail}`. Serialises with the wrapper; deserialises from
/// the wrapper or from the bare inner object, which some services send.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorDetail,
}

impl ErrorResponse {
    /// Wraps an error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse { error: ErrorDetail::new(code, message) }
    }

    /// Reads an error body; `None` when it is not JSON or carries neither code nor message.
    pub fn parse(body: &[u8]) -> Option<ErrorResponse> {
        let parsed: ErrorResponse = serde_json::from_slice(body).ok()?;
        (parsed.error.code.is_some() || parsed.error.message.is_some()).then_some(parsed)
    }
}

impl Serialize for ErrorResponse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Envelope<'a> {
            error: &'a ErrorDetail,
        }
        Envelope { error: &self.error }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ErrorResponse {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Wrapped { error: ErrorDetail },
            Bare(ErrorDetail),
        }
        Ok(match Either::deserialize(d)? {
            Either::Wrapped { error } => ErrorResponse { error },
            Either::Bare(error) => ErrorResponse { error },
        })
    }
}

/// The body of an `Azure-AsyncOperation` status URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatusResult {
    /// Operation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Operation name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it is.
    pub status: OperationState,
    /// Why it failed, when `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
    /// Start time, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// End time, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Progress, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent_complete: Option<f64>,
}

/// One quota row of Compute usages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Unit, `Count`.
    #[serde(default = "count_unit")]
    pub unit: String,
    /// In use.
    pub current_value: i64,
    /// Allowed.
    pub limit: i64,
    /// Which pool.
    pub name: UsageName,
}

fn count_unit() -> String {
    "Count".to_string()
}

/// A usage row's name: `value` is the pool (`cores`, `lowPriorityCores`, `standardNCADSA100v4Family`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageName {
    /// Machine name of the pool.
    #[serde(default)]
    pub value: String,
    /// Human name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localized_value: Option<String>,
}

/// One Compute resource SKU. Lists are always written, empty ones as `[]`, as Azure sends them
/// (an SDK reads an absent `restrictions` as `None`, not as "no restriction").
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSku {
    /// `virtualMachines`, `disks`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// Size name.
    #[serde(default)]
    pub name: String,
    /// Tier, `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Short size, `NC24ads_A100_v4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Quota family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Regions.
    #[serde(default)]
    pub locations: Vec<String>,
    /// Zones per region.
    #[serde(default)]
    pub location_info: Vec<ResourceSkuLocationInfo>,
    /// Capabilities as strings (`vCPUs`, `GPUs`, `LowPriorityCapable`, …).
    #[serde(default)]
    pub capabilities: Vec<ResourceSkuCapability>,
    /// Why it cannot be used, where.
    #[serde(default)]
    pub restrictions: Vec<ResourceSkuRestriction>,
}

impl ResourceSku {
    /// A capability's value by name (case-insensitive).
    pub fn capability(&self, name: &str) -> Option<&str> {
        self.capabilities.iter().find(|c| c.name.eq_ignore_ascii_case(name)).map(|c| c.value.as_str())
    }
}

/// Zones of a SKU in one region.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSkuLocationInfo {
    /// Region.
    #[serde(default)]
    pub location: String,
    /// Zones where the size can run (not a promise of capacity).
    #[serde(default)]
    pub zones: Vec<String>,
    /// Per-zone capabilities, opaque.
    #[serde(default)]
    pub zone_details: Vec<serde_json::Value>,
}

/// One capability, name and string value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSkuCapability {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value, always a string on the wire.
    #[serde(default)]
    pub value: String,
}

/// One restriction of a SKU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSkuRestriction {
    /// `Location` (whole region) or `Zone`.
    #[serde(rename = "type")]
    pub restriction_type: RestrictionType,
    /// Regions or zones, per `type`.
    #[serde(default)]
    pub values: Vec<String>,
    /// Where exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restriction_info: Option<ResourceSkuRestrictionInfo>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<RestrictionReasonCode>,
}

/// Regions and zones a restriction applies to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSkuRestrictionInfo {
    /// Regions.
    #[serde(default)]
    pub locations: Vec<String>,
    /// Zones.
    #[serde(default)]
    pub zones: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_enum_values_are_kept_not_rejected() {
        let p: SpotPriorityProfile =
            serde_json::from_str(r#"{"allocationStrategy":"SomethingNew","evictionPolicy":"delete"}"#).unwrap();
        assert_eq!(p.allocation_strategy, Some(SpotAllocationStrategy::Other("SomethingNew".into())));
        assert_eq!(p.eviction_policy, Some(EvictionPolicy::Delete));
        let back = serde_json::to_value(&p).unwrap();
        assert_eq!(back["allocationStrategy"], "SomethingNew");
        assert_eq!(back["evictionPolicy"], "Delete");
        let s: OperationStatusResult = serde_json::from_str(r#"{"status":"Cancelled"}"#).unwrap();
        assert!(s.status.is_final());
        let s: OperationStatusResult = serde_json::from_str(r#"{"status":"Queued"}"#).unwrap();
        assert!(!s.status.is_final());
    }

    #[test]
    fn error_envelope_and_bare_object_both_parse() {
        let wrapped = br#"{"error":{"code":"QuotaExceeded","message":"m","details":[{"code":"X"}]}}"#;
        let bare = br#"{"code":"QuotaExceeded","message":"m"}"#;
        let w = ErrorResponse::parse(wrapped).unwrap();
        let b = ErrorResponse::parse(bare).unwrap();
        assert_eq!(w.error.code.as_deref(), Some("QuotaExceeded"));
        assert_eq!(w.error.details[0].code.as_deref(), Some("X"));
        assert_eq!(b.error.code.as_deref(), Some("QuotaExceeded"));
        assert!(ErrorResponse::parse(b"<html>bad gateway</html>").is_none());
        assert!(ErrorResponse::parse(b"{}").is_none());
        let out = serde_json::to_value(ErrorResponse::new("A", "b")).unwrap();
        assert_eq!(out, serde_json::json!({"error": {"code": "A", "message": "b"}}));
    }

    #[test]
    fn page_without_next_link_ends() {
        let p: UsageListResult = serde_json::from_str(
            r#"{"value":[{"unit":"Count","currentValue":17,"limit":96,"name":{"value":"cores"}}],"nextLink":null}"#,
        )
        .unwrap();
        assert_eq!(p.value[0].limit, 96);
        assert!(p.next_link.is_none());
    }
}

// ---- the spot capacity signals (issue #22) ----

/// The body of an Azure Resource Graph query (`POST /providers/Microsoft.ResourceGraph/resources`,
/// api-version 2024-04-01, `QueryRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGraphQuery {
    /// Subscriptions the query runs against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
    /// The query (Kusto).
    pub query: String,
    /// Paging and format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<ResourceGraphOptions>,
}

/// `QueryRequestOptions`: the page wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceGraphOptions {
    /// The continuation token of the previous page.
    #[serde(rename = "$skipToken", default, skip_serializing_if = "Option::is_none")]
    pub skip_token: Option<String>,
    /// Rows per page (1 to 1000).
    #[serde(rename = "$top", default, skip_serializing_if = "Option::is_none")]
    pub top: Option<u32>,
    /// `objectArray` (rows as objects, the default) or `table`.
    #[serde(rename = "resultFormat", default, skip_serializing_if = "Option::is_none")]
    pub result_format: Option<String>,
}

/// `QueryResponse`: one page of rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGraphResponse {
    /// Rows matching the query, all pages.
    #[serde(default)]
    pub total_records: i64,
    /// Rows in this page.
    #[serde(default)]
    pub count: i64,
    /// `"true"` / `"false"` (a string on the wire).
    #[serde(default)]
    pub result_truncated: serde_json::Value,
    /// Present when more pages follow: sent back in `options.$skipToken`.
    #[serde(rename = "$skipToken", default, skip_serializing_if = "Option::is_none")]
    pub skip_token: Option<String>,
    /// The rows (`objectArray`).
    #[serde(default)]
    pub data: serde_json::Value,
}

/// One row of the eviction-rate query, as projected by `AzureCloud`'s query
/// (`skuName`, `location`, `evictionRate`) or as the raw `SpotResources` row (`sku.name`,
/// `properties.evictionRate`): both are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotEvictionRateRow {
    /// The VM size, as Resource Graph spells it (often lower case).
    #[serde(default, alias = "skuname")]
    pub sku_name: Option<String>,
    /// The region.
    #[serde(default)]
    pub location: Option<String>,
    /// The band: `0-5`, `5-10`, `10-15`, `15-20`, `20+`.
    #[serde(default, alias = "spotEvictionRate")]
    pub eviction_rate: Option<String>,
    /// The raw row's `sku` object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<serde_json::Value>,
    /// The raw row's `properties` object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<serde_json::Value>,
}

impl SpotEvictionRateRow {
    /// (size, region, band text) from either row shape.
    pub fn fields(&self) -> Option<(String, String, String)> {
        let size = self.sku_name.clone().or_else(|| self.sku.as_ref()?.get("name")?.as_str().map(str::to_string))?;
        let rate = self
            .eviction_rate
            .clone()
            .or_else(|| self.properties.as_ref()?.get("evictionRate")?.as_str().map(str::to_string))?;
        Some((size, self.location.clone()?, rate))
    }
}

/// A VM size in a placement-score request (`ResourceSize`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSize {
    /// The size.
    pub sku: String,
}

/// `SpotPlacementScoresInput` (api-version 2025-06-05).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotPlacementScoresInput {
    /// Regions to score.
    #[serde(default)]
    pub desired_locations: Vec<String>,
    /// Sizes to score.
    #[serde(default)]
    pub desired_sizes: Vec<ResourceSize>,
    /// VMs wanted per region (or zone).
    #[serde(default)]
    pub desired_count: Option<i32>,
    /// Zonal (true) or regional scores.
    #[serde(default)]
    pub availability_zones: Option<bool>,
}

/// One score (`PlacementScore`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementScoreRow {
    /// The size.
    #[serde(default)]
    pub sku: Option<String>,
    /// The region.
    #[serde(default)]
    pub region: Option<String>,
    /// The zone, for zonal scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// `High`, `Medium`, `Low`, `DataNotFoundOrStale`, a restriction, …: an open string.
    #[serde(default)]
    pub score: Option<String>,
    /// Whether the subscription's quota covers the desired count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_quota_available: Option<bool>,
}

/// `SpotPlacementScoresResponse`: the input echoed and the scores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotPlacementScoresResponse {
    /// Regions scored.
    #[serde(default)]
    pub desired_locations: Vec<String>,
    /// Sizes scored.
    #[serde(default)]
    pub desired_sizes: Vec<ResourceSize>,
    /// VMs wanted per region.
    #[serde(default)]
    pub desired_count: Option<i32>,
    /// Zonal or regional.
    #[serde(default)]
    pub availability_zones: Option<bool>,
    /// The scores.
    #[serde(default)]
    pub placement_scores: Vec<PlacementScoreRow>,
}
