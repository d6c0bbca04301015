"""The node ledger: which nodes are held for which gang while the check decides.

Two holds keep two gangs off the same devices, on top of what the inventory shows in use:

- *promises*: between Ready and its pods binding, an admitted gang's devices are not yet
  allocated, so the inventory shows them free; until every pod placed on a node has bound
  there, that node is held for the gang (`promise`, `promised_nodes`);
- *owners*: the new nodes a fitgate ProvisioningRequest brought belong to that request's
  gang until it is admitted (`node_owners`, `requested_nodes`).

A gang that would fit but for promised nodes waits; the pod event that ends a promise
it waits for queues it again (`wait`, `woken`), the poll after `promise_poll_seconds`
stays the fallback. `held_for_others` is the union a decision leaves out. Owners are
derived from the stores on each pass from the requests fitgate wrote (`trusted`);
promises are kept in memory and read back by a replica that takes over
(`promises.Recovery`). What a pass reads of the Nodes and Pods comes from indexes the
stores' events keep (`ledgerindex`: the nodes created since a time, the pods bound per
placement owner), so a decision costs what it reads, not a pass over every node and pod.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import fitcore
from admission import clock as clock_
from admission import constants as c
from admission import kueue
from admission.check import inputs, ledgerindex, provisioning, trusted
from admission.kube import client, store


class NodeLedger:
    def __init__(self, stores: inputs.Stores, clock: clock_.Clock, promise_seconds: int,
                 inventory: inputs.Inventory | None = None) -> None:
        self.stores = stores
        # The engine's inventory, told what a promise holds (`assume`): None holds whole
        # nodes only (tools, tests of the ledger alone).
        self.inventory = inventory
        # uid -> what the promised gang needs of devices (`fitcore.device_kind`), for the
        # promises the inventory counts; node by node, those still counted.
        self._kind: dict[str, fitcore.DeviceKind] = {}
        self._assumed: dict[str, tuple[str, set[str], float]] = {}  # namespace, nodes, since
        self.clock = clock
        self.promise_seconds = promise_seconds
        # uid -> (namespace, pods placed per node, when): nodes promised to a gang this
        # reconciler admitted, until its pods have bound there (see promised_nodes).
        self._promised: dict[str, tuple[str, dict[str, int], float]] = {}
        # Workload key -> the promised nodes its last pass would have used: woken when
        # one of them is no longer held (`wait`, `woken`), not only at the next poll.
        self._waiting: dict[str, frozenset[str]] = {}
        # Kept from the stores' events: nodes in creation order, pods bound per owner.
        self._nodes = ledgerindex.NodesByCreation(stores.nodes)
        self._bound = ledgerindex.BoundPods(stores.pods)
        self.provisioned = ProvisionedRequests(stores.provisioning_requests)
        self._requests = ledgerindex.Requests(stores.provisioning_requests)

    def promise(self, wl: client.Obj, placements: Sequence[fitcore.Placement],
                gang: fitcore.Gang | None = None) -> None:
        """Hold the nodes of an admitted gang's placements until its pods bind there.
        With the `gang` (and an inventory), when its devices do not depend on the order
        the scheduler takes them in (`fitcore.device_kind`), its pods and devices are
        counted as in use there meanwhile, and gangs whose devices cannot collide with its
        own share those nodes (`fitcore.kinds_compatible`)."""
        meta = _meta(wl)
        uid = str(meta.get("uid"))
        self.drop(uid)
        per_node: dict[str, int] = {}
        for p in placements:
            per_node[p.node] = per_node.get(p.node, 0) + 1
        self._promised[uid] = (str(meta.get("namespace") or ""), per_node,
                               self.clock.monotonic())
        kind = fitcore.device_kind(gang) if gang is not None else None
        # A gang whose devices depend on the order the scheduler takes them in holds its
        # nodes whole for every other gang: counting it would only cost each decision
        # the changed nodes.
        if gang is not None and kind is not None and self.inventory is not None:
            self.inventory.assume(uid, gang, placements)
            self._kind[uid] = kind
            self._assumed[uid] = (str(meta.get("namespace") or ""), set(per_node),
                                  self.clock.monotonic())

    def drop(self, uid: str) -> None:
        """End the gang's promise, if any (its check is decided again, or it left)."""
        self._promised.pop(uid, None)
        self._release(uid, None)

    def _release(self, uid: str, nodes: Collection[str] | None) -> None:
        """Stop counting the promise's pods on `nodes` (None: all, and the promise)."""
        counted = self._assumed[uid][1] if uid in self._assumed else None
        if counted is None:
            return
        if nodes is None or not counted - set(nodes):
            del self._assumed[uid], self._kind[uid]
            if self.inventory is not None:
                self.inventory.forget(uid)
            return
        gone = counted & set(nodes)
        if gone and self.inventory is not None:
            counted -= gone
            self.inventory.forget(uid, gone)

    def promised_nodes(self, except_uid: str, kind: Any = None, *, sharing: bool = False
                       ) -> set[str]:
        """Nodes where a gang admitted by this reconciler still has pods to bind.

        Between Ready and its pods binding, an admitted gang's devices are not yet
        allocated, so the inventory shows them free; another gang decided meanwhile would
        be placed on the same devices. Until every pod placed on a node has bound there,
        that node is left out of other gangs' decisions (a whole node: coarse, never
        double-booked). A promise ends when the pods have bound, or after
        `promise_seconds` (pods that never come). Promises are kept in memory and
        persisted in what fitgate writes before Ready (the placements ConfigMap and the
        Ready entry): a replica that takes over leadership reads them back
        (`promises.Recovery`) before it decides.

        With `sharing`, for a gang of device `kind`: a node is left out only where a
        promise the inventory does not count, or one whose devices could collide with
        the gang's, still has pods to bind (`promise`)."""
        out: set[str] = set()
        now = self.clock.monotonic()
        for uid, (_, _, since) in list(self._promised.items()):
            if uid != except_uid and now - since > self.promise_seconds:
                self.drop(uid)
        # The bound pods of each promise are read from an index the pod store's events
        # keep (`ledgerindex.BoundPods`), not counted over the namespace's pods: this
        # runs for every decision, on the event loop.
        waits: dict[str, set[str]] = {}
        for uid, (namespace, nodes, _) in list(self._promised.items()):
            if uid == except_uid:
                continue
            got = self._bound.of(namespace, uid)
            waiting = waits[uid] = {n for n, want in nodes.items() if got.get(n, 0) < want}
            if not waiting:
                del self._promised[uid]
            if not (sharing and uid in self._kind
                    and fitcore.kinds_compatible(self._kind[uid], kind)):
                out |= waiting
        self._release_bound(except_uid, waits, now)
        return out

    def _release_bound(self, except_uid: str, waits: Mapping[str, set[str]], now: float
                       ) -> None:
        """Stop counting a promise's pods on each node where they have bound and nothing
        of them is left to allocate (`_claims_allocated`), also after the promise ended
        (its pods all bound): node by node, or all at `promise_seconds`."""
        for uid, (namespace, counted, since) in list(self._assumed.items()):
            if uid == except_uid:
                continue
            if now - since > self.promise_seconds:
                self._release(uid, None)
                continue
            waiting = waits.get(uid, set())
            self._release(uid, [n for n in counted - waiting
                                if self._claims_allocated(namespace, uid, n)])

    def _claims_allocated(self, namespace: str, uid: str, node: str) -> bool:
        """Whether the claims of the promise's pods bound to `node` are allocated in the
        claim store (it comes on another watch than the pods: counted before, the
        devices would be neither assumed nor allocated for a moment). A pod that has
        finished, is being deleted or is gone has nothing left to allocate: its claims may
        be deallocated and gone already."""
        pods = self.stores.pods
        for name in self._bound.names(namespace, uid, node):
            pod = pods.get(name, namespace) if pods is not None else None
            if pod is None or _meta(pod).get("deletionTimestamp") \
                    or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if not self._allocated(pod):
                return False
        return True


    def wait(self, key: str, nodes: Collection[str]) -> None:
        """The Workload `key` waits for promised `nodes` to bind (all promised nodes
        when it names none): `woken` returns it as soon as one of them is free."""
        held = self.promised_nodes("")
        self._waiting[key] = frozenset(set(nodes) & held or held)

    def woken(self, pod: Mapping[str, Any]) -> list[str]:
        """The waiting Workloads whose wait a Pod's event may have ended: a pod bound to
        one of their nodes, and that node no longer promised (its gang's pods there
        have all bound). Each is returned once; the poll after `promise_poll_seconds`
        stays the fallback."""
        node = (pod.get("spec") or {}).get("nodeName") if isinstance(pod, Mapping) else None
        if not self._waiting or not node or not any(
                node in nodes for nodes in self._waiting.values()) or not self._allocated(pod):
            return []
        held = self.promised_nodes("")
        out = [key for key, nodes in self._waiting.items() if not nodes <= held]
        for key in out:
            del self._waiting[key]
        return out

    def _allocated(self, pod: Mapping[str, Any]) -> bool:
        """Whether the claims of a bound pod are allocated in the claim store (the
        scheduler writes them before it binds, but they come on another watch: a gang
        woken before they arrive would see the pod's devices free)."""
        claims = self.stores.claims
        namespace = str(_meta(pod).get("namespace") or "")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            name = status.get("resourceClaimName") if isinstance(status, Mapping) else None
            if not name:
                continue
            claim = claims.get(str(name), namespace) if claims is not None else None
            if claim is None or not (claim.get("status") or {}).get("allocation"):
                return False
        return True

    def node_owners(self, node_shapes: Mapping[str, fitcore.NodeShape]) -> inputs.Owners:
        """New nodes fitgate's ProvisioningRequests brought: node -> (request, workload
        uid, whether that workload is admitted).

        A request owns, per shape of its plan, the planned count of that shape's nodes
        created after it, oldest nodes to the oldest requests first (creation time, then
        resourceVersion: several requests are created within a second). Every gang's
        decision reads the same owners, so no two gangs count the same new node: another
        gang's node stays out of a plan until that gang is admitted (then
        `promised_nodes` holds it until its pods bind), and a request waits for a node
        of its own instead of verifying on another's."""
        # A request owns only nodes created since it: those created after the newest
        # node own none, and are not read at all (`ledgerindex.Requests` keeps them in
        # creation order). While no node came since the requests were made, as is
        # nearly always so, this is a bisection, not a pass over every request.
        newest = self._nodes.newest()
        if newest is None:
            return {}
        requests = sorted(trusted.trusted_of(  # only what fitgate wrote (trusted.py)
            self._requests.created_until(newest), self.stores.workloads,
            kueue.ours(self.stores.admission_checks.list())),
            key=lambda r: (str(_meta(r.obj).get("creationTimestamp") or ""),
                           _int(_meta(r.obj).get("resourceVersion"))))
        if not requests:
            return {}
        # Oldest first; each request looks only at the nodes created since it, a slice of
        # the index the node store's events keep in creation order
        # (`ledgerindex.NodesByCreation`), not at every node of the cluster: this runs
        # for every decision, on the event loop.
        names = kueue.ours(self.stores.admission_checks.list())
        out: inputs.Owners = {}
        for r in requests:
            admitted = any(e.get("state") == c.READY for e in kueue.entries(r.workload, names))
            # A node whose creation time cannot be read is never "created since" a
            # request; every node is, of a request whose own time cannot be read.
            newer = self._nodes.since(_time(_meta(r.obj).get("creationTimestamp")))
            if not newer:
                continue
            owner = (r.name, r.workload_uid, admitted)
            for sc in r.plan.shapes:
                shape = node_shapes.get(sc.shape)
                if shape is None:
                    continue
                want = shape.node_labels.items()
                mine = itertools.islice(
                    (name for _, name, labels in newer
                     if name not in out and all(labels.get(k) == v for k, v in want)),
                    sc.count)
                out.update([(n, owner) for n in mine])
        return out


    def requests_of(self, namespace: str, uid: str,
                    unreadable: list[client.Obj] | None = None) -> list[trusted.Request]:
        """`trusted_requests` of `namespace` labelled for the Workload `uid` (a request
        fitgate wrote for it carries its uid: `trusted.read`), from the index, not every
        request of the namespace."""
        return trusted.trusted_of(self._requests.of_owner(namespace, uid),
                                  self.stores.workloads,
                                  kueue.ours(self.stores.admission_checks.list()), unreadable)

    def requested_nodes(self, except_uid: str, owners: inputs.Owners) -> set[str]:
        """New nodes other gangs' requests brought, those gangs not admitted yet."""
        return {n for n, (_, uid, admitted) in owners.items()
                if uid != except_uid and not admitted}


    def held_for_others(self, wl: client.Obj, owners: inputs.Owners,
                        gang: fitcore.Gang | None = None) -> set[str]:
        """Nodes the gang may not take now because they are held for other workloads:
        promised to gangs whose pods are binding (with the `gang`, those it may share are
        not: `promised_nodes`), or brought by other gangs' requests."""
        uid = str(_meta(wl).get("uid"))
        kind = fitcore.device_kind(gang) if gang is not None else None
        return (self.promised_nodes(uid, kind, sharing=gang is not None)
                | self.requested_nodes(uid, owners))


    def existing_nodes(self, request: Mapping[str, Any]) -> set[str]:
        """Nodes that existed before the request: created before it."""
        return self._nodes.before(_time(_meta(request).get("creationTimestamp")))


    def node_labels(self, names: Collection[str] | None = None
                    ) -> Mapping[str, Mapping[str, str]]:
        """Every node's labels (or those of the nodes named that exist), by name, from
        the node index: converted once per change of a node (do not modify)."""
        if names is not None:
            return {name: have for name in names
                    if (have := self._nodes.labels(name)) is not None}
        return self._nodes.all_labels()

    def nodes_matching(self, wanted: Mapping[str, str]) -> AbstractSet[str]:
        """The nodes whose labels include all of `wanted` (`NodesByCreation.matching`)."""
        return self._nodes.matching(wanted)


def labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """An object's labels as strings ({} when it has none or is None)."""
    raw = _meta(obj).get("labels") if obj is not None else None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _int(text: Any) -> int:
    return int(text) if isinstance(text, str) and text.isdigit() else 0


def _time(text: Any) -> datetime.datetime | None:
    """An object's creation time as the node index orders them (None if unreadable)."""
    created = ledgerindex.created_at(text)
    return None if created == ledgerindex.UNKNOWN else created


def workload_of_request(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Workload (namespace, name) a fitgate ProvisioningRequest or PodTemplate was
    made for."""
    meta = _meta(obj)
    ref = (meta.get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
    if (meta.get("labels") or {}).get(c.MANAGED_LABEL) != "fitgate" or not ref:
        return None
    namespace, _, name = str(ref).partition("/")
    return (namespace, name)


# Keys of the Workloads a change of another object concerns, for the controller runtime.

class ProvisionedRequests:
    """The Workloads whose fitgate ProvisioningRequest is Provisioned (they wait for a
    Node or ResourceSlice change), kept from the request store's events: a Node or slice
    event, hundreds a second, reads them instead of the state of every request."""

    def __init__(self, requests: store.Store) -> None:
        self._workloads: dict[store.Key, store.Key] = {}  # request -> its Workload
        for obj in requests.list():
            self._put(obj)
        requests.subscribe(self._on_event)

    def workloads(self) -> list[store.Key]:
        return list(self._workloads.values())

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        self._workloads.pop(store.key_of(before if before is not None else event.object),
                            None)
        if event.type != "DELETED":
            self._put(event.object)

    def _put(self, obj: client.Obj) -> None:
        if provisioning.state(obj)[0] == "provisioned":
            key = workload_of_request(obj)
            if key is not None:
                self._workloads[store.key_of(obj)] = key


def waiting_for_nodes(workloads: store.Store, provisioned: ProvisionedRequests
                      ) -> list[store.Key]:
    """Workloads whose request is Provisioned: a Node or ResourceSlice change may be the
    one they wait for."""
    return [key for key in provisioned.workloads()
            if workloads.get(key[1], key[0]) is not None]
