// Command kube-scheduler is upstream's kube-scheduler, built from the Kubernetes release pinned in
// ../../go.mod: this file only calls the command constructor upstream's own main calls.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
