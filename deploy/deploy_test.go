// Package deploy checks the compose file and the Kubernetes manifests without a container
// engine: the compose file must load under the Compose specification's schema, and every
// manifest must decode strictly (unknown fields are errors) into its Kubernetes API type.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func TestComposeLoads(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"compose/compose.yaml"}, cli.WithOsEnv, cli.WithName("tributary"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose file does not load: %v", err)
	}
	want := []string{"coordinator", "kafka-gateway", "mqtt-bridge", "nats", "postgres", "pubsub-gateway", "storage-core"}
	got := p.ServiceNames()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services = %v, want %v", got, want)
	}
	gw, _ := p.GetService("kafka-gateway")
	if !hasPublished(gw.Ports, "9092") {
		t.Errorf("kafka-gateway does not publish 9092: %+v", gw.Ports)
	}
	ps, _ := p.GetService("pubsub-gateway")
	if !hasPublished(ps.Ports, "8085") {
		t.Errorf("pubsub-gateway does not publish 8085: %+v", ps.Ports)
	}
	sc, _ := p.GetService("storage-core")
	if !hasPublished(sc.Ports, "7400") {
		t.Errorf("storage-core does not publish 7400: %+v", sc.Ports)
	}
	for _, name := range natsServices {
		s, _ := p.GetService(name)
		if !slices.Contains(s.Command, "--nats-url=nats://nats:4222") {
			t.Errorf("%s is not pointed at the nats service: %v", name, s.Command)
		}
	}
	for _, name := range []string{"storage-core", "coordinator", "kafka-gateway", "pubsub-gateway", "mqtt-bridge"} {
		s, _ := p.GetService(name)
		if s.Build == nil || s.Build.Args["SERVICE"] == nil || *s.Build.Args["SERVICE"] != name {
			t.Errorf("%s: build arg SERVICE must name the service", name)
		}
		if _, err := os.Stat(filepath.Join("..", "services", name, "cmd", name)); err != nil {
			t.Errorf("%s: no main package for the Dockerfile to build: %v", name, err)
		}
	}
}

// natsServices are the services that take wake-ups and sweep locks from NATS.
var natsServices = []string{"coordinator", "kafka-gateway", "pubsub-gateway"}

func hasPublished(ports []composePort, port string) bool {
	for _, p := range ports {
		if p.Published == port {
			return true
		}
	}
	return false
}

func TestK8sManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufioReader(raw))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj any
			switch meta.Kind {
			case "Service":
				obj = &corev1.Service{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "HorizontalPodAutoscaler":
				obj = &autoscalingv2.HorizontalPodAutoscaler{}
			default:
				t.Fatalf("%s: unexpected kind %q", f, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s: %s does not decode strictly: %v", f, meta.Kind, err)
			}
			checkWorkload(t, f, obj)
			kinds[meta.Kind]++
		}
	}
	if kinds["StatefulSet"] != 2 || kinds["Deployment"] != 3 || kinds["HorizontalPodAutoscaler"] != 2 || kinds["ConfigMap"] != 1 {
		t.Fatalf("kinds = %v: want storage-core and mqtt-bridge StatefulSets (the bridge's listener sessions on a volume), coordinator, kafka-gateway and pubsub-gateway Deployments, an HPA per gateway, the bridge's ConfigMap", kinds)
	}
}

// checkWorkload asserts that a workload's selector matches its pod labels and that every
// container has readiness and liveness probes on the obs endpoints.
func checkWorkload(t *testing.T, file string, obj any) {
	t.Helper()
	var sel map[string]string
	var tmpl corev1.PodTemplateSpec
	switch o := obj.(type) {
	case *appsv1.Deployment:
		sel, tmpl = o.Spec.Selector.MatchLabels, o.Spec.Template
	case *appsv1.StatefulSet:
		sel, tmpl = o.Spec.Selector.MatchLabels, o.Spec.Template
	default:
		return
	}
	for k, v := range sel {
		if tmpl.Labels[k] != v {
			t.Errorf("%s: selector %s=%s does not match the pod labels", file, k, v)
		}
	}
	for _, c := range tmpl.Spec.Containers {
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: container %s has no /readyz readiness probe", file, c.Name)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: container %s has no /healthz liveness probe", file, c.Name)
		}
		for _, a := range c.Args {
			if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") {
				t.Errorf("%s: container %s arg %q is not --flag=value", file, c.Name, a)
			}
		}
		if slices.Contains(natsServices, c.Name) && !slices.Contains(c.Args, "--nats-url=nats://nats:4222") {
			t.Errorf("%s: container %s is not pointed at the nats service", file, c.Name)
		}
	}
}
