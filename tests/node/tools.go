//go:build tools

// Package node pins the upstream commands built by build.sh, so that `go mod tidy`
// records every module they need in go.sum.
package node

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
