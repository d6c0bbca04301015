"""fitgate's AdmissionCheck controllers (controllerName `fitgate.io/topology-fit`).

- `workload`: the Workload reconciler: plan, provision, verify, then mark the check Ready
  with podSetUpdates that pin the gang, or Retry / Rejected with a message a person can
  act on.
- `capacity`: the reconciler's steps that ask the autoscaler for nodes, follow the
  ProvisioningRequest and verify the nodes that came.
- `ledger`: which nodes are held for which gang (promises, nodes a request brought).
- `readiness`: whether a plan's new nodes are Ready with their ResourceSlices.
- `inputs`: the reconciler's settings, stores, and one pass's parsed view.
- `predicates`: pure reads of Workloads and check entries, and the entry fitgate writes.
- `podsetupdates`: the pins and labels a Ready check adds to the pods, without colliding
  with the template, the flavors or another check.
- `provisioning`: the ProvisioningRequests and placeholder PodTemplates of a plan.
- `admissioncheck`: the AdmissionCheck `Active` reconciler (built with the process).
"""
