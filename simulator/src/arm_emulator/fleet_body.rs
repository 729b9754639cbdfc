//! What the emulator accepts and returns in a fleet body, as Azure does: the properties each
//! api-version defines (anything else is refused, naming it), the secrets never returned, the
//! fields that cannot change once the fleet exists, and PATCH's merge.
//!
//! The known property names are those of the official definitions (`azurefleet.json`
//! 2024-11-01 and 2026-08-01); `simulator/tests/arm_emulator.rs` checks them against those
//! definitions, read at test time from `shared/azure/` beside the checkout. Compute's own schemas (the VM profile, `vmAttributes`) are kept
//! opaque: the fleet service hands them to Compute.

use serde_json::{Map, Value};

/// The api-versions of `Microsoft.AzureFleet/fleets` the emulator serves, oldest first.
pub const FLEET_API_VERSIONS: [&str; 2] = ["2024-11-01", "2026-08-01"];

/// True for api-versions that define the 2026-08-01 additions (`mode`, `capacityType`,
/// `vmNamePrefix`, the fleet's virtual-machines list).
pub fn is_2026(api_version: &str) -> bool {
    api_version >= "2026-08-01"
}

/// An object type of the fleet definition: its name (as Azure's deserializer names it in errors)
/// and its properties, each either a nested known type or opaque.
struct Shape {
    name: &'static str,
    props: &'static [(&'static str, Kind)],
    /// Properties only 2026-08-01 and later define.
    props_2026: &'static [(&'static str, Kind)],
}

#[derive(Clone, Copy)]
enum Kind {
    /// A value checked no further (scalars, Compute schemas, ARM metadata).
    Opaque,
    /// An object of a known shape.
    Object(&'static Shape),
    /// An array of objects of a known shape.
    Array(&'static Shape),
}

const FLEET: Shape = Shape {
    name: "Fleet",
    props: &[
        ("id", Kind::Opaque),
        ("name", Kind::Opaque),
        ("type", Kind::Opaque),
        ("systemData", Kind::Opaque),
        ("location", Kind::Opaque),
        ("tags", Kind::Opaque),
        ("zones", Kind::Opaque),
        ("identity", Kind::Object(&IDENTITY)),
        ("plan", Kind::Object(&PLAN)),
        ("properties", Kind::Object(&FLEET_PROPERTIES)),
    ],
    props_2026: &[],
};

const FLEET_UPDATE: Shape = Shape {
    name: "FleetUpdate",
    props: &[
        ("tags", Kind::Opaque),
        ("identity", Kind::Object(&IDENTITY)),
        ("plan", Kind::Object(&PLAN)),
        ("properties", Kind::Object(&FLEET_PROPERTIES)),
    ],
    props_2026: &[],
};

const FLEET_PROPERTIES: Shape = Shape {
    name: "FleetProperties",
    props: &[
        ("provisioningState", Kind::Opaque),
        ("spotPriorityProfile", Kind::Object(&SPOT)),
        ("regularPriorityProfile", Kind::Object(&REGULAR)),
        ("vmSizesProfile", Kind::Array(&VM_SIZE)),
        ("vmAttributes", Kind::Opaque),
        ("additionalLocationsProfile", Kind::Object(&ADDITIONAL_LOCATIONS)),
        ("computeProfile", Kind::Object(&COMPUTE)),
        ("timeCreated", Kind::Opaque),
        ("uniqueId", Kind::Opaque),
    ],
    // `zoneAllocationPolicy` is not in the definition's FleetProperties but its examples send it
    // (NOTES.md): tolerated.
    props_2026: &[
        ("mode", Kind::Opaque),
        ("vmNamePrefix", Kind::Opaque),
        ("capacityType", Kind::Opaque),
        ("zoneAllocationPolicy", Kind::Opaque),
    ],
};

const SPOT: Shape = Shape {
    name: "SpotPriorityProfile",
    props: &[
        ("capacity", Kind::Opaque),
        ("minCapacity", Kind::Opaque),
        ("maxPricePerVM", Kind::Opaque),
        ("evictionPolicy", Kind::Opaque),
        ("allocationStrategy", Kind::Opaque),
        ("maintain", Kind::Opaque),
    ],
    props_2026: &[],
};

const REGULAR: Shape = Shape {
    name: "RegularPriorityProfile",
    props: &[("capacity", Kind::Opaque), ("minCapacity", Kind::Opaque), ("allocationStrategy", Kind::Opaque)],
    props_2026: &[],
};

const VM_SIZE: Shape =
    Shape { name: "VmSizeProfile", props: &[("name", Kind::Opaque), ("rank", Kind::Opaque)], props_2026: &[] };

const COMPUTE: Shape = Shape {
    name: "ComputeProfile",
    props: &[
        ("baseVirtualMachineProfile", Kind::Opaque),
        ("computeApiVersion", Kind::Opaque),
        ("platformFaultDomainCount", Kind::Opaque),
        ("additionalVirtualMachineCapabilities", Kind::Opaque),
    ],
    props_2026: &[],
};

const ADDITIONAL_LOCATIONS: Shape = Shape {
    name: "AdditionalLocationsProfile",
    props: &[("locationProfiles", Kind::Array(&LOCATION_PROFILE))],
    props_2026: &[],
};

const LOCATION_PROFILE: Shape = Shape {
    name: "LocationProfile",
    props: &[("location", Kind::Opaque), ("virtualMachineProfileOverride", Kind::Opaque)],
    props_2026: &[],
};

const IDENTITY: Shape = Shape {
    name: "ManagedServiceIdentity",
    props: &[
        ("type", Kind::Opaque),
        ("userAssignedIdentities", Kind::Opaque),
        ("principalId", Kind::Opaque),
        ("tenantId", Kind::Opaque),
    ],
    props_2026: &[],
};

const PLAN: Shape = Shape {
    name: "Plan",
    props: &[
        ("name", Kind::Opaque),
        ("publisher", Kind::Opaque),
        ("product", Kind::Opaque),
        ("promotionCode", Kind::Opaque),
        ("version", Kind::Opaque),
    ],
    props_2026: &[],
};

/// The property names the emulator knows per definition, for the test that holds them to the
/// official definitions: `(definition, api-version, names)`.
pub fn known_properties() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let mut out = Vec::new();
    for shape in [&FLEET_PROPERTIES, &SPOT, &REGULAR, &VM_SIZE, &COMPUTE, &ADDITIONAL_LOCATIONS, &LOCATION_PROFILE] {
        for version in FLEET_API_VERSIONS {
            let mut names: Vec<&str> = shape.props.iter().map(|(n, _)| *n).collect();
            if is_2026(version) {
                names.extend(shape.props_2026.iter().map(|(n, _)| *n));
            }
            out.push((shape.name, version, names));
        }
    }
    out
}

/// Refuses a property the api-version does not define, the way Azure's deserializer does:
/// `Could not find member 'x' on object of type 'FleetProperties'. Path 'properties.x'.`
pub fn check_known(body: &Value, api_version: &str, patch: bool) -> Result<(), String> {
    check_shape(body, if patch { &FLEET_UPDATE } else { &FLEET }, "", is_2026(api_version))
}

fn check_shape(value: &Value, shape: &Shape, path: &str, v2026: bool) -> Result<(), String> {
    let Value::Object(map) = value else { return Ok(()) };
    for (key, v) in map {
        let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        let known = shape.props.iter().chain(if v2026 { shape.props_2026 } else { &[] }).find(|(n, _)| n == key);
        let Some((_, kind)) = known else {
            return Err(format!("Could not find member '{key}' on object of type '{}'. Path '{at}'.", shape.name));
        };
        match kind {
            Kind::Opaque => {}
            Kind::Object(s) => check_shape(v, s, &at, v2026)?,
            Kind::Array(s) => {
                if let Value::Array(items) = v {
                    for (i, item) in items.iter().enumerate() {
                        check_shape(item, s, &format!("{at}[{i}]"), v2026)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The VM profiles of a fleet body: the base one and each location's override.
fn vm_profiles_mut(body: &mut Value) -> Vec<&mut Value> {
    let mut out = Vec::new();
    let Some(props) = body.get_mut("properties").and_then(Value::as_object_mut) else { return out };
    let (compute, locations) = {
        let mut compute = None;
        let mut locations = None;
        for (k, v) in props.iter_mut() {
            match k.as_str() {
                "computeProfile" => compute = Some(v),
                "additionalLocationsProfile" => locations = Some(v),
                _ => {}
            }
        }
        (compute, locations)
    };
    if let Some(p) = compute.and_then(|c| c.get_mut("baseVirtualMachineProfile")) {
        out.push(p);
    }
    if let Some(list) = locations.and_then(|l| l.get_mut("locationProfiles")).and_then(Value::as_array_mut) {
        out.extend(list.iter_mut().filter_map(|l| l.get_mut("virtualMachineProfileOverride")));
    }
    out
}

/// The secrets of a VM profile, as paths: Azure accepts them and never returns them.
const SECRETS: [&[&str]; 2] = [&["osProfile", "adminPassword"], &["osProfile", "customData"]];

/// Removes what Azure never returns: `osProfile.adminPassword`, `osProfile.customData` and the
/// extensions' `protectedSettings` (and `protectedSettingsFromKeyVault`), in every VM profile.
pub fn strip_secrets(body: &mut Value) {
    for profile in vm_profiles_mut(body) {
        for path in SECRETS {
            if let Some(Value::Object(parent)) = pointer_mut(profile, &path[..path.len() - 1]) {
                parent.remove(path[path.len() - 1]);
            }
        }
        let extensions = pointer_mut(profile, &["extensionProfile", "extensions"]).and_then(Value::as_array_mut);
        for ext in extensions.into_iter().flatten() {
            if let Some(Value::Object(p)) = ext.get_mut("properties") {
                p.remove("protectedSettings");
                p.remove("protectedSettingsFromKeyVault");
            }
        }
    }
}

/// A client that read a fleet (without its secrets) and PUTs it back changes no secret: fills the
/// secrets `new` lacks from `stored`, so that only a secret actually sent replaces one.
pub fn keep_secrets(new: &mut Value, stored: &Value) {
    let mut stored = stored.clone();
    let old_profiles: Vec<Value> = vm_profiles_mut(&mut stored).into_iter().map(|p| p.clone()).collect();
    for (profile, old) in vm_profiles_mut(new).into_iter().zip(old_profiles) {
        let old_extensions = pointer(&old, &["extensionProfile", "extensions"]).and_then(Value::as_array);
        let extensions = pointer_mut(profile, &["extensionProfile", "extensions"]).and_then(Value::as_array_mut);
        for ext in extensions.into_iter().flatten() {
            let same = old_extensions.and_then(|o| o.iter().find(|x| x.get("name") == ext.get("name")));
            let (Some(same), Some(Value::Object(props))) = (same, ext.get_mut("properties")) else { continue };
            for key in ["protectedSettings", "protectedSettingsFromKeyVault"] {
                if let Some(v) = same.pointer(&format!("/properties/{key}"))
                    && !props.contains_key(key)
                {
                    props.insert(key.to_string(), v.clone());
                }
            }
        }
        for path in SECRETS {
            let Some(secret) = pointer(&old, path).cloned() else { continue };
            if pointer(profile, path).is_some() {
                continue;
            }
            if let Some(Value::Object(parent)) = pointer_mut(profile, &path[..path.len() - 1]) {
                parent.insert(path[path.len() - 1].to_string(), secret);
            }
        }
    }
}

fn pointer<'v>(v: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn pointer_mut<'v>(v: &'v mut Value, path: &[&str]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, k| v.get_mut(k))
}

/// Fields that cannot change once a fleet exists, with the default an absent one means.
const IMMUTABLE: [(&[&str], Option<&str>); 14] = [
    (&["zones"], None),
    (&["properties", "vmSizesProfile"], None),
    (&["properties", "spotPriorityProfile", "minCapacity"], None),
    (&["properties", "spotPriorityProfile", "evictionPolicy"], Some("Delete")),
    (&["properties", "spotPriorityProfile", "allocationStrategy"], Some("PriceCapacityOptimized")),
    (&["properties", "regularPriorityProfile", "minCapacity"], None),
    (&["properties", "regularPriorityProfile", "allocationStrategy"], Some("LowestPrice")),
    (&["properties", "computeProfile"], None),
    (&["properties", "additionalLocationsProfile"], None),
    (&["properties", "vmAttributes"], None),
    (&["properties", "mode"], Some("Managed")),
    (&["properties", "capacityType"], Some("VM")),
    (&["properties", "vmNamePrefix"], None),
    (&["properties", "zoneAllocationPolicy"], None),
];

/// The immutable fields `new` changes relative to `stored` (secrets already kept), as paths
/// (`properties.spotPriorityProfile.minCapacity`). A minimum of 0 and an absent one are the same.
pub fn changed_immutables(stored: &Value, new: &Value) -> Vec<String> {
    let norm = |v: Option<&Value>, default: Option<&str>, path: &[&str]| -> Value {
        match (v, default) {
            (None | Some(Value::Null), Some(d)) => Value::String(d.to_string()),
            (None | Some(Value::Null), None) if path.last() == Some(&"minCapacity") => Value::from(0),
            (None, None) => Value::Null,
            (Some(Value::String(s)), Some(_)) => Value::String(s.to_ascii_lowercase()),
            (Some(v), _) => v.clone(),
        }
    };
    let norm_str = |v: Value| match v {
        Value::String(s) => Value::String(s.to_ascii_lowercase()),
        other => other,
    };
    IMMUTABLE
        .iter()
        .filter(|(path, default)| {
            let a = norm_str(norm(pointer(stored, path), *default, path));
            let b = norm_str(norm(pointer(new, path), *default, path));
            a != b
        })
        .map(|(path, _)| path.join("."))
        .collect()
}

/// PATCH: tags replace the fleet's tags; `identity`, `plan` and `properties` are merged into the
/// fleet as a JSON merge patch (RFC 7386: `null` removes).
pub fn merge_patch(stored: &Value, patch: &Value) -> Value {
    let mut out = stored.clone();
    let Value::Object(p) = patch else { return out };
    let Value::Object(o) = &mut out else { return out };
    for (k, v) in p {
        if k == "tags" {
            o.insert(k.clone(), v.clone());
        } else {
            let merged = merge(o.remove(k).unwrap_or(Value::Null), v);
            if !merged.is_null() {
                o.insert(k.clone(), merged);
            }
        }
    }
    out
}

fn merge(target: Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut t = match target {
                Value::Object(t) => t,
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    let merged = merge(t.remove(k).unwrap_or(Value::Null), v);
                    t.insert(k.clone(), merged);
                }
            }
            Value::Object(t)
        }
        other => other.clone(),
    }
}

/// Drops what an older api-version does not define from a body being returned.
pub fn for_api_version(body: &mut Value, api_version: &str) {
    if is_2026(api_version) {
        return;
    }
    if let Some(Value::Object(p)) = body.get_mut("properties") {
        for (name, _) in FLEET_PROPERTIES.props_2026 {
            p.remove(*name);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_members_are_named_with_their_path() {
        let body = json!({"location": "eastus", "properties": {"spotPriorityProfile": {"capacity": 1, "bogus": 2}}});
        let e = check_known(&body, "2024-11-01", false).unwrap_err();
        assert_eq!(
            e,
            "Could not find member 'bogus' on object of type 'SpotPriorityProfile'. Path \
             'properties.spotPriorityProfile.bogus'."
        );
        let body = json!({"location": "eastus", "properties": {"mode": "Managed"}});
        assert!(check_known(&body, "2024-11-01", false).unwrap_err().contains("'mode'"), "2026 only");
        assert!(check_known(&body, "2026-08-01", false).is_ok());
        let sizes = json!({"properties": {"vmSizesProfile": [{"name": "x", "rank": 0}, {"name": "y", "weight": 1}]}});
        assert!(check_known(&sizes, "2026-08-01", false).unwrap_err().contains("vmSizesProfile[1].weight"));
        // Compute's VM profile is opaque here.
        let vm = json!({"properties": {"computeProfile": {"baseVirtualMachineProfile": {"anything": 1}}}});
        assert!(check_known(&vm, "2024-11-01", false).is_ok());
        assert!(check_known(&json!({"location": "x"}), "2026-08-01", true).unwrap_err().contains("FleetUpdate"));
    }

    #[test]
    fn secrets_are_stripped_and_kept_across_a_put_without_them() {
        let stored = json!({"properties": {"computeProfile": {"baseVirtualMachineProfile": {
            "osProfile": {"adminUsername": "u", "adminPassword": "p4ss", "customData": "Y2xvdWQ="},
            "extensionProfile": {"extensions": [{"name": "e", "properties": {"protectedSettings": {"k": 1}, "settings": {}}}]}
        }}}});
        let mut shown = stored.clone();
        strip_secrets(&mut shown);
        let text = shown.to_string();
        assert!(!text.contains("p4ss") && !text.contains("Y2xvdWQ=") && !text.contains("protectedSettings"), "{text}");
        assert!(text.contains("adminUsername"));
        let mut back = shown.clone();
        keep_secrets(&mut back, &stored);
        assert!(changed_immutables(&stored, &back).is_empty(), "a GET-then-PUT changes nothing");
        let mut other = shown;
        other["properties"]["computeProfile"]["baseVirtualMachineProfile"]["osProfile"]["adminPassword"] = json!("new");
        keep_secrets(&mut other, &stored);
        assert_eq!(changed_immutables(&stored, &other), ["properties.computeProfile"]);
    }

    #[test]
    fn immutables_compare_with_defaults() {
        let a = json!({"properties": {"spotPriorityProfile": {"capacity": 2}}});
        let b = json!({"properties": {"spotPriorityProfile": {"capacity": 5, "minCapacity": 0, "evictionPolicy": "delete"}}});
        assert!(changed_immutables(&a, &b).is_empty());
        let c = json!({"zones": ["1"], "properties": {"spotPriorityProfile": {"capacity": 5, "minCapacity": 1}}});
        assert_eq!(changed_immutables(&a, &c), ["zones", "properties.spotPriorityProfile.minCapacity"]);
    }

    #[test]
    fn merge_patch_follows_rfc_7386_and_replaces_tags() {
        let stored = json!({"tags": {"a": "1", "b": "2"}, "properties": {"spotPriorityProfile": {"capacity": 2, "maintain": true}}});
        let patch =
            json!({"tags": {"c": "3"}, "properties": {"spotPriorityProfile": {"capacity": 4, "maintain": null}}});
        let out = merge_patch(&stored, &patch);
        assert_eq!(out, json!({"tags": {"c": "3"}, "properties": {"spotPriorityProfile": {"capacity": 4}}}));
    }
}
