//go:build tools

// Pins the Prometheus module so `go mod tidy` keeps what build.sh builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
