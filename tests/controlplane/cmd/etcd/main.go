// Command etcd is upstream etcd's server entry point, so the test control plane
// can build etcd from the module proxy like the Kubernetes binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
