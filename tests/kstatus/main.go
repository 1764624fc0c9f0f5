// kstatus prints kstatus' verdict (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, what
// Flux and `kubectl`-adjacent tools decide "done" with) on Kubernetes objects read as JSON
// from standard input: one object, or a List of them. One JSON line per object:
// {"name": ..., "status": "Current|InProgress|Failed|Terminating|NotFound|Unknown", "message": ...}.
//
// Usage: kubectl get -o json ... | kstatus
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: kstatus < object.json (one object or a List)")
		os.Exit(2)
	}
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var read unstructured.Unstructured
	if err := read.UnmarshalJSON(data); err != nil {
		fail(err)
	}
	objects := []unstructured.Unstructured{read}
	if read.IsList() {
		list, err := read.ToList()
		if err != nil {
			fail(err)
		}
		objects = list.Items
	}
	out := json.NewEncoder(os.Stdout)
	for i := range objects {
		result, err := status.Compute(&objects[i])
		if err != nil {
			fail(err)
		}
		if err := out.Encode(verdict{objects[i].GetName(), string(result.Status), result.Message}); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(2)
}
