"""All or nothing when one instance type's capacity runs out partway (issue #22).

Two NodePools fitgate may use, both nodes of 8 GPUs on one PCIe root, so scenario 1's gang
(4 pods of 30 CPUs and 8 GPUs on one root) fits either:

- ``cap-cheap``: instance type ``gpu-one-root-8x``, NodeShape price 10;
- ``cap-dear``: instance type ``gpu-one-root-8x-xl`` (64 CPUs), price 16.

fitgate plans the gang on the cheapest shape: 4 NodeClaims of ``cap-cheap``. The cloud has
only 2 of that instance type left.

How the capacity runs out. Karpenter v1.15.0's kwok provider keeps no count of an
instance type: its offerings are forced available (``setDefaultOptions`` in
``kwok/cloudprovider/helpers.go``), and NodePool ``spec.limits`` bind only Karpenter's own
provisioner (``provisioner.go``), not a NodeClaim created by someone else. The one
insufficient-capacity answer its ``Create`` gives is for a NodeClaim whose KWOKNodeClass
does not exist (``NewInsufficientCapacityError`` in ``kwok/cloudprovider/
cloudprovider.go``); Karpenter then does what it does with any cloud's
InsufficientCapacity (``pkg/controllers/nodeclaim/lifecycle/launch.go``): publishes an
``InsufficientCapacityError`` Event on the NodeClaim and deletes it, while the NodeClaims
that did launch stay. To get that for the third and later node of ``cap-cheap`` only, a
MutatingAdmissionPolicy (Kubernetes' own, GA since 1.36) points those NodeClaims at a
KWOKNodeClass that does not exist, as they are created. That policy stands for the
cloud's stock; everything after it is Karpenter's own code. Names decide which nodes are
"sold out" (fitgate's NodeClaims end in ``-<node index>``), so the split is the same on
every run.

``ClaimLog`` watches the NodeClaims so the test sees what happened to each one, the short
lives included: the two that launched are deleted by fitgate within a second or two.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from typing import Any

import yaml
from kubernetes_asyncio import client

from e2e import builders, dra_driver, harness
from e2e.cluster.local import cluster
from e2e.karpenter import scenario
from e2e.scenarios import figures, topology

SCENARIO = "all or nothing: capacity runs out partway (Karpenter)"
CHEAP = scenario.Pool("cap-cheap", "gpu-one-root-8x", 8, "47", "10")
DEAR = scenario.Pool("cap-dear", "gpu-one-root-8x-xl", 8, "63", "16")
#: How many nodes of CHEAP's instance type the cloud still has.
LEFT = 2
#: The KWOKNodeClass the sold-out NodeClaims are pointed at: it does not exist.
SOLD_OUT_CLASS = "sold-out"
POLICY = "cap-cheap-sold-out"
#: DEAR's nodes register 5 s after their NodeClaim launches (an instance booting), so the
#: check's message while the gang waits for them is there to be read.
BOOTING_CLASS = "boot-5s"
ADMISSION_API = "admissionregistration.k8s.io/v1"
KARPENTER_API = "karpenter.sh/v1"


def sold_out_policy(pool: scenario.Pool, left: int) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy (and its binding) that makes every NodeClaim of `pool`
    from node index `left` on unlaunchable: its nodeClassRef names SOLD_OUT_CLASS."""
    launchable = " || ".join(f"object.metadata.name.endsWith('-{i}')" for i in range(left))
    return [
        {"apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": POLICY},
         "spec": {
             "matchConstraints": {"resourceRules": [{
                 "apiGroups": ["karpenter.sh"], "apiVersions": ["v1"],
                 "operations": ["CREATE"], "resources": ["nodeclaims"]}]},
             "matchConditions": [{
                 "name": f"node-{left}-and-later-of-{pool.name}",
                 "expression": (
                     "has(object.metadata.labels) && "
                     f"object.metadata.labels[?'{scenario.NODE_POOL_LABEL}']"
                     f".orValue('') == '{pool.name}' && !({launchable})")}],
             "failurePolicy": "Fail",
             "reinvocationPolicy": "Never",
             "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                 "[JSONPatch{op: 'replace', path: '/spec/nodeClassRef/name', "
                 f"value: '{SOLD_OUT_CLASS}'}}]")}}]}},
        {"apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": POLICY},
         "spec": {"policyName": POLICY}},
    ]


def setup(local: cluster.LocalCluster) -> None:
    """The fake driver's shapes, the two NodePools and the sold-out policy."""
    dear = scenario.node_pool(DEAR)
    dear["spec"]["template"]["spec"]["nodeClassRef"]["name"] = BOOTING_CLASS
    local.apply([
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
         "metadata": {"name": BOOTING_CLASS}, "spec": {"nodeRegistrationDelay": "5s"}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                      "namespace": cluster.SYSTEM_NAMESPACE},
         "data": {p.name: yaml.safe_dump(builders.shape(scenario.devices(p)),
                                         sort_keys=False) for p in (CHEAP, DEAR)}},
        scenario.node_pool(CHEAP), dear, *sold_out_policy(CHEAP, LEFT)])


def teardown(local: cluster.LocalCluster) -> None:
    for obj in reversed(sold_out_policy(CHEAP, LEFT)):
        local.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"],
                      "--ignore-not-found")


# -- what happened to each NodeClaim ------------------------------------------------------


@dataclasses.dataclass
class ClaimHistory:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    node_class: str
    launched: bool = False  # Launched=True seen
    deleted: bool = False  # DELETED seen

    @property
    def attempt(self) -> str:
        return self.labels.get("fitgate.io/attempt", "")

    @property
    def plan_index(self) -> str:
        return self.annotations.get("fitgate.io/plan-index", "")

    @property
    def node_pool(self) -> str:
        return self.labels.get(scenario.NODE_POOL_LABEL, "")


class ClaimLog:
    """Every NodeClaim seen by one watch, from `start()` to `stop()`."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.claims: dict[str, ClaimHistory] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(await self._list()))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _call(self, query: dict[str, str]) -> Any:
        resp = await self.api.call_api(
            f"/apis/{KARPENTER_API}/nodeclaims", "GET", query_params=list(query.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=900)
        if resp.status != 200:
            raise AssertionError(f"NodeClaims {query}: HTTP {resp.status}: "
                                 f"{(await resp.read())[:300]!r}")
        return resp

    async def _list(self) -> str:
        """Every NodeClaim now; returns the list's resourceVersion."""
        listing = json.loads(await (await self._call({})).read())
        for obj in listing.get("items") or []:
            self._see("ADDED", obj)
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, rv: str) -> None:
        """Watch from `rv`; again from the last resourceVersion when the server ends the
        watch, from a fresh list when it says the version is too old."""
        while True:
            resp = await self._call({"watch": "true", "resourceVersion": rv,
                                     "allowWatchBookmarks": "true"})
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # e.g. 410 Gone
                        rv = await self._list()
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._see(event["type"], obj)

    def _see(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta["name"]
        h = self.claims.get(name)
        if h is None:
            h = self.claims[name] = ClaimHistory(
                name, dict(meta.get("labels") or {}), dict(meta.get("annotations") or {}),
                str(((obj.get("spec") or {}).get("nodeClassRef") or {}).get("name")))
        h.labels.update(meta.get("labels") or {})
        if any(c.get("type") == "Launched" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or []):
            h.launched = True
        if kind == "DELETED":
            h.deleted = True

    def of_plan(self, attempt: int, index: int) -> list[ClaimHistory]:
        return sorted((h for h in self.claims.values() if h.attempt == str(attempt)
                       and h.plan_index == str(index)), key=lambda h: h.name)


# -- figures ------------------------------------------------------------------------------


async def gang_nodes(e2e: harness.Harness, job: str) -> tuple[dict[str, str], float]:
    """The nodes the gang's pods run on (node -> instance type), and their node-seconds
    from creation to the first pod Running there."""
    first_pod_on: dict[str, float] = {}
    for pod in await e2e.pods_of_job(job):
        since, node = topology._pod_running_since(pod), pod["spec"].get("nodeName")
        if since is not None and node:
            first_pod_on[node] = min(since, first_pod_on.get(node, since))
    nodes: dict[str, str] = {}
    unused = 0.0
    for name, since in first_pod_on.items():
        node = await e2e.kube.get("v1", "Node", name) or {"metadata": {}}
        nodes[name] = (node["metadata"].get("labels") or {}).get(
            scenario.INSTANCE_TYPE_LABEL, "?")
        created = topology._ts(node["metadata"].get("creationTimestamp")) or since
        unused += max(0.0, since - created)
    return nodes, unused


def row(run: scenario.Run, gang: dict[str, str], unused: float, released: dict[str, int],
        deleted_by_fitgate: int, deleted_by_karpenter: int, leaked: int) -> figures.Row:
    """The figures row: time to all pods Running, the nodes the gang runs on per instance
    type (`gang`: node -> instance type), the nodes launched for the failed attempt and
    released, and who deleted that attempt's NodeClaims."""
    counts: dict[str, int] = {}
    for t in gang.values():
        counts[t] = counts.get(t, 0) + 1
    nodes = (f"{len(gang)} (" + ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
             + ")") if gang else "0"
    if released:
        nodes += "; launched, then released: " + ", ".join(
            f"{n} {t}" for t, n in sorted(released.items()))
    outcome = (f"all {topology.GANG_PODS} pods Running" if run.seconds is not None
               else f"not running after {run.timeout:.0f} s")
    note = (f"first attempt's {deleted_by_fitgate + deleted_by_karpenter} NodeClaims all "
            f"deleted: {deleted_by_fitgate} launched (deleted by fitgate), "
            f"{deleted_by_karpenter} refused by Karpenter (InsufficientCapacityError)")
    if leaked:
        note += (f"; kwok left {leaked} node(s) of deleted unregistered NodeClaims "
                 "(its Delete removes the NodeClaim, not the node), removed by the test")
    return figures.Row(SCENARIO, "fitgate", outcome, run.seconds, nodes, unused, note)
