// Command kube-controller-manager is upstream's kube-controller-manager, built from the Kubernetes release pinned in
// ../../go.mod: this file only calls the command constructor upstream's own main calls.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
