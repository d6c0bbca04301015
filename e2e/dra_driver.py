"""fitgate's fake DRA driver: ResourceSlices for kwok nodes, by node shape.

A real DRA driver runs as a kubelet plugin on every node and publishes the node's devices
as ResourceSlices. kwok nodes have no kubelet, so this process does the publishing from
outside, the way kwok's DRA example and the scheduler's own perf tests do: kube-scheduler
then allocates claims against these slices exactly as it would against a real driver's.

What a node publishes is decided by its *shape*, named by the node label
``e2e.fitgate.io/shape``. Shapes live in the ConfigMap ``fitgate-e2e-shapes`` (in the
driver's namespace), one key per shape, each a YAML document::

    driver: gpu.e2e.fitgate.io      # optional; this is the default
    delaySeconds: 5                 # publish this long after the node first appears
    devices: [<ResourceSlice v1 device>, ...]   # what the shape promises
    faultyDevices: [<device>, ...]  # what a faulty node publishes instead
    faultyNodes: annotated          # "annotated" (default) or "all"
    sharedCounters: [<CounterSet>, ...]   # optional: partitionable devices' counters

With ``sharedCounters`` the node's pool is two slices, as resource.k8s.io/v1 requires (a
slice holds devices or counter sets, never both): ``<node>-<driver>`` with the devices
(whose ``consumesCounters`` name those sets) and ``<node>-<driver>-counters`` with the
counter sets, both of ``resourceSliceCount: 2`` and one generation.

A node is faulty when its shape says ``faultyNodes: all`` or the node carries the
annotation ``e2e.fitgate.io/faulty: "true"``; the annotation
``e2e.fitgate.io/slice-delay-seconds`` overrides the shape's delay for one node. So tests
reproduce slow nodes (delay) and wrong nodes (fault: different devices than promised).

The driver also creates one DeviceClass per driver name, named after the driver and
selecting all its devices. It reconciles by polling (every ``--interval`` seconds): it is
test tooling for clusters of tens of nodes, and polling keeps it obviously correct.
Slices are owned by their Node, so they also go when the node goes. ``/healthz`` answers
200 after the first successful pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import re
import signal
import time
from typing import Any

import yaml
from aiohttp import web
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

DEFAULT_DRIVER = "gpu.e2e.fitgate.io"
SHAPE_LABEL = "e2e.fitgate.io/shape"
SHAPES_CONFIGMAP = "fitgate-e2e-shapes"
FAULTY_ANNOTATION = "e2e.fitgate.io/faulty"
DELAY_ANNOTATION = "e2e.fitgate.io/slice-delay-seconds"
MANAGED_LABEL = "e2e.fitgate.io/managed-by"
MANAGER = "fake-dra-driver"
RESOURCE = ("resource.k8s.io", "v1")

log = logging.getLogger("fake-dra-driver")


def slice_name(node: str, driver: str) -> str:
    """A DNS-1123 name for the one slice of (node, driver)."""
    name = f"{node}-{re.sub(r'[^a-z0-9-]', '-', driver.lower())}"
    return name[:253].strip("-")


def desired_devices(shape: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The devices ``node`` publishes: the shape's, or its faulty ones."""
    annotations = node["metadata"].get("annotations") or {}
    faulty = (shape.get("faultyNodes") == "all"
              or annotations.get(FAULTY_ANNOTATION) == "true")
    if faulty and "faultyDevices" in shape:
        return list(shape["faultyDevices"])
    return list(shape.get("devices") or [])


def delay_seconds(shape: dict[str, Any], node: dict[str, Any]) -> float:
    annotations = node["metadata"].get("annotations") or {}
    raw = annotations.get(DELAY_ANNOTATION, shape.get("delaySeconds", 0))
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        return 0.0


def counters_slice_name(node: str, driver: str) -> str:
    """The name of the slice holding (node, driver)'s shared counters."""
    return f"{slice_name(node, driver)[:244]}-counters"


def resource_slice(node: dict[str, Any], driver: str, devices: list[dict[str, Any]],
                   generation: int, slice_count: int = 1,
                   shared_counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The devices slice of (node, driver), or with ``shared_counters`` its counters
    slice; ``slice_count`` is the pool's ``resourceSliceCount``."""
    name = node["metadata"]["name"]
    spec: dict[str, Any] = {
        "driver": driver, "nodeName": name,
        "pool": {"name": name, "generation": generation, "resourceSliceCount": slice_count}}
    if shared_counters is not None:
        spec["sharedCounters"] = shared_counters
    else:
        spec["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {
            "name": (counters_slice_name(name, driver) if shared_counters is not None
                     else slice_name(name, driver)),
            "labels": {MANAGED_LABEL: MANAGER},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                 "uid": node["metadata"]["uid"]}],
        },
        "spec": spec,
    }


def desired_slices(shape: dict[str, Any], node: dict[str, Any], driver: str,
                   generation: int) -> list[dict[str, Any]]:
    """The slices of ``node``'s pool: devices, and the counter sets if the shape has any."""
    devices = desired_devices(shape, node)
    counters = shape.get("sharedCounters")
    if not counters:
        return [resource_slice(node, driver, devices, generation)]
    return [resource_slice(node, driver, devices, generation, 2),
            resource_slice(node, driver, [], generation, 2, list(counters))]


def device_class(driver: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": driver, "labels": {MANAGED_LABEL: MANAGER}},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def _content(slice_: dict[str, Any]) -> tuple[Any, ...]:
    """What a published slice says, generation aside."""
    spec = slice_["spec"]
    return (spec.get("devices") or [], spec.get("sharedCounters") or [],
            spec["pool"].get("resourceSliceCount"))


class Driver:
    """One reconcile pass at a time over nodes, shapes and our slices."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.first_seen: dict[str, float] = {}  # node uid -> monotonic time first seen
        self.healthy = False
        self.classes: set[str] = set()

    async def shapes(self) -> dict[str, dict[str, Any]]:
        try:
            cm = await self.core.read_namespaced_config_map(SHAPES_CONFIGMAP, self.namespace)
        except ApiException as err:
            if err.status == 404:
                return {}
            raise
        out = {}
        for key, text in (cm.data or {}).items():
            try:
                out[key] = yaml.safe_load(text) or {}
            except yaml.YAMLError:
                log.warning("shape %s is not valid YAML; ignored", key)
        return out

    async def ensure_class(self, driver: str) -> None:
        if driver in self.classes:
            return
        try:
            await self.custom.create_cluster_custom_object(*RESOURCE, "deviceclasses",
                                                           device_class(driver))
        except ApiException as err:
            if err.status != 409:
                raise
        self.classes.add(driver)

    async def reconcile(self) -> None:
        shapes = await self.shapes()
        resp = await self.core.list_node(label_selector=SHAPE_LABEL, _preload_content=False)
        nodes = json.loads(await resp.read())["items"]  # type: ignore[attr-defined]  # raw response
        existing = await self.custom.list_cluster_custom_object(
            *RESOURCE, "resourceslices", label_selector=f"{MANAGED_LABEL}={MANAGER}")
        current = {s["metadata"]["name"]: s for s in existing["items"]}
        wanted: set[str] = set()
        now = time.monotonic()
        await self.ensure_class(DEFAULT_DRIVER)
        for node in nodes:
            meta = node["metadata"]
            shape = shapes.get((meta.get("labels") or {}).get(SHAPE_LABEL, ""))
            if shape is None:
                continue
            driver = shape.get("driver", DEFAULT_DRIVER)
            await self.ensure_class(driver)
            names = [slice_name(meta["name"], driver),
                     counters_slice_name(meta["name"], driver)]
            seen = self.first_seen.setdefault(meta["uid"], now)
            if now - seen < delay_seconds(shape, node):
                continue  # not yet: a slow node has published nothing
            olds = [current.get(n) for n in names]
            gen = max((int(o["spec"]["pool"].get("generation", 1)) for o in olds if o),
                      default=1)
            slices = desired_slices(shape, node, driver, gen)
            wanted.update(s["metadata"]["name"] for s in slices)
            changed = any(current.get(s["metadata"]["name"]) is None
                          or _content(current[s["metadata"]["name"]]) != _content(s)
                          for s in slices)
            if not changed:
                continue
            if any(olds):  # a new generation, so the scheduler never mixes the two
                slices = desired_slices(shape, node, driver, gen + 1)
            for body in slices:
                old = current.get(body["metadata"]["name"])
                if old is None:
                    await self.custom.create_cluster_custom_object(
                        *RESOURCE, "resourceslices", body)
                else:
                    body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                    await self.custom.replace_cluster_custom_object(
                        *RESOURCE, "resourceslices", body["metadata"]["name"], body)
                log.info("published %s (%d devices, %d counter sets, generation %d)",
                         body["metadata"]["name"], len(body["spec"].get("devices") or []),
                         len(body["spec"].get("sharedCounters") or []),
                         body["spec"]["pool"]["generation"])
        for name in set(current) - wanted:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(*RESOURCE, "resourceslices",
                                                               name)
            log.info("withdrew %s", name)
        live = {n["metadata"]["uid"] for n in nodes}
        for uid in set(self.first_seen) - live:
            del self.first_seen[uid]
        self.healthy = True


async def serve_health(driver: Driver, port: int) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(status=200 if driver.healthy else 503,
                            text="ok" if driver.healthy else "starting")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def run(args: argparse.Namespace) -> None:
    await config.load_kube_config(config_file=args.kubeconfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with client.ApiClient() as api:
        driver = Driver(api, args.namespace)
        runner = await serve_health(driver, args.health_port)
        deadline = time.monotonic() + args.max_lifetime
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    await asyncio.wait_for(driver.reconcile(), timeout=30)
                except (TimeoutError, ApiException, OSError) as err:
                    log.warning("reconcile failed: %s", err)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=args.interval)
        finally:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="fitgate-e2e-system",
                        help="where the shapes ConfigMap lives")
    parser.add_argument("--health-port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between passes")
    parser.add_argument("--max-lifetime", type=float, default=6 * 3600,
                        help="exit after this many seconds in any case")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
