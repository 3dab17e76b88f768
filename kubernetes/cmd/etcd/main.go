// Command etcd is etcd's own server main at the version the pinned Kubernetes release is
// tested with (go.etcd.io/etcd/server/v3, the same module kube-apiserver's storage links).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
