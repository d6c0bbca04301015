// Command kubeadm bootstraps the offline kind cluster's nodes (e2e/cluster/kind), linked
// from k8s.io/kubernetes.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmutil "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() {
	kubeadmutil.HandleError(app.Run())
}
