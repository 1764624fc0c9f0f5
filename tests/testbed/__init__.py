"""Real parts for tests, benchmarks and the demo: a local Kubernetes control plane
(etcd, kube-apiserver, kube-controller-manager) and Kinesis emulators, each started on
free loopback ports and stopped by whoever started it."""
