package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kustomizations are the directories `kubectl apply -k` is documented for.
var kustomizations = []string{"k8s", "k8s-secure"}

// kustomize refuses a base whose directory holds the overlay loading it ("cycle
// detected: candidate root ... contains visited root ..."), so `kubectl apply -k` of
// such an overlay fails whatever its patches say. Every directory resource of every
// kustomization must lie outside the kustomization's own directory tree.
func TestKustomizeBasesDoNotContainOverlays(t *testing.T) {
	for _, dir := range kustomizations {
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		self, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range k.Resources {
			base := filepath.Join(self, r)
			if st, err := os.Stat(base); err != nil || !st.IsDir() {
				continue
			}
			if rel, err := filepath.Rel(base, self); err == nil && !strings.HasPrefix(rel, "..") {
				t.Errorf("%s: resource %q is %s, which contains the overlay itself: kustomize refuses it", dir, r, base)
			}
		}
	}
}

// The real kustomize (kubectl's, when kubectl is installed) builds every
// kustomization, and the result decodes into Kubernetes objects.
func TestKustomizeBuilds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: kustomize builds not checked")
	}
	for _, dir := range kustomizations {
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
			continue
		}
		docs := strings.Split(string(out), "\n---\n")
		for _, d := range docs {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(d), &meta); err != nil || meta.Kind == "" {
				t.Errorf("kubectl kustomize %s: a document without kind (%v): %.200s", dir, err, d)
			}
		}
		if len(docs) < 10 {
			t.Errorf("kubectl kustomize %s: %d objects, want the whole stack", dir, len(docs))
		}
	}
}
