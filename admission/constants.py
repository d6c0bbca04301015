"""Names fitgate's admission check puts on objects, and the defaults of its timings.

Kept in one place so the check reconciler, the ProvisioningRequest builders, the pod
release controller and the webhook agree on every key.
"""

from __future__ import annotations

from typing import Final

#: The AdmissionCheck `spec.controllerName` fitgate answers for.
CONTROLLER_NAME = "fitgate.io/topology-fit"
#: The field manager of every server-side apply fitgate makes.
FIELD_MANAGER = "fitgate"

# ---- Workload conditions (Kueue v1beta2)
QUOTA_RESERVED = "QuotaReserved"
EVICTED = "Evicted"
FINISHED = "Finished"
ADMITTED = "Admitted"

# ---- AdmissionCheck states
PENDING: Final = "Pending"
READY: Final = "Ready"
RETRY: Final = "Retry"
REJECTED: Final = "Rejected"

# ---- ProvisioningRequest (autoscaling.x-k8s.io/v1) conditions
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
ACCEPTED = "Accepted"

DEFAULT_PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

# ---- labels and annotations on the ProvisioningRequests and PodTemplates fitgate creates
#: value "fitgate"; `fitgate serve` caches only the PodTemplates carrying it.
MANAGED_LABEL = "app.kubernetes.io/managed-by"
WORKLOAD_UID_LABEL = "fitgate.io/workload-uid"
WORKLOAD_NAME_LABEL = "fitgate.io/workload-name"  # the name, or a hashed cut when > 63
CHECK_LABEL = "fitgate.io/check"
ATTEMPT_LABEL = "fitgate.io/attempt"
WORKLOAD_ANNOTATION = "fitgate.io/workload"  # "namespace/name", never cut
PLAN_ANNOTATION = "fitgate.io/plan"  # the Plan (JSON) this request asks nodes for
ALTERNATIVES_ANNOTATION = "fitgate.io/alternatives"  # the ranked plans not yet tried (JSON)
PLAN_INDEX_ANNOTATION = "fitgate.io/plan-index"  # 0: the best plan; k: the k-th alternative
#: On a request's PodTemplates: a digest of the pod template fitgate wrote. The API server
#: fills defaults into what it stores, so the stored template never reads back equal.
TEMPLATE_DIGEST_ANNOTATION = "fitgate.io/template-digest"
#: On the placeholder pods of a request's PodTemplates: they repel each other on hostname,
#: so the autoscaler adds one node per placeholder.
PLACEHOLDER_LABEL = "fitgate.io/placeholder"

# ---- pods of an admitted gang (podSetUpdates) and their release
#: Label fitgate adds to a gang's pods (value: the Workload's uid). The webhook gates pods
#: carrying it; the release controller assigns each its node and removes the gate.
PLACEMENT_LABEL = "fitgate.io/placement"
#: Used instead of PLACEMENT_LABEL's value when a template already carries that label with
#: another value (a podSetUpdate must not collide with the template).
PLACEMENT_WORKLOAD_LABEL = "fitgate.io/placement-workload"
POD_SET_LABEL = "fitgate.io/pod-set"
KUEUE_POD_SET_LABEL = "kueue.x-k8s.io/podset"
SCHEDULING_GATE = "fitgate.io/placement"
SLOT_ANNOTATION = "fitgate.io/slot"  # "<pod set>/<index>" once the pod has its node
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: ConfigMap (in the Workload's namespace, owned by the Workload) holding the gang's
#: placements in fitcore's order: PLACEMENTS_PREFIX + workload uid.
PLACEMENTS_PREFIX = "fitgate-placement-"
PLACEMENTS_KEY = "placements.json"

# ---- timings (seconds); Settings overrides them
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 1800
NODE_WAIT_SECONDS = 900  # after Provisioned, how long to wait for Ready nodes and slices
NODE_POLL_SECONDS = 10
#: A request neither Provisioned nor Failed after this is given up (Retry). Longer than the
#: cluster-autoscaler's own retry cycle for a request it could not satisfy (1 min, then 10
#: min backoff), so the autoscaler answers first when it can; short enough that quota held
#: for a gang whose autoscaler never answers (down, not watching the class) comes back
#: within half an hour. Queued classes that answer in hours want 0 (no deadline).
PROVISIONING_TIMEOUT_SECONDS = 1800
MESSAGE_LIMIT = 1024

# Topology-aware scheduling (admission.check.topology): the Workload annotation recording
# the domain fitgate steers Kueue's next reservation to, Kueue's requeue after such a
# Retry, and the job annotation recording fitgate's last disagreement with Kueue's domain.
TOPOLOGY_DOMAIN_ANNOTATION = "fitgate.io/topology-domain"
TOPOLOGY_STEER_RETRY_SECONDS = 5
TOPOLOGY_DISAGREEMENT_ANNOTATION = "fitgate.io/topology-disagreement"
