package deploy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// secureFlags are the flags each service needs in a secured deployment: its server
// certificate (and caller authentication) where it serves gRPC, its client certificate
// and the CA where it dials.
var secureFlags = map[string][]string{
	"storage-core": {"--tls-cert=", "--tls-key=", "--tls-client-ca=", "--auth=required", "--auth-credentials-file="},
	"coordinator":  {"--tls-cert=", "--tls-key=", "--tls-client-ca=", "--auth=required", "--auth-credentials-file=", "--storage-tls-ca=", "--tls-client-cert=", "--tls-client-key="},
	"kafka-gateway": {"--storage-tls-ca=", "--coordinator-tls-ca=", "--tls-client-cert=", "--tls-client-key=",
		"--listeners=PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093", "--tls-cert=", "--tls-key=", "--sasl-users-file="},
	"pubsub-gateway": {"--tls-cert=", "--tls-key=", "--storage-tls-ca=", "--coordinator-tls-ca=", "--tls-client-cert=", "--tls-client-key="},
}

// mqttSecureEnv is the bridge's dial settings (YAML keys storage-tls and coordinator-tls).
var mqttSecureEnv = []string{
	"TRIBUTARY_MQTT_STORAGE_TLS_CA_FILE", "TRIBUTARY_MQTT_STORAGE_TLS_CERT_FILE", "TRIBUTARY_MQTT_STORAGE_TLS_KEY_FILE",
	"TRIBUTARY_MQTT_COORDINATOR_TLS_CA_FILE", "TRIBUTARY_MQTT_COORDINATOR_TLS_CERT_FILE", "TRIBUTARY_MQTT_COORDINATOR_TLS_KEY_FILE",
}

func missingFlags(service string, args []string) []string {
	var out []string
	for _, want := range secureFlags[service] {
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, want) }) {
			out = append(out, want)
		}
	}
	return out
}

// The secured compose override loads over the base file, and every service gets its
// TLS flags with files from the secrets it mounts (its own key only).
func TestComposeSecureLoads(t *testing.T) {
	certs := t.TempDir()
	for _, f := range []string{"ca.pem", "credentials"} {
		if err := os.WriteFile(filepath.Join(certs, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for s := range secureFlags {
		for _, f := range []string{s + ".pem", s + "-key.pem"} {
			_ = os.WriteFile(filepath.Join(certs, f), nil, 0o600)
		}
	}
	_ = os.WriteFile(filepath.Join(certs, "mqtt-bridge.pem"), nil, 0o600)
	_ = os.WriteFile(filepath.Join(certs, "mqtt-bridge-key.pem"), nil, 0o600)
	_ = os.WriteFile(filepath.Join(certs, "kafka-users"), nil, 0o600)
	t.Setenv("TRIBUTARY_CERTS_DIR", certs)
	opts, err := cli.NewProjectOptions([]string{"compose/compose.yaml", "compose/compose.secure.yaml"}, cli.WithOsEnv, cli.WithName("tributary"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("secured compose files do not load: %v", err)
	}
	for name := range secureFlags {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := missingFlags(name, s.Command); len(m) > 0 {
			t.Errorf("%s: missing %v in %v", name, m, s.Command)
		}
		if !slices.Contains(s.Command, "--nats-url=nats://nats:4222") && name != "storage-core" {
			t.Errorf("%s: the override lost --nats-url", name)
		}
		var mounted []string
		for _, sec := range s.Secrets {
			mounted = append(mounted, sec.Source)
			if strings.HasSuffix(sec.Source, "-key") && sec.Source != name+"-key" {
				t.Errorf("%s mounts another service's key %s", name, sec.Source)
			}
		}
		for _, a := range s.Command {
			if _, file, ok := strings.Cut(a, "=/run/secrets/"); ok && !slices.Contains(mounted, file) {
				t.Errorf("%s: %s names a secret it does not mount (%v)", name, a, mounted)
			}
		}
	}
	if gw, _ := p.GetService("kafka-gateway"); !hasPublished(gw.Ports, "9093") || !hasPublished(gw.Ports, "9092") {
		t.Errorf("kafka-gateway publishes %+v, want 9092 and 9093 (SASL_SSL)", gw.Ports)
	}
	b, _ := p.GetService("mqtt-bridge")
	for _, e := range mqttSecureEnv {
		if v := b.Environment[e]; v == nil || !strings.HasPrefix(*v, "/run/secrets/") {
			t.Errorf("mqtt-bridge: %s not set to a secret", e)
		}
	}
}

// The secured Kubernetes overlay: each patch decodes strictly, keeps the base's flags,
// adds the TLS ones, and mounts from secrets what they name.
func TestK8sSecureOverlay(t *testing.T) {
	raw, err := os.ReadFile("k8s-secure/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
		Patches   []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Resources, []string{"../k8s"}) || len(k.Patches) != 6 {
		t.Fatalf("kustomization: resources %v, %d patches, want the base, one patch per service and kafka-gateway's Service", k.Resources, len(k.Patches))
	}
	for _, pt := range k.Patches {
		doc, err := os.ReadFile(filepath.Join("k8s-secure", pt.Path))
		if err != nil {
			t.Fatal(err)
		}
		if pt.Path == "kafka-gateway-service.yaml" {
			var svc corev1.Service
			if err := yaml.UnmarshalStrict(doc, &svc); err != nil {
				t.Fatalf("%s: %v", pt.Path, err)
			}
			if svc.Name != "kafka-gateway" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9093 {
				t.Errorf("%s: want kafka-gateway's Service with port 9093: %+v", pt.Path, svc.Spec.Ports)
			}
			continue
		}
		base, err := os.ReadFile(filepath.Join("k8s", pt.Path))
		if err != nil {
			t.Fatalf("%s patches no base manifest: %v", pt.Path, err)
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		_ = yaml.Unmarshal(doc, &meta)
		var spec corev1.PodSpec
		switch meta.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(doc, &d); err != nil {
				t.Fatalf("%s: %v", pt.Path, err)
			}
			spec = d.Spec.Template.Spec
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				t.Fatalf("%s: %v", pt.Path, err)
			}
			spec = s.Spec.Template.Spec
		default:
			t.Fatalf("%s: kind %q", pt.Path, meta.Kind)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", pt.Path, len(spec.Containers))
		}
		c := spec.Containers[0]
		if m := missingFlags(c.Name, c.Args); len(m) > 0 {
			t.Errorf("%s: missing %v", pt.Path, m)
		}
		// Args replace the base's list: every base flag must still be there (but those
		// the Kafka listener flags replace).
		for _, line := range strings.Split(string(base), "\n") {
			a, ok := strings.CutPrefix(strings.TrimSpace(line), "- --")
			if ok && c.Name == "kafka-gateway" && (strings.HasPrefix(a, "listen=") || strings.HasPrefix(a, "advertised-addr=")) {
				continue
			}
			if ok && len(c.Args) > 0 && !slices.Contains(c.Args, "--"+a) {
				t.Errorf("%s: base flag --%s dropped", pt.Path, a)
			}
		}
		if c.Name == "mqtt-bridge" {
			for _, e := range mqttSecureEnv {
				if !slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == e }) {
					t.Errorf("mqtt-bridge: %s not set", e)
				}
			}
		}
		vols := map[string]string{}
		for _, v := range spec.Volumes {
			if v.Secret == nil {
				t.Errorf("%s: volume %s is not a secret", pt.Path, v.Name)
				continue
			}
			vols[v.Name] = v.Secret.SecretName
		}
		if vols["tls"] != c.Name+"-tls" {
			t.Errorf("%s: tls volume from %q, want %s-tls", pt.Path, vols["tls"], c.Name)
		}
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("%s: mount %s has no volume", pt.Path, m.Name)
			}
		}
	}
}
