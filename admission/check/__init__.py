"""fitgate's AdmissionCheck controllers (controllerName `fitgate.io/topology-fit`).

- `workload`: the Workload reconciler: plan, provision, verify, then mark the check Ready
  with podSetUpdates that pin the gang, or Retry / Rejected with a message a person can
  act on.
- `predicates`: pure reads of Workloads and check entries, and the entry fitgate writes.
- `podsetupdates`: the pins and labels a Ready check adds to the pods, without colliding
  with the template, the flavors or another check.
- `provisioning`: the ProvisioningRequests and placeholder PodTemplates of a plan.
- `admissioncheck`: the AdmissionCheck `Active` reconciler (built with the process).
"""
