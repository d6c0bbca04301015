#!/usr/bin/env bash
# kind profile: a kind cluster with DRA + Workload API gates, Kueue (v0.19, AdmissionGatedBy
# on), cert-manager and dra-example-driver; then fitgate's chart (charts/fitgate).
# Needs docker (or podman) and network access to the chart/image registries. It cannot run
# on fitgate's CI machines (no container engine), see README.md.
#
#   e2e/cluster/kind/up.sh            # create + install
#   e2e/cluster/kind/up.sh down       # delete the cluster
# Then: FITGATE_E2E_KUBECONFIG=$(kind get kubeconfig-path ...) or
#       kind get kubeconfig --name fitgate > /tmp/fitgate-kind.kubeconfig
#       FITGATE_E2E_KUBECONFIG=/tmp/fitgate-kind.kubeconfig .venv/bin/python -m pytest e2e
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
CLUSTER="${KIND_CLUSTER_NAME:-fitgate}"
NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.36.1}"
KUEUE_VERSION="${KUEUE_VERSION:-0.19.2}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.20.0}"
DRA_DRIVER_CHART_VERSION="${DRA_DRIVER_CHART_VERSION:-0.5.0}"
CTX="kind-$CLUSTER"

for tool in kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "up.sh: $tool is not on PATH" >&2; exit 1; }
done

if [ "${1:-}" = "down" ]; then
  exec kind delete cluster --name "$CLUSTER"
fi

step() { printf '\n==> %s\n' "$*"; }

step "kind cluster $CLUSTER ($NODE_IMAGE)"
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" \
    --config "$here/kind-config.yaml" --wait 180s
fi
kubectl --context "$CTX" wait --for=condition=Ready nodes --all --timeout=180s

step "cert-manager $CERT_MANAGER_VERSION"
helm --kube-context "$CTX" upgrade -i cert-manager oci://quay.io/jetstack/charts/cert-manager \
  --version "$CERT_MANAGER_VERSION" --namespace cert-manager --create-namespace \
  --set crds.enabled=true --wait --timeout 300s

step "Kueue $KUEUE_VERSION (AdmissionGatedBy on)"
helm --kube-context "$CTX" upgrade -i kueue oci://registry.k8s.io/kueue/charts/kueue \
  --version "$KUEUE_VERSION" --namespace kueue-system --create-namespace \
  --set 'controllerManager.featureGates[0].name=AdmissionGatedBy' \
  --set 'controllerManager.featureGates[0].enabled=true' \
  --wait --timeout 300s

step "ProvisioningRequest CRD (Kueue's provisioning admission check needs it served)"
kubectl --context "$CTX" apply --server-side -f \
  "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-1.35.2/cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
# Kueue enables its ProvisioningRequest controller only if the CRD existed at its start.
kubectl --context "$CTX" -n kueue-system rollout restart deployment/kueue-controller-manager
kubectl --context "$CTX" -n kueue-system rollout status deployment/kueue-controller-manager \
  --timeout=300s

step "dra-example-driver chart $DRA_DRIVER_CHART_VERSION"
helm --kube-context "$CTX" upgrade -i dra-example-driver \
  oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver \
  --version "$DRA_DRIVER_CHART_VERSION" --namespace dra-example-driver --create-namespace \
  --wait --timeout 300s
kubectl --context "$CTX" get resourceslices -o wide

if [ -f "$root/charts/fitgate/Chart.yaml" ]; then
  step "fitgate chart (charts/fitgate)"
  # FITGATE_CHART_VALUES: extra values file (e.g. to pick cert-manager certificates).
  helm --kube-context "$CTX" upgrade -i fitgate "$root/charts/fitgate" \
    --namespace fitgate-system --create-namespace \
    ${FITGATE_CHART_VALUES:+--values "$FITGATE_CHART_VALUES"} \
    --wait --timeout 300s
else
  step "charts/fitgate does not exist yet: fitgate itself not installed"
fi

step "ready: kubectl --context $CTX"
