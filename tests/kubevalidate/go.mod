// The module root of kubevalidate. Each Kubernetes minor it checks against has its own
// module set, k8s-1.NN.mod and k8s-1.NN.sum beside this file (go build -modfile=...);
// build.sh builds one binary from each. This file is read by no build.
module streamconsumer.io/kubevalidate

go 1.24.0
