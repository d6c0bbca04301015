"""Gang placement: can every pod of a workload be placed on the nodes that exist, now?

The scheduler places pods one at a time; a gang is admitted only when all of its pods
(or at least `minCount` of a pod set) can be placed together. `place` answers that with
the scheduler's own filters: node selection (nodeSelector and required node affinity),
node taints against pod tolerations, allocatable minus what bound pods request, and DRA
through `api.allocate`, carrying each pod's device allocation forward to the next pod.

Design: equivalence classes of nodes.
- The pods of one pod set are identical, and so are many nodes. Two nodes are in the same
  *class* when they have the same taints, the same free resources, and node-local
  ResourceSlices of the same shape: the same devices (names, attributes, capacity,
  counters) in pools that sort the same way, with the same devices already allocated.
  Pool and slice names do not count: allocation results on one node of a class map onto
  another by pool position.
- For a class and a pod set, one representative node is filled pod by pod (as the
  scheduler would) until a pod no longer fits; the sequence of allocations is cached (in
  a `Memo`, by class, representative and pod set, so that the several searches planning
  runs share it). A node that received k pods moves to the derived class (class, pod set,
  k), which is again shared by all nodes that received the same. So 1,000 identical nodes
  cost about what one costs.
- Labels matter only to node selection and topology: they are evaluated per group of
  nodes with identical labels (the hostname label aside). A decision works on *cells*,
  (label group, class) with a node count, and visits single nodes only in the domain
  where it places pods.
- Pod sets are placed in order; when that fails, the most demanding first, then the
  reverse, so that a launcher does not take the room only some nodes have for workers.
- A node that sees pools which are not node-local (allNodes, node selectors, devices
  with per-device node selection, counter slices without a node) is its own class, and
  its cache entries are keyed by what the gang has allocated from such pools so far.

Topology: a pod set with a required topology label is placed in one domain (one value of
that node label). The domains are ranked by how many of its pods they can hold, and the
smallest domain that holds them all is chosen (best fit, as Kueue's topology-aware
scheduling does), leaving large domains for large gangs.

Shared ResourceClaims (`resourceClaimName`): allocated once. A claim not yet allocated is
allocated with the first pod that uses it, and every pod using it must then land on that
node (the simplest correct rule for a node-local allocation). A claim that the inventory
already shows allocated restricts its pods to the nodes its allocation names.

Modules, by concern: `gangtypes` (the gang and its result), `snapshot` (the index of
nodes in label groups and classes), `gangsearch` (fills, kept work, placement) and
`gangexplain` (the reasons in words). This module is what callers use (the admission
service through `fitcore.inventory` and these types): it re-exports their public names.
"""

from fitcore.gangsearch import Memo as Memo
from fitcore.gangsearch import fit as fit
from fitcore.gangsearch import place as place
from fitcore.gangtypes import HOSTNAME_LABEL as HOSTNAME_LABEL
from fitcore.gangtypes import UNSCHEDULABLE_TAINT as UNSCHEDULABLE_TAINT
from fitcore.gangtypes import Category as Category
from fitcore.gangtypes import Gang as Gang
from fitcore.gangtypes import GangResult as GangResult
from fitcore.gangtypes import GangVerdict as GangVerdict
from fitcore.gangtypes import Placement as Placement
from fitcore.gangtypes import PodClaim as PodClaim
from fitcore.gangtypes import PodSet as PodSet
from fitcore.gangtypes import Stats as Stats
from fitcore.gangtypes import Toleration as Toleration
from fitcore.gangtypes import remap as remap
from fitcore.snapshot import PoolKey as PoolKey
from fitcore.snapshot import Snapshot as Snapshot
from fitcore.snapshot import _NodeEntry as _NodeEntry
from fitcore.snapshot import slice_shape as slice_shape
