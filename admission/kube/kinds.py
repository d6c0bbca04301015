"""Every kind fitgate reads or writes, by the API version fitgate speaks."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Kind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODE = Kind("Node", "", "v1", "nodes", False)
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", False)
POD = Kind("Pod", "", "v1", "pods", True)
POD_TEMPLATE = Kind("PodTemplate", "", "v1", "podtemplates", True)
CONFIG_MAP = Kind("ConfigMap", "", "v1", "configmaps", True)
EVENT = Kind("Event", "events.k8s.io", "v1", "events", True)
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", True)
JOB = Kind("Job", "batch", "v1", "jobs", True)
# Kueue-managed job kinds besides Job: the webhook gates them, the gate ungates them.
JOBSET = Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", True)
TRAIN_JOB = Kind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", True)
PYTORCH_JOB = Kind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", True)
MPI_JOB = Kind("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", True)
RAY_JOB = Kind("RayJob", "ray.io", "v1", "rayjobs", True)
RAY_CLUSTER = Kind("RayCluster", "ray.io", "v1", "rayclusters", True)
LEADER_WORKER_SET = Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1",
                         "leaderworkersets", True)
JOB_KINDS = (JOB, JOBSET, TRAIN_JOB, PYTORCH_JOB, MPI_JOB, RAY_JOB, RAY_CLUSTER,
             LEADER_WORKER_SET)
RESOURCE_SLICE = Kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", False)
RESOURCE_CLAIM = Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATE = Kind("ResourceClaimTemplate", "resource.k8s.io", "v1",
                               "resourceclaimtemplates", True)
DEVICE_CLASS = Kind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", False)
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", True)
ADMISSION_CHECK = Kind("AdmissionCheck", "kueue.x-k8s.io", "v1beta2", "admissionchecks", False)
CLUSTER_QUEUE = Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", False)
LOCAL_QUEUE = Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues", True)
RESOURCE_FLAVOR = Kind("ResourceFlavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors", False)
PROVISIONING_REQUEST = Kind("ProvisioningRequest", "autoscaling.x-k8s.io", "v1",
                            "provisioningrequests", True)
NODE_SHAPE = Kind("NodeShape", "fitgate.io", "v1alpha1", "nodeshapes", False)
FIT_POLICY = Kind("FitPolicy", "fitgate.io", "v1alpha1", "fitpolicies", False)
# Karpenter (admission.check.backends.karpenter): NodeClaims fitgate creates for a plan, owned by
# the NodePool its shape names.
NODE_CLAIM = Kind("NodeClaim", "karpenter.sh", "v1", "nodeclaims", False)
NODE_POOL = Kind("NodePool", "karpenter.sh", "v1", "nodepools", False)
# Self-managed serving certificate (chart value certificates.mode=self-managed).
SECRET = Kind("Secret", "", "v1", "secrets", True)
MUTATING_WEBHOOK_CONFIGURATION = Kind("MutatingWebhookConfiguration",
                                      "admissionregistration.k8s.io", "v1",
                                      "mutatingwebhookconfigurations", False)
VALIDATING_WEBHOOK_CONFIGURATION = Kind("ValidatingWebhookConfiguration",
                                        "admissionregistration.k8s.io", "v1",
                                        "validatingwebhookconfigurations", False)

ALL = (NODE, NAMESPACE, POD, POD_TEMPLATE, CONFIG_MAP, EVENT, LEASE, *JOB_KINDS,
       RESOURCE_SLICE, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, DEVICE_CLASS, WORKLOAD,
       ADMISSION_CHECK, CLUSTER_QUEUE, LOCAL_QUEUE, RESOURCE_FLAVOR, PROVISIONING_REQUEST,
       NODE_SHAPE, FIT_POLICY, NODE_CLAIM, NODE_POOL, SECRET, MUTATING_WEBHOOK_CONFIGURATION,
       VALIDATING_WEBHOOK_CONFIGURATION)
BY_NAME = {k.kind: k for k in ALL}
