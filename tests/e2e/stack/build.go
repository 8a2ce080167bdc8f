package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Binary names, as built from services/<name>/cmd/<name>.
const (
	StorageCore   = "storage-core"
	Coordinator   = "coordinator"
	KafkaGateway  = "kafka-gateway"
	PubSubGateway = "pubsub-gateway"
	MQTTBridge    = "mqtt-bridge"
)

// BinDirEnv names the environment variable that points at a directory of prebuilt
// binaries (storage-core, coordinator, kafka-gateway, pubsub-gateway, mqtt-bridge); when
// set nothing is built.
const BinDirEnv = "TRIBUTARY_BIN_DIR"

var binaryNames = []string{StorageCore, Coordinator, KafkaGateway, PubSubGateway, MQTTBridge}

var (
	buildMu  sync.Mutex
	builtDir string // set once Binaries built into a temp dir of ours
)

// Binaries returns a directory holding the service binaries. When
// TRIBUTARY_BIN_DIR is set it is used as is (each binary must exist there). Otherwise
// the binaries are built once per process with `go build` from the repository root into
// a temp dir; RemoveBinaries deletes it. Errors carry the go build output.
func Binaries(ctx context.Context) (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		for _, n := range binaryNames {
			if _, err := os.Stat(filepath.Join(d, n)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", BinDirEnv, d, err)
			}
		}
		return d, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir != "" {
		return builtDir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "tributary-e2e-bin-")
	if err != nil {
		return "", err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, n := range binaryNames {
		args = append(args, "./services/"+n+"/cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, out)
	}
	builtDir = dir
	return dir, nil
}

// RemoveBinaries deletes the binaries Binaries built (never a TRIBUTARY_BIN_DIR).
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
		builtDir = ""
	}
}

// RepoRoot finds the repository root: the nearest directory at or above the working
// directory holding go.work, else what `git rev-parse --show-toplevel` says.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", errors.New("repository root not found: no go.work above " + wd + " and git rev-parse failed")
	}
	return strings.TrimSpace(string(out)), nil
}
