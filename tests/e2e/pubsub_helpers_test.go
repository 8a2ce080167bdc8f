package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// psProject is the project of every Pub/Sub resource the tests create (ids are global,
// the project is only validated).
const psProject = "e2e-project"

var (
	psOnce  sync.Once
	psStack *stack.Stack
	psErr   error
)

// pubsubStack returns the stack shared by the Pub/Sub tests: storage-core, coordinator
// and two pubsub-gateway replicas (tests that kill a process start their own).
func pubsubStack(t *testing.T) *stack.Stack {
	t.Helper()
	testenv.Require(t)
	psOnce.Do(func() {
		psStack, psErr = stack.Start(context.Background(), stack.Options{PubSubGateways: 2})
	})
	if psErr != nil {
		t.Fatalf("start pubsub stack: %v", psErr)
	}
	s := psStack
	marks := s.LogMarks()
	t.Cleanup(func() {
		for _, c := range s.Crashes() {
			t.Errorf("process crash: %s", c)
		}
		if t.Failed() {
			t.Logf("pubsub stack logs written during this test:\n%s", s.LogsSince(marks, 60))
		}
	})
	return s
}

func closePubSubStack() {
	if psStack == nil {
		return
	}
	if crashes := psStack.Crashes(); len(crashes) > 0 {
		fmt.Fprintf(os.Stderr, "pubsub stack: processes crashed by themselves: %v\n%s", crashes, psStack.LogTails(80))
	}
	if err := psStack.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "pubsub stack close: %v\n", err)
	}
}

// psClient returns a Go Pub/Sub client of gateway addr, found the way users find an
// emulator: PUBSUB_EMULATOR_HOST.
func psClient(t *testing.T, addr string) *pubsub.Client {
	t.Helper()
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)
	c, err := pubsub.NewClient(ctxT(t, 10*time.Second), psProject)
	if err != nil {
		t.Fatalf("pubsub.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawPubSub returns the generated gRPC clients of gateway addr, for calls the Go
// client wraps (error codes, Pull, explicit acks), with the 20 MB receive limit Google's
// clients use.
func rawPubSub(t *testing.T, addr string) (pubsubpb.PublisherClient, pubsubpb.SubscriberClient) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(20<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pubsubpb.NewPublisherClient(cc), pubsubpb.NewSubscriberClient(cc)
}

// storageClients returns storage-core's StorageService and QueueService clients.
func storageClients(t *testing.T, addr string) (storagev1.StorageServiceClient, storagev1.QueueServiceClient) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return storagev1.NewStorageServiceClient(cc), storagev1.NewQueueServiceClient(cc)
}

func topicPath(id string) string { return "projects/" + psProject + "/topics/" + id }
func subPath(id string) string   { return "projects/" + psProject + "/subscriptions/" + id }

// psID returns a fresh Pub/Sub resource id ("<prefix>-<random>").
func psID(prefix string) string { return topicName(prefix) }

// mustCreateTopic creates topic id.
func mustCreateTopic(t *testing.T, pub pubsubpb.PublisherClient, id string) {
	t.Helper()
	if _, err := pub.CreateTopic(ctxT(t, 30*time.Second), &pubsubpb.Topic{Name: topicPath(id)}); err != nil {
		t.Fatalf("CreateTopic %s: %v", id, err)
	}
}

// mustCreateSub creates subscription sub (with the settings of s, if given) on topic.
func mustCreateSub(t *testing.T, sc pubsubpb.SubscriberClient, id, topic string, s *pubsubpb.Subscription) *pubsubpb.Subscription {
	t.Helper()
	if s == nil {
		s = &pubsubpb.Subscription{}
	}
	s.Name, s.Topic = subPath(id), topicPath(topic)
	got, err := sc.CreateSubscription(ctxT(t, 30*time.Second), s)
	if err != nil {
		t.Fatalf("CreateSubscription %s on %s: %v", id, topic, err)
	}
	return got
}

// wantCode fails the test unless err has code want.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// waitBacklog polls the subscription's queue until its backlog is want.
func waitBacklog(t *testing.T, q storagev1.QueueServiceClient, sub string, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last int64 = -1
	for {
		resp, err := q.GetQueue(ctxT(t, 10*time.Second), &storagev1.GetQueueRequest{Name: channel.PubSubSubscription(sub)})
		if err == nil {
			last = resp.GetQueue().GetBacklog()
			if last == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s: backlog %d (err %v), want %d within %v", sub, last, err, want, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startEmulator starts Google's official Pub/Sub emulator on a free port for the test
// and returns its address. Without gcloud the test is skipped (also in CI: the emulator
// is a reference, not a dependency).
func startEmulator(t *testing.T) string {
	t.Helper()
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		t.Skipf("SKIPPING: gcloud (the official Pub/Sub emulator) is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	logPath := filepath.Join(t.TempDir(), "emulator.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(gcloud, "beta", "emulators", "pubsub", "start", "--host-port="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	pub, _ := rawPubSub(t, addr)
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := pub.GetTopic(ctxT(t, 5*time.Second), &pubsubpb.GetTopicRequest{Topic: topicPath("probe")})
		if status.Code(err) == codes.NotFound {
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("emulator on %s not answering after 90s (last: %v); output:\n%s", addr, err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
