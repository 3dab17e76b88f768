// Command kube-proxy is upstream's kube-proxy, built from the Kubernetes release pinned in
// ../../go.mod: NodePorts and host-to-ClusterIP traffic on the lab's nodes, as Kube-OVN
// clusters run it beside Kube-OVN.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
