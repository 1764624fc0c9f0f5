// kubevalidate strictly decodes Kubernetes manifests with the API types of one
// Kubernetes release: the release whose k8s.io/api, k8s.io/apimachinery, k8s.io/client-go
// and k8s.io/apiextensions-apiserver modules it was built with (build.sh builds one binary
// per minor, each from its own k8s-1.NN.mod). For every YAML document it reports an
// apiVersion/kind that release does not serve by default (no such type; an alpha
// version; a beta removed by then, or introduced in 1.24 or later, which the apiserver
// leaves off unless enabled: KEP-3136), and any field its types do not have or of the
// wrong type (strict decoding: unknown and duplicate fields are errors), CRDs and
// ValidatingAdmissionPolicies included. It does not run the apiserver's validation
// (required fields, formats, CEL): the real apiserver's dry run does that for the release
// the tests run.
//
// Usage: kubevalidate [-foreign group,group] FILE...   ("-" reads standard input)
// Exit status 1 if any document is refused; each document gets one line.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Set by build.sh: the Kubernetes release these types are.
var release = "unknown"

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func main() {
	foreign := flag.String("foreign", "", "API groups of other projects' CRDs (comma-separated): their objects are listed as skipped, not refused")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kubevalidate [-foreign group,...] FILE... (- for stdin)")
		os.Exit(2)
	}
	skip := map[string]bool{}
	for _, group := range strings.Split(*foreign, ",") {
		if group != "" {
			skip[group] = true
		}
	}
	types := runtime.NewScheme()
	if err := scheme.AddToScheme(types); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(types); err != nil {
		panic(err)
	}
	decoder := serializer.NewCodecFactory(types, serializer.EnableStrict).UniversalDeserializer()
	refused := 0
	for _, path := range flag.Args() {
		n, err := validate(path, types, decoder, skip)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		refused += n
	}
	if refused > 0 {
		fmt.Printf("Kubernetes %s: %d document(s) refused\n", release, refused)
		os.Exit(1)
	}
	fmt.Printf("Kubernetes %s: all documents valid\n", release)
}

func validate(path string, types *runtime.Scheme, decoder runtime.Decoder, skip map[string]bool) (int, error) {
	var in io.Reader = os.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		defer file.Close()
		in = file
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	refused := 0
	for index := 0; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return refused, nil
		}
		if err != nil {
			return refused, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta typeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			fmt.Printf("REFUSED %s#%d: not YAML: %v\n", path, index, err)
			refused++
			continue
		}
		gv, err := schema.ParseGroupVersion(meta.APIVersion)
		if err != nil || meta.Kind == "" {
			fmt.Printf("REFUSED %s#%d: no apiVersion and kind\n", path, index)
			refused++
			continue
		}
		what := fmt.Sprintf("%s %s/%s", meta.APIVersion, meta.Kind, meta.Metadata.Name)
		gvk := gv.WithKind(meta.Kind)
		if skip[gv.Group] {
			fmt.Printf("SKIPPED %s: another project's API group\n", what)
			continue
		}
		if !types.Recognizes(gvk) {
			fmt.Printf("REFUSED %s: Kubernetes %s serves no kind %s in %s%s\n", what, release, meta.Kind, meta.APIVersion, served(types, gvk))
			refused++
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			fmt.Printf("REFUSED %s: %v\n", what, err)
			refused++
			continue
		}
		if why := notServed(gv, obj); why != "" {
			fmt.Printf("REFUSED %s: Kubernetes %s %s\n", what, release, why)
			refused++
			continue
		}
		fmt.Printf("OK %s\n", what)
	}
}

type removed interface{ APILifecycleRemoved() (int, int) }
type introduced interface{ APILifecycleIntroduced() (int, int) }

// notServed says why an apiserver of this release does not serve the object's version by
// default ("" if it does), from the lifecycle k8s.io/api records on prerelease types.
func notServed(gv schema.GroupVersion, obj runtime.Object) string {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		panic("release " + release + " is not MAJOR.MINOR.PATCH")
	}
	atOrBefore := func(m, n int) bool { return m < major || (m == major && n <= minor) }
	switch {
	case strings.Contains(gv.Version, "alpha"):
		return fmt.Sprintf("serves %s (an alpha version) only where enabled", gv)
	case strings.Contains(gv.Version, "beta"):
		if r, ok := obj.(removed); ok {
			if m, n := r.APILifecycleRemoved(); atOrBefore(m, n) {
				return fmt.Sprintf("no longer serves %s (removed in %d.%d)", gv, m, n)
			}
		}
		if i, ok := obj.(introduced); ok {
			if m, n := i.APILifecycleIntroduced(); m > 1 || n >= 24 {
				return fmt.Sprintf("serves %s (a beta of %d.%d, off by default) only where enabled", gv, m, n)
			}
		}
	}
	return ""
}

// served names the versions of the kind's group that this release does serve, if any.
func served(types *runtime.Scheme, gvk schema.GroupVersionKind) string {
	var versions []string
	for _, gv := range types.PrioritizedVersionsForGroup(gvk.Group) {
		if types.Recognizes(gv.WithKind(gvk.Kind)) {
			versions = append(versions, gv.String())
		}
	}
	if len(versions) == 0 {
		return ""
	}
	return " (it serves " + strings.Join(versions, ", ") + ")"
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
