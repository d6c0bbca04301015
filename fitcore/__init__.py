"""fitcore: decides whether DRA gangs fit existing nodes and node shapes.

This package root is fitcore's public API: the names below are what the admission
service, the CLI and the benchmarks use. admission imports `fitcore` only (an
import-linter contract refuses `fitcore.<module>` there); the submodules are fitcore's
own business (tests and benchmarks may go deeper).

- Reading: `gang_of` (the one gang reader: a Job or Workload, read as the API server
  hands it to the scheduler), `node_shape`, `References`, `Bundle`, `Document`, `load`;
  file reading for the offline CLI: `read_one`, `flatten`, `load_yaml`, `load_json`,
  `LimitError`.
- One error type for bad input: `InputError` (every `FieldError`, naming object and field);
  `CelError` for a CEL selector that does not compile or cannot be evaluated.
- The engine: the stateful `Inventory` (`apply`, `fit`, `plan`, `verify`, `shapes`,
  `stats`; `assume` and `forget` a promised gang's placements); `Parsed`, Nodes and
  ResourceSlices parsed once for the inventories that share it. Whether two promised
  gangs may share a node: `device_kind`, `kinds_compatible`, `DeviceKind`.
- Topology domains someone else chose (Kueue's TAS assignment): `Domain`,
  `within_domains` (the gang held to exactly those domains and pod counts), `Within`.
- Results: `Gang`, `PodSet`, `Placement`, `NodeShape` (with `KarpenterProvisioning`),
  `Node`, `Plan`, `ShapeCount`, `PlanResult`, `VerifyResult`, `price_str`; a Plan's one
  codec is `Plan.to_json` / `Plan.from_json`.
- Reasons: `Reason` and the codes (`reasons`, e.g. `reasons.SHAPE_MISMATCH`).
- Kubernetes versions: `DEFAULT_KUBE_VERSION`, `KUBE_VERSIONS`.
"""

from fitcore import reasons
from fitcore.assumed import Kind as DeviceKind
from fitcore.assumed import compatible as kinds_compatible
from fitcore.assumed import kind_of as device_kind
from fitcore.cel import CelError
from fitcore.domains import Domain, Within
from fitcore.domains import within as within_domains
from fitcore.errors import FieldError, InputError
from fitcore.gang import Gang, Placement, PodSet
from fitcore.inventory import Inventory
from fitcore.kube import Parsed
from fitcore.model import Node
from fitcore.plan import Plan, PlanResult, ShapeCount, VerifyResult, price_str
from fitcore.read import LimitError, Progress, flatten, load_json, load_yaml
from fitcore.read import one as read_one
from fitcore.reasons import Reason
from fitcore.shapes import KarpenterProvisioning, NodeShape
from fitcore.workload import (
    DEFAULT_KUBE_VERSION,
    KUBE_VERSIONS,
    Bundle,
    Document,
    References,
    gang_of,
    load,
    node_shape,
)

__all__ = [
    "DEFAULT_KUBE_VERSION", "KUBE_VERSIONS", "Bundle", "CelError", "DeviceKind", "Document",
    "Domain", "FieldError", "Gang", "InputError", "Inventory", "KarpenterProvisioning",
    "LimitError", "Node", "NodeShape", "Parsed", "Placement", "Plan", "PlanResult", "PodSet",
    "Progress", "Reason", "References", "ShapeCount", "VerifyResult", "Within",
    "device_kind", "flatten", "gang_of", "kinds_compatible", "load", "load_json", "load_yaml",
    "node_shape", "price_str", "read_one", "reasons", "within_domains",
]
