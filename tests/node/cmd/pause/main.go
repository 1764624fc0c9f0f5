// Command pause is a pod's sandbox process: it holds the pod's namespaces, reaps the
// zombies of processes that share its PID namespace, and exits on SIGINT or SIGTERM.
// No registry is reachable here, so the node's pause image is this binary FROM scratch.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
