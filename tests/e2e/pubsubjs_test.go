package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pubsubJSVersion is the @google-cloud/pubsub release the test installs from npm (4.x
// runs on Node 20; 6.x needs Node 22).
const pubsubJSVersion = "4.9.0"

// TestPubSubNodeClient10k: the Node client creates a topic and a subscription,
// publishes 10,000 messages with attributes and receives every one through
// StreamingPull, acking each; afterwards nothing is left to redeliver.
func TestPubSubNodeClient10k(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, dir := nodeScript(ctx, t, filepath.Join("pubsubjs", "pubsub.js"), "@google-cloud/pubsub@"+pubsubJSVersion)

	s := pubsubStack(t)
	topic, sub := psID("node"), psID("node-sub")
	const n = 10000
	cmd := exec.CommandContext(ctx, node, "pubsub.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PUBSUB_EMULATOR_HOST="+s.PubSubAddrs[0], "PROJECT="+psProject,
		"TOPIC="+topic, "SUBSCRIPTION="+sub, "COUNT=10000", "TIMEOUT_MS=120000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client: %v\nstderr:\n%s", err, tailString(stderr.String(), 4000))
	}
	var res struct {
		Published int      `json:"published"`
		Received  int      `json:"received"`
		Bad       []string `json:"bad"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("node output %q: %v", tailString(stdout.String(), 500), err)
	}
	if res.Published != n || res.Received != n || len(res.Bad) > 0 {
		t.Fatalf("node client: published %d, received %d of %d, bad %v", res.Published, res.Received, n, res.Bad)
	}
	_, q := storageClients(t, s.StorageAddr)
	waitBacklog(t, q, sub, 0, 30*time.Second)
}
