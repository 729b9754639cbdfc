"""The official Azure SDK for Python against `spillway emulate-arm`.

Run by `simulator/tests/azure_sdk.rs`, which starts two emulators (a plain one and one that
throttles) and passes them in the environment:

    SPILLWAY_EMU_URL, SPILLWAY_EMU_THROTTLED_URL, SPILLWAY_EMU_TOKEN, SPILLWAY_EMU_SUB,
    SPILLWAY_SDK_RESULTS (a JSON file this script writes)

Each case records what the SDK observed in a short normalised form (the Rust side records the same
forms for `AzureCloud`, and the test asserts both clients agree), and whether the SDK's own checks
passed. The SDK clients use a static bearer token and `enforce_https=False` for loopback.
"""

import json
import os
import re
import sys
import time
import traceback

from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.computefleet import ComputeFleetMgmtClient
from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy

A100 = "Standard_NC24ads_A100_v4"
RG = "rg-sdk"
PASSWORD = "Sdk-Pass-123!"
CUSTOM_DATA = "I2Nsb3VkLWNvbmZpZw=="


class StaticToken:
    """A fixed bearer token: the emulator checks it, no identity service is involved."""

    def __init__(self, token):
        self.token = token

    def get_token(self, *scopes, **kwargs):
        return AccessToken(self.token, int(time.time()) + 3600)

    def get_token_info(self, *scopes, options=None):
        return AccessTokenInfo(self.token, int(time.time()) + 3600)


class LoopbackBearerPolicy(ARMChallengeAuthenticationPolicy):
    """The SDK's own ARM bearer policy with `enforce_https=False` on every request (azure-core reads
    it per request): the emulator listens on plain http on loopback."""

    def on_request(self, request):
        request.context.options["enforce_https"] = False
        return super().on_request(request)


def clients(url, token, sub):
    cred = StaticToken(token)
    scopes = [url + "/.default"]
    kwargs = dict(
        base_url=url,
        credential_scopes=scopes,
        authentication_policy=LoopbackBearerPolicy(cred, *scopes),
        polling_interval=0.02,
        retry_backoff_factor=0.05,
    )
    return ComputeFleetMgmtClient(cred, sub, **kwargs), ComputeManagementClient(cred, sub, **kwargs)


def body(regular=0, regular_min=0, spot=0, spot_min=0, location="eastus"):
    props = {
        "vmSizesProfile": [{"name": A100, "rank": 0}],
        "computeProfile": {
            "baseVirtualMachineProfile": {
                "osProfile": {"adminUsername": "azureuser", "adminPassword": PASSWORD, "customData": CUSTOM_DATA}
            },
            "computeApiVersion": "2024-03-01",
            "platformFaultDomainCount": 1,
        },
    }
    if spot:
        props["spotPriorityProfile"] = {
            "capacity": spot,
            "minCapacity": spot_min,
            "maxPricePerVM": 50.0,
            "evictionPolicy": "Delete",
            "allocationStrategy": "PriceCapacityOptimized",
            "maintain": True,
        }
    if regular:
        props["regularPriorityProfile"] = {
            "capacity": regular,
            "minCapacity": regular_min,
            "allocationStrategy": "LowestPrice",
        }
    return {"location": location, "tags": {"spillway-job": "sdk"}, "properties": props}


def text(v):
    """An open enum's wire value (`Succeeded`, not `ProvisioningState.SUCCEEDED`)."""
    return getattr(v, "value", v)


def fleet_form(f):
    """`Succeeded regular 2/2`, or `Succeeded spot 2/0 regular 2/2` for a mixed fleet."""
    p = f.properties
    parts = []
    if p.spot_priority_profile and (p.spot_priority_profile.capacity or 0) > 0:
        parts.append(f"spot {p.spot_priority_profile.capacity}/{p.spot_priority_profile.min_capacity or 0}")
    if p.regular_priority_profile and (p.regular_priority_profile.capacity or 0) > 0:
        parts.append(f"regular {p.regular_priority_profile.capacity}/{p.regular_priority_profile.min_capacity or 0}")
    return f"{text(p.provisioning_state)} " + " ".join(parts)


def vm_form(fleet, name):
    vms = list(fleet.fleets.list_virtual_machines(RG, name))
    running = [v for v in vms if v.operation_status == "Succeeded"]
    spot = sum(1 for v in running if (v.priority or "").lower() == "spot")
    return f"spot={spot} regular={len(running) - spot}"


def code_of(e):
    return e.error.code if getattr(e, "error", None) is not None else None


def quota_form(e):
    m = e.error.message
    pool = re.search(r"exceeding approved (.+?) quota", m).group(1)
    pool = {"Total Regional Cores": "cores", "LowPriorityCores": "lowPriorityCores"}.get(pool, pool.removesuffix(" Cores"))
    num = lambda k: re.search(k + r": (\d+)", m).group(1)
    return f"quota {pool} limit={num('Current Limit')} usage={num('Current Usage')} required={num('Additional Required')}"


# Error code -> the class the project's NOTES give it (the Rust side reports AzureCloud's class).
CLASSES = {"AllocationFailed": "capacity", "ZonalAllocationFailed": "capacity", "SkuNotAvailable": "size_unavailable"}


def run(env):
    url, token, sub = env["SPILLWAY_EMU_URL"], env["SPILLWAY_EMU_TOKEN"], env["SPILLWAY_EMU_SUB"]
    fleet, compute = clients(url, token, sub)
    results = {}

    def case(name, fn):
        try:
            observed, checks = fn()
            results[name] = {"observed": observed, "ok": all(checks), "checks": checks}
        except Exception:  # noqa: BLE001 - every failure is reported in the table
            results[name] = {"observed": None, "ok": False, "error": traceback.format_exc(limit=4)}

    def usages():
        rows = {u.name.value: u for u in compute.usage.list("eastus", api_version="2024-07-01")}
        c, lp = rows["cores"], rows["lowPriorityCores"]
        return f"cores {c.current_value}/{c.limit} lowPriorityCores {lp.current_value}/{lp.limit}", [c.unit == "Count"]

    case("usages", usages)

    def usages_current_version():
        # azure-mgmt-compute 39 defaults usages to 2026-04-01: served, with the same rows as
        # 2024-07-01. A version ARM does not serve is refused as ARM refuses it, listing those it does.
        rows = {u.name.value: u for u in compute.usage.list("eastus")}
        c, lp = rows["cores"], rows["lowPriorityCores"]
        observed = f"cores {c.current_value}/{c.limit} lowPriorityCores {lp.current_value}/{lp.limit}"
        try:
            list(compute.usage.list("eastus", api_version="2027-01-01"))
            return observed + "; 2027-01-01 served", [False]
        except HttpResponseError as e:
            code = code_of(e)
            refused = [e.status_code == 400, code == "NoRegisteredProviderFound", "2026-04-01" in e.error.message]
        return f"{observed}; 2027-01-01 {code}", [c.unit == "Count", *refused]

    case("usages-2026-04-01", usages_current_version)

    def skus():
        items = list(compute.resource_skus.list(filter="location eq 'eastus'"))
        restricted = sorted(
            f"{s.name}:{text(r.type)}:{text(r.reason_code)}" for s in items for r in s.restrictions
        )
        unrestricted = [s for s in items if not s.restrictions]
        checks = [all(s.restrictions == [] for s in unrestricted), len(unrestricted) > 0]
        checks += [r.restriction_info.zones is not None for s in items for r in s.restrictions]
        return ",".join(restricted), checks

    case("skus", skus)

    def create():
        f = fleet.fleets.begin_create_or_update(RG, "sdk-reg", body(regular=2, regular_min=1)).result()
        shown = json.dumps(f.as_dict())
        return fleet_form(f), [PASSWORD not in shown, CUSTOM_DATA not in shown, "adminPassword" not in shown]

    case("create", create)

    def get():
        f = fleet.fleets.get(RG, "sdk-reg")
        shown = json.dumps(f.as_dict())
        sizes = ",".join(s.name for s in f.properties.vm_sizes_profile)
        return f"{f.location} {fleet_form(f)} {sizes}", [PASSWORD not in shown, f.properties.time_created is not None]

    case("get", get)

    def vms():
        return vm_form(fleet, "sdk-reg"), [True]

    case("vms", vms)

    def update():
        f = fleet.fleets.begin_create_or_update(RG, "sdk-reg", body(regular=3, regular_min=1)).result()
        return f"{fleet_form(f)} {vm_form(fleet, 'sdk-reg')}", [True]

    case("update", update)

    def update_immutable():
        try:
            fleet.fleets.begin_create_or_update(RG, "sdk-reg", body(regular=3, regular_min=2)).result()
            return "applied", [False]
        except HttpResponseError as e:
            return code_of(e), [e.status_code == 409, "minCapacity" in e.error.message]

    case("update-immutable", update_immutable)

    def patch():
        f = fleet.fleets.begin_update(
            RG, "sdk-reg", {"tags": {"owner": "ml"}, "properties": {"regularPriorityProfile": {"capacity": 2}}}
        ).result()
        return f"{fleet_form(f)} {vm_form(fleet, 'sdk-reg')}", [f.tags == {"owner": "ml"}]

    case("patch", patch)

    def quota_error():
        try:
            fleet.fleets.begin_create_or_update(RG, "sdk-big", body(regular=5, regular_min=5)).result()
            return "created", [False]
        except HttpResponseError as e:
            return quota_form(e), [e.status_code == 409, code_of(e) == "OperationNotAllowed"]

    case("quota-error", quota_error)

    def allocation_error():
        poller = fleet.fleets.begin_create_or_update(RG, "sdk-west", body(regular=1, regular_min=1, location="westus3"))
        try:
            poller.result()
            return "created", [False]
        except HttpResponseError as e:
            return f"{CLASSES.get(code_of(e), code_of(e))} westus3", [code_of(e) == "AllocationFailed"]

    case("allocation-error", allocation_error)

    def mixed():
        f = fleet.fleets.begin_create_or_update(RG, "sdk-mix", body(spot=2, spot_min=0, regular=2, regular_min=2)).result()
        before = vm_form(fleet, "sdk-mix")
        import urllib.request

        req = urllib.request.Request(
            f"{url}/_emulator/fleets/sdk-mix/evict-now?vms=2", method="POST", headers={"Authorization": f"Bearer {token}"}
        )
        urllib.request.urlopen(req).read()
        after = vm_form(fleet, "sdk-mix")
        state = fleet.fleets.get(RG, "sdk-mix").properties.provisioning_state
        return f"{fleet_form(f)}; {before}; evicted: {after} {text(state)}", [True]

    case("mixed", mixed)

    def listing():
        by_rg = sorted(f.name for f in fleet.fleets.list_by_resource_group(RG))
        by_sub = sorted(f.name for f in fleet.fleets.list_by_subscription())
        shown = json.dumps([f.as_dict() for f in fleet.fleets.list_by_resource_group(RG)])
        return ",".join(by_rg), [by_rg == by_sub, PASSWORD not in shown]

    case("list", listing)

    def delete():
        fleet.fleets.begin_delete(RG, "sdk-reg").result()
        try:
            fleet.fleets.get(RG, "sdk-reg")
            return "still there", [False]
        except ResourceNotFoundError:
            return "NotFound", [True]

    case("delete", delete)

    def unauthorized():
        bad, _ = clients(url, "not-the-token", sub)
        try:
            bad.fleets.get(RG, "sdk-mix")
            return "served", [False]
        except ClientAuthenticationError as e:
            return code_of(e), [e.status_code == 401]

    case("401", unauthorized)

    def throttling():
        _, throttled = clients(env["SPILLWAY_EMU_THROTTLED_URL"], token, sub)
        for _ in range(3):
            list(throttled.usage.list("eastus", api_version="2024-07-01"))
        return "ok", [True]

    case("throttling", throttling)
    return results


def main():
    results = run(os.environ)
    with open(os.environ["SPILLWAY_SDK_RESULTS"], "w") as out:
        json.dump(results, out, indent=1)
    for name, r in results.items():
        print(f"{name:20} {'pass' if r['ok'] else 'FAIL'}  {r['observed']}")
        if not r["ok"]:
            print(r.get("error") or r.get("checks"))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
