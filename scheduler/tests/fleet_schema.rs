//! Every fleet body `fleet_body` builds validates against the official Compute Fleet schema
//! (`shared/azure/azurefleet-2024-11-01/azurefleet.json#/definitions/Fleet`), and the official
//! examples parse into our wire models.
//!
//! The validator (`tests/support/schema.rs`, shared with the simulator's emulator tests) is small
//! on purpose: types, `required`, `enum` (open when `x-ms-enum.modelAsString` is true), `$ref`
//! across files, `allOf`, `additionalProperties`, `minimum`/`maximum`, and `readOnly` properties
//! refused on input. Skips with a message when `../../shared` is absent.

use std::path::{Path, PathBuf};

use scheduler::Catalog;
use scheduler::cloud::azure::fleet_body::{FleetBodyOptions, attempt_request, build_fleet, ranked_sizes};
use scheduler::cloud::azure::models::{self, Fleet, OperationStatusResult, ResourceSku, Usage, VirtualMachineScaleSet};
use scheduler::model::Priority;
use serde_json::Value;

#[path = "support/schema.rs"]
mod schema;

use schema::Schemas;

fn shared() -> Option<PathBuf> {
    schema::azure_definitions("azurefleet-2024-11-01/azurefleet.json")
}

fn fleet_errors(shared: &Path, body: &Value) -> Vec<String> {
    schema::fleet_errors(shared, body, false)
}

fn template() -> Value {
    serde_json::json!({
        "storageProfile": {
            "imageReference": {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"},
            "osDisk": {"caching": "ReadWrite", "createOption": "FromImage", "osType": "Linux",
                        "managedDisk": {"storageAccountType": "Premium_LRS"}}
        },
        "osProfile": {
            "adminUsername": "spillway",
            "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": [{"path": "/home/spillway/.ssh/authorized_keys", "keyData": "ssh-ed25519 AAAA spillway"}]}}
        },
        "networkProfile": {
            "networkApiVersion": "2022-07-01",
            "networkInterfaceConfigurations": [{
                "name": "nic",
                "properties": {"primary": true, "enableAcceleratedNetworking": true,
                    "ipConfigurations": [{"name": "ip", "properties": {"primary": true,
                        "subnet": {"id": "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/gpu"}}}]}
            }]
        },
        "securityProfile": {"securityType": "TrustedLaunch", "uefiSettings": {"secureBootEnabled": true, "vTpmEnabled": true}}
    })
}

#[test]
fn every_body_we_build_validates_against_the_official_schema() {
    let Some(shared) = shared() else { return };
    let catalog = Catalog::builtin();
    let a100 = "Standard_NC24ads_A100_v4";
    let multi = ranked_sizes(&catalog, "Standard_NC48ads_A100_v4", "eastus", Priority::Regular, 4);
    let mut zonal = attempt_request("job-z", 1, "eastus", Priority::Spot, vec![a100.into()], 2, false, Some(3.5));
    zonal.zones = vec!["1".into(), "2".into()];
    let cases = [
        (
            "spot gang",
            attempt_request("job-1", 1, "eastus", Priority::Spot, vec![a100.into()], 8, true, Some(1.2)),
            None,
        ),
        (
            "spot uncapped",
            attempt_request("job-2", 3, "westus3", Priority::Spot, vec![a100.into()], 1, true, None),
            None,
        ),
        ("regular", attempt_request("job-3", 1, "eastus", Priority::Regular, vec![a100.into()], 4, true, None), None),
        (
            "regular multi-size",
            attempt_request("job-4", 2, "eastus", Priority::Regular, multi.clone(), 4, true, None),
            None,
        ),
        (
            "spot multi-size templated",
            attempt_request("job-5", 1, "eastus", Priority::Spot, multi, 2, false, Some(4.0)),
            Some(template()),
        ),
        ("zonal", zonal, Some(template())),
    ];
    for (what, request, template) in cases {
        let opts = FleetBodyOptions { template, ..FleetBodyOptions::default() };
        let body = serde_json::to_value(build_fleet(&request, &opts).unwrap()).unwrap();
        let errors = fleet_errors(&shared, &body);
        assert!(errors.is_empty(), "{what}: {errors:#?}\n{body:#}");
    }
}

#[test]
fn the_validator_rejects_what_azure_would() {
    let Some(shared) = shared() else { return };
    let good = serde_json::to_value(
        build_fleet(
            &attempt_request(
                "job-1",
                1,
                "eastus",
                Priority::Spot,
                vec!["Standard_NC24ads_A100_v4".into()],
                2,
                true,
                Some(1.0),
            ),
            &FleetBodyOptions::default(),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(fleet_errors(&shared, &good).is_empty());
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut b = good.clone();
        f(&mut b);
        fleet_errors(&shared, &b)
    };
    let e = broken(&|b| {
        b.as_object_mut().unwrap().remove("location");
    });
    assert!(e.iter().any(|e| e.contains("location")), "{e:?}");
    let e = broken(&|b| {
        b["properties"].as_object_mut().unwrap().remove("vmSizesProfile");
    });
    assert!(e.iter().any(|e| e.contains("vmSizesProfile")), "{e:?}");
    let e = broken(&|b| b["properties"]["spotPriorityProfile"]["capacity"] = Value::from(-1));
    assert!(e.iter().any(|e| e.contains("minimum")), "{e:?}");
    let e = broken(&|b| b["properties"]["vmSizesProfile"][0]["rank"] = Value::from(70000));
    assert!(e.iter().any(|e| e.contains("maximum")), "{e:?}");
    let e = broken(&|b| b["properties"]["provisioningState"] = Value::from("Succeeded"));
    assert!(e.iter().any(|e| e.contains("read-only")), "{e:?}");
    let e = broken(&|b| b["tags"]["n"] = Value::from(3));
    assert!(e.iter().any(|e| e.contains("tags.n")), "{e:?}");
    let e = broken(&|b| b["properties"]["spotPriorityProfile"]["maintain"] = Value::from("yes"));
    assert!(e.iter().any(|e| e.contains("boolean")), "{e:?}");
    let e = broken(&|b| b["properties"]["spotPrioritiProfile"] = serde_json::json!({}));
    assert!(e.iter().any(|e| e.contains("unknown property")), "{e:?}");
    // The merged VM profile is checked too, deep inside.
    let e = broken(&|b| {
        b["properties"]["computeProfile"]["baseVirtualMachineProfile"]["storageProfil"] = serde_json::json!({})
    });
    assert!(e.iter().any(|e| e.contains("storageProfil: unknown")), "{e:?}");
    let e = broken(&|b| {
        b["properties"]["computeProfile"]["baseVirtualMachineProfile"] =
            serde_json::json!({"osProfile": {"linuxConfiguration": {"disablePasswordAuthentication": "no"}}})
    });
    assert!(e.iter().any(|e| e.contains("disablePasswordAuthentication")), "{e:?}");
    // Open enums accept new values.
    assert!(
        broken(&|b| b["properties"]["spotPriorityProfile"]["allocationStrategy"] = Value::from("NewStrategy"))
            .is_empty()
    );
    // Closed enums (no modelAsString) do not: ManagedServiceIdentityType is open in v5, so use a
    // hand-made closed enum to prove the branch works.
    let mut schemas = Schemas::new();
    let mut errors = Vec::new();
    let closed = serde_json::json!({"type": "string", "enum": ["A", "B"]});
    schemas.validate(
        &shared.join("azurefleet-2024-11-01/azurefleet.json"),
        &closed,
        &Value::from("C"),
        "x",
        &mut errors,
    );
    assert_eq!(errors.len(), 1);
}

#[test]
fn official_examples_parse_into_our_models() {
    let Some(shared) = shared() else { return };
    let read = |p: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(shared.join(p)).unwrap()).unwrap() };
    let create = read("azurefleet-2024-11-01/examples/Fleets_CreateOrUpdate_MinimumSet.json");
    let request: Fleet = serde_json::from_value(create["parameters"]["resource"].clone()).unwrap();
    let props = request.properties.as_ref().unwrap();
    assert_eq!(props.vm_sizes_profile.len(), 3);
    assert_eq!(props.spot_priority_profile.as_ref().unwrap().capacity, Some(2));
    assert_eq!(
        props.regular_priority_profile.as_ref().unwrap().allocation_strategy,
        Some(models::RegularPriorityAllocationStrategy::LowestPrice)
    );
    for status in ["200", "201"] {
        let fleet: Fleet = serde_json::from_value(create["responses"][status]["body"].clone()).unwrap();
        assert_eq!(fleet.name.as_deref(), Some("testFleet"));
        assert_eq!(fleet.location, "eastus2euap");
        let state = fleet.properties.as_ref().unwrap().provisioning_state.clone().unwrap();
        assert_eq!(state.as_str(), if status == "200" { "Succeeded" } else { "Creating" });
        // What we read back serialises to what Azure sent (nothing dropped that the model knows).
        let again = serde_json::to_value(&fleet).unwrap();
        assert_eq!(
            again["properties"]["computeProfile"],
            create["responses"][status]["body"]["properties"]["computeProfile"]
        );
    }
    // The official request body validates too: the validator is not stricter than Azure.
    assert!(fleet_errors(&shared, &create["parameters"]["resource"]).is_empty());

    let sets = read("azurefleet-2024-11-01/examples/Fleets_ListVirtualMachineScaleSets.json");
    let page: models::VirtualMachineScaleSetListResult =
        serde_json::from_value(sets["responses"]["200"]["body"].clone()).unwrap();
    let vmss: &VirtualMachineScaleSet = &page.value[0];
    assert_eq!(vmss.error.as_ref().unwrap().code.as_deref(), Some("OverconstrainedAllocationRequest"));
    assert_eq!(vmss.error.as_ref().unwrap().details.len(), 1);

    let skus = read("compute/ListAvailableResourceSkusForARegion.2021-07-01.json");
    let page: models::ResourceSkuListResult = serde_json::from_value(skus["responses"]["200"]["body"].clone()).unwrap();
    assert!(!page.value.is_empty());
    let a0: &ResourceSku = page.value.iter().find(|s| s.name == "Standard_A0").unwrap();
    assert_eq!(a0.capability("vCPUs"), Some("1"));
    assert_eq!(a0.location_info[0].zones.len(), 2);

    let usages = read("compute/Usage_List_MaximumSet_Gen.2024-11-01.json");
    let page: models::UsageListResult = serde_json::from_value(usages["responses"]["200"]["body"].clone()).unwrap();
    let u: &Usage = &page.value[0];
    assert_eq!((u.current_value, u.limit), (17, 19));
    assert!(page.next_link.is_some());

    let op: OperationStatusResult =
        serde_json::from_str(r#"{"status":"Failed","error":{"code":"AllocationFailed","message":"no"}}"#).unwrap();
    assert!(op.status.is_final());
}
