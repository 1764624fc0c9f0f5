//go:build tools

// Package controlplane pins the upstream commands built by build.sh, so that
// `go mod tidy` records every module they need in go.sum.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
