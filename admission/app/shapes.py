"""`fitgate shape capture NODE`: a NodeShape written from a live node.

A NodeShape promises what every new node of a node group will look like, and fitgate's
check verifies the nodes that come against that promise, attribute by attribute. Written
by hand, the ResourceSlices of a shape are the part people get wrong; read from a node of
the group, they are right by construction, once what belongs to the one node is taken out:

- labels: the node group's labels, without the node's own (`kubernetes.io/hostname`,
  labels whose value holds the node's name, topology domains finer than a zone such as a
  rack or a host, and labels another node of the group has otherwise). The group is the
  nodes of the node's pool (its cloud's node pool label, `POOL_LABELS`), else the nodes
  that carry all of its other labels;
- taints: the node's, without the ones the node lifecycle and the autoscalers put on and
  take off (`node.kubernetes.io/not-ready`, `ToBeDeletedByClusterAutoscaler`, ...);
- allocatable: the node's;
- ResourceSlices: the node's (`spec.nodeName`), without `nodeName`, the pool's
  `generation`, and with the node's name in a pool name replaced by the shape's; slices
  that select nodes per device are left out (a shape's slices never select nodes);
- device attributes that are unique per node are left out: identities (UUIDs, serials,
  MAC addresses), PCI bus addresses unless another node of the group has the same ones
  (identical machines usually do), and values no other node of the group shares. A
  shape holding one node's UUIDs promises them for every new node, and verification
  would call each new node a mismatch. Each is reported with whether a DeviceClass, ResourceClaim or
  ResourceClaimTemplate in the cluster selects on it (a CEL selector that mentions it, a
  `matchAttribute` or `distinctAttribute` constraint naming it), because a shape without
  the attribute no longer matches such a selector.

Everything left out is said in comments at the top of the YAML, and the per-node
attributes as warnings on stderr. `build` is the pure part (tests call it with objects);
`capture` reads the objects through the client.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from admission.kube import client, errors, kinds

SHAPE_API_VERSION = "fitgate.io/v1alpha1"

#: Labels every node carries with its own value.
PER_NODE_LABELS = {
    "kubernetes.io/hostname": "the node's host name",
    "node.kubernetes.io/instance-id": "the node's machine",
}
#: Topology labels of a whole node group (a node group of the cluster autoscaler lies in
#: one zone); other topology labels name finer domains (rack, block, host), per node.
GROUP_TOPOLOGY_LABELS = frozenset({
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"})
#: Labels that name a node pool: the nodes with the same value are one group.
POOL_LABELS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
               "karpenter.sh/nodepool", "kubernetes.azure.com/agentpool")
#: Labels a default shape name is taken from, in this order.
GROUP_NAME_LABELS = (*POOL_LABELS, "node.kubernetes.io/instance-type")
#: Taint key prefixes (and keys) the node lifecycle and autoscalers add and remove.
TRANSIENT_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/",
                    "ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler",
                    "karpenter.sh/disrupted", "karpenter.sh/unregistered")
#: What a NodeShape's device holds (charts/fitgate/crds/nodeshapes.fitgate.io.yaml).
DEVICE_FIELDS = ("name", "attributes", "capacity", "consumesCounters", "taints",
                 "allowMultipleAllocations", "bindingConditions", "bindingFailureConditions",
                 "bindsToNode")

_UUID = re.compile(r"^(?:[A-Za-z]+-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
                   r"-[0-9a-f]{12}$", re.IGNORECASE)
_PCI_ADDRESS = re.compile(r"^(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
                          re.IGNORECASE)
_MAC = re.compile(r"^(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}$", re.IGNORECASE)
_LONG_HEX = re.compile(r"^(?:0x)?[0-9a-f]{16,}$", re.IGNORECASE)
#: Attribute names (lower case, without their domain) that hold one device's identity,
#: never shared by two devices of the cluster.
_IDENTITY_NAMES = ("uuid", "guid", "serial", "macaddress")
#: Names of a device's place in its node: the same on identical machines, unless the
#: firmware numbers buses differently (told apart by comparing nodes of the group).
_PLACE_NAMES = ("busid", "pcibusid", "pciaddress")


# ------------------------------------------------------------- per-node attributes


def qualified(driver: str, attribute: str) -> str:
    """An attribute's full name: unqualified names are in the driver's domain."""
    return attribute if "/" in attribute else f"{driver}/{attribute}"


def attribute_value(value: Any) -> str | None:
    """A device attribute's value as text (`{"string": "x"}` -> "x"), None if malformed."""
    if isinstance(value, Mapping) and len(value) == 1:
        return str(next(iter(value.values())))
    return None


def _short(attribute: str) -> str:
    return attribute.rsplit("/", 1)[-1]


def identity_reason(attribute: str, value: str | None) -> str | None:
    """Why an attribute holds one device's identity (a UUID, a MAC address, a serial: by
    its value or its name), which no other node shares; else None."""
    if value is not None:
        for pattern, what in ((_UUID, "a UUID"), (_MAC, "a MAC address"),
                              (_LONG_HEX, "a serial number")):
            if pattern.match(value):
                return f"its value {value!r} looks like {what}"
    name = _short(attribute).lower().replace("_", "").replace("-", "")
    if any(hint in name for hint in _IDENTITY_NAMES):
        return f"its name says it identifies one device ({_short(attribute)})"
    return None


def place_reason(attribute: str, value: str | None) -> str | None:
    """Why an attribute may hold a device's bus address (by value or name), else None."""
    if value is not None and _PCI_ADDRESS.match(value):
        return f"its value {value!r} looks like a PCI bus address"
    name = _short(attribute).lower().replace("_", "").replace("-", "")
    if any(hint in name for hint in _PLACE_NAMES):
        return f"its name says it is a bus address ({_short(attribute)})"
    return None


@dataclasses.dataclass(frozen=True)
class PerNode:
    """A device attribute whose values belong to one node."""

    attribute: str  # qualified name
    why: str
    #: Who selects on it: "DeviceClass gpu-by-uuid (CEL selector)", ...
    selected_by: tuple[str, ...] = ()

    def text(self) -> str:
        used = ("; selected on by " + ", ".join(self.selected_by) + ": a shape without it "
                "no longer satisfies them, decide by hand" if self.selected_by
                else "; nothing in the cluster selects on it")
        return f"{self.attribute}: {self.why}{used}"


def _slice_values(slices: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Qualified attribute -> the values the devices of `slices` give it."""
    out: dict[str, set[str]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        for dev in spec.get("devices") or []:
            for name, value in (dev.get("attributes") or {}).items():
                text = attribute_value(value)
                if text is not None:
                    out.setdefault(qualified(str(spec.get("driver")), name), set()).add(text)
    return out


def _first(reason: Any, attribute: str, values: set[str]) -> str | None:
    return next((r for v in sorted(values) if (r := reason(attribute, v))), None)


def per_node_attributes(mine: Sequence[Mapping[str, Any]],
                        others: Mapping[str, Sequence[Mapping[str, Any]]]
                        ) -> dict[str, str]:
    """Qualified attribute -> why it is per node, for the attributes of `mine` (one node's
    slices), with `others` the rest of the group (node -> its slices): identities (UUIDs,
    serials) always; bus addresses unless another node of the group has the same; any
    other attribute whose values no other node of the group shares."""
    values = _slice_values(mine)
    theirs = {node: _slice_values(s) for node, s in others.items()}
    out: dict[str, str] = {}
    for attribute, have in sorted(values.items()):
        why = _first(identity_reason, attribute, have)
        if why is None:
            peers = [n for n, vals in sorted(theirs.items()) if attribute in vals]
            differs = bool(peers) and all(not have & theirs[n][attribute] for n in peers)
            place = _first(place_reason, attribute, have)
            if differs:
                why = f"{place + ', and i' if place else 'i'}ts values differ from node " \
                      f"{peers[0]}'s"
            elif place and not peers:
                why = f"{place}, and no other node of the group has it to compare with"
        if why is not None:
            out[attribute] = why
    return out


# ------------------------------------------------------------- who selects on them


def _walk(value: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every mapping entry under `value`."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield path, str(k), v
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def _mentions(expression: str, attribute: str) -> bool:
    """Whether a CEL expression names the attribute (`.uuid`, `["uuid"]`)."""
    short = re.escape(attribute.rsplit("/", 1)[-1])
    return (re.search(rf"""(?:\.|\[\s*["']){short}(?!\w)""", expression) is not None
            or attribute in expression)


def selected_by(attribute: str, objects: Sequence[tuple[kinds.Kind, Mapping[str, Any]]]
                ) -> tuple[str, ...]:
    """Which DeviceClasses, claims and claim templates select on `attribute`."""
    out: list[str] = []
    for kind, obj in objects:
        meta = obj.get("metadata") or {}
        name = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") \
            else str(meta.get("name"))
        how = set()
        for _path, key, value in _walk(obj.get("spec") or {}, "spec"):
            if key == "expression" and isinstance(value, str) and _mentions(value, attribute):
                how.add("CEL selector")
            elif key in ("matchAttribute", "distinctAttribute") and value == attribute:
                how.add(key)
        if how:
            out.append(f"{kind.kind} {name} ({', '.join(sorted(how))})")
    return tuple(out)


# ------------------------------------------------------------- the shape


@dataclasses.dataclass
class Capture:
    """A captured NodeShape and what was left out of it, and why."""

    node: str
    shape: dict[str, Any]
    group: list[str]  # the nodes carrying the shape's labels, this one included
    left_out_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    left_out_taints: list[str] = dataclasses.field(default_factory=list)
    left_out_slices: list[str] = dataclasses.field(default_factory=list)
    per_node: list[PerNode] = dataclasses.field(default_factory=list)
    #: What could not be read (e.g. claims in namespaces the user may not list).
    unread: list[str] = dataclasses.field(default_factory=list)

    def warnings(self) -> list[str]:
        return ([f"device attribute {p.text()}; left out" for p in self.per_node]
                + [f"could not read {u}, so selectors there are not known" for u in self.unread])

    def comments(self) -> list[str]:
        out = [f"NodeShape captured by `fitgate shape capture` from node {self.node} "
               f"(its group: {', '.join(self.group)})."]
        if self.left_out_labels:
            out.append("Per-node labels left out: " + "; ".join(
                f"{k} ({why})" for k, why in sorted(self.left_out_labels.items())))
        if self.left_out_taints:
            out.append("Transient taints left out: " + ", ".join(self.left_out_taints))
        out += [f"Slice left out: {s}" for s in self.left_out_slices]
        if self.per_node:
            out.append("Per-node device attributes left out (a shape promises its "
                       "attributes for every new node):")
            out += [f"  {p.text()}" for p in self.per_node]
        out += [f"Warning: could not read {u}." for u in self.unread]
        out.append("Review spec.price, spec.topology, spec.provisioning and spec.maxNodes "
                   "before applying.")
        return out

    def to_yaml(self) -> str:
        head = "".join(
            f"# {part}\n" for line in self.comments()
            for part in textwrap.wrap(line, 96, subsequent_indent="    ",
                                      break_on_hyphens=False, break_long_words=False))
        return head + yaml.safe_dump(self.shape, sort_keys=False)


def group_labels(node: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(the node group's labels, label -> why left out) of a node."""
    name = str(node["metadata"]["name"])
    keep: dict[str, str] = {}
    left: dict[str, str] = {}
    for key, value in sorted((node["metadata"].get("labels") or {}).items()):
        if key in PER_NODE_LABELS:
            left[key] = PER_NODE_LABELS[key]
        elif value and name in str(value):
            left[key] = "its value holds the node's name"
        elif "topology" in key and key not in GROUP_TOPOLOGY_LABELS:
            left[key] = ("a topology domain finer than a zone; set spec.topology.domainLabel "
                         "to it if new nodes come in such domains")
        else:
            keep[key] = str(value)
    return keep, left


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = node["metadata"].get("labels") or {}
    return labels


def node_group(node: Mapping[str, Any], labels: Mapping[str, str],
               nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the nodes of `node`'s group, its own included: those with the same
    node pool label (`POOL_LABELS`, the first the node carries), else those that carry
    all of the group's `labels`."""
    key = next((k for k in POOL_LABELS if k in labels), None)
    want = {key: labels[key]} if key else labels
    names = {str(n["metadata"]["name"]) for n in nodes
             if all(_labels(n).get(k) == v for k, v in want.items())}
    return sorted(names | {str(node["metadata"]["name"])})


def differing_labels(node_name: str, labels: Mapping[str, str], group: Sequence[str],
                     nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Label -> why left out, for the labels another node of the group has otherwise or
    lacks (labels a node pool does not set on every node alike)."""
    peers = [n for n in nodes
             if str(n["metadata"]["name"]) in group and n["metadata"]["name"] != node_name]
    out: dict[str, str] = {}
    for key, value in labels.items():
        for peer in peers:
            have, name = _labels(peer).get(key), peer["metadata"]["name"]
            if have != value:
                out[key] = (f"node {name} of the group has {have!r}" if have is not None
                            else f"node {name} of the group does not carry it")
                break
    return out


def shape_name(node: Mapping[str, Any]) -> str:
    """A default name: the node group's (a cloud's node pool label), else the node's
    name without a trailing ordinal."""
    labels = node["metadata"].get("labels") or {}
    for key in GROUP_NAME_LABELS:
        if labels.get(key):
            return re.sub(r"[^a-z0-9.-]", "-", str(labels[key]).lower()).strip("-.")
    return re.sub(r"-\d+$", "", str(node["metadata"]["name"]))


def _taints(node: Mapping[str, Any]) -> tuple[list[dict[str, str]], list[str]]:
    keep, left = [], []
    for t in (node.get("spec") or {}).get("taints") or []:
        if str(t.get("key", "")).startswith(TRANSIENT_TAINTS):
            left.append(f"{t.get('key')}:{t.get('effect')}")
        else:
            keep.append({k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None})
    return keep, left


def _shape_slice(s: Mapping[str, Any], node: str, name: str, drop: Mapping[str, str]
                 ) -> dict[str, Any]:
    spec = s["spec"]
    driver = str(spec.get("driver"))
    out: dict[str, Any] = {"driver": driver}
    pool = spec.get("pool") or {}
    if pool.get("name"):
        out["pool"] = {"name": str(pool["name"]).replace(node, name),
                       "resourceSliceCount": pool.get("resourceSliceCount", 1)}
    if spec.get("sharedCounters"):
        out["sharedCounters"] = spec["sharedCounters"]
    devices = []
    for dev in spec.get("devices") or []:
        d = {k: dev[k] for k in DEVICE_FIELDS if k in dev}
        attributes = {k: v for k, v in (dev.get("attributes") or {}).items()
                      if qualified(driver, k) not in drop}
        if attributes:
            d["attributes"] = attributes
        else:
            d.pop("attributes", None)
        devices.append(d)
    if devices or "sharedCounters" not in out:
        out["devices"] = devices
    return out


def _slices_by_node(slices: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        node = (s.get("spec") or {}).get("nodeName")
        if node:
            out.setdefault(str(node), []).append(s)
    return out


def build(node: Mapping[str, Any], *, nodes: Sequence[Mapping[str, Any]],
          slices: Sequence[Mapping[str, Any]],
          selectors: Sequence[tuple[kinds.Kind, Mapping[str, Any]]],
          name: str | None = None, keep_per_node: bool = False) -> Capture:
    """The NodeShape of `node`'s group, from the cluster's `nodes`, `slices` and the
    objects that may select on device attributes (`selectors`: DeviceClasses, claims and
    claim templates)."""
    node_name = str(node["metadata"]["name"])
    name = name or shape_name(node)
    labels, left_labels = group_labels(node)
    group = node_group(node, labels, nodes)
    for key, why in differing_labels(node_name, labels, group, nodes).items():
        del labels[key]
        left_labels[key] = why
    by_node = _slices_by_node(slices)
    mine = sorted(by_node.get(node_name, []),
                  key=lambda s: (s["spec"].get("driver"), (s["spec"].get("pool") or {})
                                 .get("name", ""), s["metadata"].get("name", "")))
    kept, left_slices = [], []
    for s in mine:
        if s["spec"].get("perDeviceNodeSelection"):
            left_slices.append(f"ResourceSlice {s['metadata'].get('name')} (it selects "
                               "nodes per device)")
        else:
            kept.append(s)
    others = {n: by_node.get(n, []) for n in group if n != node_name}
    found = per_node_attributes(kept, others)
    per_node = [PerNode(a, why, selected_by(a, selectors)) for a, why in found.items()]
    drop = {} if keep_per_node else found
    taints, left_taints = _taints(node)
    spec: dict[str, Any] = {"nodeLabels": labels,
                            "allocatable": dict((node.get("status") or {})
                                                .get("allocatable") or {})}
    if taints:
        spec["taints"] = taints
    spec["resourceSlices"] = [_shape_slice(s, node_name, name, drop) for s in kept]
    shape = {"apiVersion": SHAPE_API_VERSION, "kind": "NodeShape",
             "metadata": {"name": name}, "spec": spec}
    return Capture(node_name, shape, group, left_labels, left_taints, left_slices, per_node)


#: Kinds whose selectors may name device attributes.
SELECTOR_KINDS = (kinds.DEVICE_CLASS, kinds.RESOURCE_CLAIM, kinds.RESOURCE_CLAIM_TEMPLATE)


async def capture(api: client.Client, node_name: str, *, name: str | None = None,
                  keep_per_node: bool = False) -> Capture:
    """Read the node, the cluster's nodes and slices, and the objects that select on
    device attributes, and build the node's shape. `errors.NotFound` for a missing node;
    a kind the user may not list is reported in `Capture.unread`, not fatal."""
    node = await api.get(kinds.NODE, node_name)
    nodes = (await api.list(kinds.NODE)).items
    slices = (await api.list(kinds.RESOURCE_SLICE)).items
    selectors: list[tuple[kinds.Kind, Mapping[str, Any]]] = []
    unread: list[str] = []
    for kind in SELECTOR_KINDS:
        try:
            selectors += [(kind, o) for o in (await api.list(kind)).items]
        except errors.ApiError as exc:
            if exc.status not in (401, 403):
                raise
            unread.append(f"{kind.plural} ({exc})")
    got = build(node, nodes=nodes, slices=slices, selectors=selectors, name=name,
                keep_per_node=keep_per_node)
    got.unread = unread
    return got
