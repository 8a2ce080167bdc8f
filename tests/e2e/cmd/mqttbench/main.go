// Command mqttbench measures MQTT QoS 1 throughput of 1 KiB messages, in one run, for
// each case of publishers × messages each keeps in flight (default 100×1, 1000×1 and
// 1×100):
//
//   - mosquitto: Mosquitto alone, publishers → one QoS 1 subscriber, in memory, no fsync
//     (messages per second the subscriber received);
//   - listener: publishers → mqtt-bridge's embedded broker → storage-core, PUBACK after
//     fsync (acknowledged messages per second);
//   - upstream: publishers → Mosquitto → mqtt-bridge (subscribed, manual acks after
//     fsync) → storage-core (records stored per second, from the bridge's metrics).
//
// and prints the listener's rate as a multiple of Mosquitto's (the bar: ≥ 1× with one
// message in flight per publisher, ≥ 0.5× for one publisher with many), with the CPU
// time per message of each process. The upstream case runs with the first case's
// publishers.
//
// Run from tests/e2e: go run ./cmd/mqttbench [-duration 5s] [-cases 100x1,1000x1,1x100]
// [-profile DIR]: -profile also writes pprof CPU and allocs profiles of mqtt-bridge and
// storage-core taken over each case's listener run (go tool pprof merges the files).
// It needs the test Postgres, NATS and Mosquitto (TRIBUTARY_TEST_MQTT_ADDR);
// TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mqttbench:", err)
		os.Exit(1)
	}
}

func run() error {
	duration := flag.Duration("duration", 5*time.Second, "how long each case publishes")
	caseList := flag.String("cases", "100x1,1000x1,1x100", "comma-separated cases: publishers x QoS 1 messages each keeps in flight")
	size := flag.Int("bytes", 1024, "payload size")
	fsync := flag.String("fsync", "always", "storage-core --fsync (always, or interval=<dur> to see what waiting for the disk costs)")
	profileDir := flag.String("profile", "", "directory for CPU and allocs profiles of mqtt-bridge and storage-core over each case's listener run (-duration less a second), one file per case")
	flag.Parse()
	cases, err := parseCases(*caseList)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := testenv.Check(ctx); err != nil {
		return err
	}
	mosq := testenv.MQTTAddr()
	if c, err := net.DialTimeout("tcp", mosq, 3*time.Second); err != nil {
		return fmt.Errorf("mosquitto at %s (TRIBUTARY_TEST_MQTT_ADDR): %w", mosq, err)
	} else {
		_ = c.Close()
	}
	s, err := stack.Start(ctx, stack.Options{Fsync: *fsync})
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	lis := stack.FreeAddr()
	bridge, err := s.StartMQTTBridge(ctx, "mqtt-bridge-bench", fmt.Sprintf(`
id: bench-%[1]s
listener:
  addr: %[2]s
  queue-size: 100000
clusters:
  - name: mosquitto
    urls: [mqtt://%[3]s]
    client-id: tributary-bench-%[1]s
    session-expiry: 1m
mqtt-to-kafka:
  - id: listener
    source: listener
    mqtt-topic-filters: ["bench/#"]
    kafka-topic: mqttbench-listener-%[1]s
    partitions: 6
  - id: upstream
    source: mosquitto
    mqtt-topic-filters: ["bench-%[1]s/up/#"]
    kafka-topic: mqttbench-upstream-%[1]s
    partitions: 6
`, id, lis, mosq))
	if err != nil {
		return err
	}
	payload := make([]byte, *size)
	_, _ = rand.Read(payload)
	fmt.Printf("MQTT QoS 1, %d B payloads, %v per case; storage-core fsync=%s\n", *size, *duration, *fsync)
	storage, err := s.Proc(stack.StorageCore)
	if err != nil {
		return err
	}
	mosqPid := mosquittoPid(mosq)
	for _, c := range cases {
		fmt.Printf(" %d publishers × %d in flight\n", c.publishers, c.inflight)
		// Mosquitto alone: publishers → subscriber.
		var received atomic.Int64
		sub, err := connect(ctx, mosq, "bench-sub-"+id, func(paho.PublishReceived) (bool, error) {
			received.Add(1)
			return true, nil
		})
		if err != nil {
			return err
		}
		if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "bench-" + id + "/mosq/#", QoS: 1}}}); err != nil {
			return err
		}
		mosqCPU, selfCPU := stack.CPUTime(mosqPid), stack.CPUTime(os.Getpid())
		start := time.Now()
		if _, err := publish(ctx, mosq, "bench-"+id+"/mosq", c, *duration, payload); err != nil {
			return err
		}
		mosqN := received.Load()
		mosqRate := float64(mosqN) / time.Since(start).Seconds()
		_ = sub.Disconnect(&paho.Disconnect{})
		fmt.Printf("  %-44s %10.0f msg/s\n", "mosquitto alone (publisher → subscriber)", mosqRate)
		if mosqN > 0 {
			mosqUs := "mosquitto not found"
			if mosqPid != 0 {
				mosqUs = fmt.Sprintf("%.1f µs mosquitto", float64((stack.CPUTime(mosqPid)-mosqCPU).Microseconds())/float64(mosqN))
			}
			fmt.Printf("  %-44s %s, %.1f µs clients (this process)\n", "  CPU per message", mosqUs, float64((stack.CPUTime(os.Getpid())-selfCPU).Microseconds())/float64(mosqN))
		}

		// Listener: PUBACK after fsync.
		var profiled func()
		if *profileDir != "" {
			profiled = profile(*profileDir, fmt.Sprintf("%dx%d", c.publishers, c.inflight), *duration, map[string]string{"mqtt-bridge": bridge.HTTPAddr, "storage-core": storage.HTTPAddr})
		}
		appendsBefore, _ := metric(storage.HTTPAddr, "tributary_storage_appends_total", "")
		cpuBefore := [3]time.Duration{stack.CPUTime(bridge.Pid()), stack.CPUTime(storage.Pid()), stack.CPUTime(os.Getpid())}
		lisN, err := publish(ctx, lis, "bench/l", c, *duration, payload)
		if profiled != nil {
			profiled()
		}
		if err != nil {
			return err
		}
		lisRate := float64(lisN) / duration.Seconds()
		bar := 1.0
		if c.inflight > 1 {
			bar = 0.5
		}
		fmt.Printf("  %-44s %10.0f msg/s   %.2f× mosquitto (bar ≥ %.1f×)\n", "listener (PUBACK after fsync)", lisRate, lisRate/mosqRate, bar)
		if lisN > 0 {
			per := func(i int, pid int) float64 {
				return float64((stack.CPUTime(pid) - cpuBefore[i]).Microseconds()) / float64(lisN)
			}
			fmt.Printf("  %-44s %7.1f µs mqtt-bridge, %.1f µs storage-core, %.1f µs clients (this process)\n", "  CPU per message", per(0, bridge.Pid()), per(1, storage.Pid()), per(2, os.Getpid()))
			if after, err := metric(storage.HTTPAddr, "tributary_storage_appends_total", ""); err == nil && after > appendsBefore {
				fmt.Printf("  %-44s %7.1f (%.0f Appends)\n", "  messages per storage-core Append", float64(lisN)/(after-appendsBefore), after-appendsBefore)
			}
		}
		if lisRate < bar*mosqRate {
			fmt.Printf("  listener below %.1f× Mosquitto's rate\n", bar)
		}
	}

	// Upstream: through Mosquitto into storage-core.
	before, err := metric(bridge.HTTPAddr, "tributary_mqtt_stored_total", "upstream")
	if err != nil {
		return err
	}
	start := time.Now()
	upN, err := publish(ctx, mosq, "bench-"+id+"/up", cases[0], *duration, payload)
	if err != nil {
		return err
	}
	// Let the bridge drain what Mosquitto queued for it.
	deadline := time.Now().Add(30 * time.Second)
	var stored float64
	for {
		v, err := metric(bridge.HTTPAddr, "tributary_mqtt_stored_total", "upstream")
		if err != nil {
			return err
		}
		stored = v - before
		if stored >= float64(upN) || time.Now().After(deadline) {
			break
		}
		<-time.After(20 * time.Millisecond)
	}
	upRate := stored / time.Since(start).Seconds()
	fmt.Printf(" %d publishers × %d in flight\n  %-44s %10.0f msg/s   (%d published, %.0f stored)\n", cases[0].publishers, cases[0].inflight, "upstream (Mosquitto → bridge → fsync)", upRate, upN, stored)
	return nil
}

// profile starts taking a CPU and an allocs profile of each named process (its
// /debug/pprof address) into dir as <name>.<kind>.<label>.pb.gz, over d less a second
// (at least one), and returns a wait for them.
func profile(dir, label string, d time.Duration, addrs map[string]string) func() {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return nil
	}
	sec := max(1, int(d.Seconds())-1)
	var wg sync.WaitGroup
	for name, addr := range addrs {
		for _, kind := range []string{"profile", "allocs"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("%s/%s.%s.%s.pb.gz", dir, name, kind, label)
				if err := stack.FetchProfile(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, sec), path); err != nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
				}
			}()
		}
	}
	return wg.Wait
}

func connect(ctx context.Context, addr, id string, onPublish func(paho.PublishReceived) (bool, error)) (*paho.Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{Conn: conn, ClientID: id}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
	}
	c := paho.NewClient(cfg)
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// benchCase is how many publishers a case runs, and how many QoS 1 messages each keeps
// in flight.
type benchCase struct{ publishers, inflight int }

func parseCases(s string) ([]benchCase, error) {
	var out []benchCase
	for _, f := range strings.Split(s, ",") {
		p, i, ok := strings.Cut(strings.TrimSpace(f), "x")
		np, err1 := strconv.Atoi(p)
		ni, err2 := strconv.Atoi(i)
		if !ok || err1 != nil || err2 != nil || np < 1 || ni < 1 {
			return nil, fmt.Errorf("case %q: want <publishers>x<in flight>", f)
		}
		out = append(out, benchCase{np, ni})
	}
	if len(out) == 0 {
		return nil, errors.New("no case")
	}
	return out, nil
}

// publish runs c.publishers publishers, each keeping c.inflight QoS 1 messages in
// flight (one goroutine per message slot, sending the next message when its PUBACK
// came) for d, and returns how many were acknowledged with success.
func publish(ctx context.Context, addr, topic string, c benchCase, d time.Duration, payload []byte) (int64, error) {
	var ok atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c.publishers*c.inflight)
	clients := make([]*paho.Client, c.publishers)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				_ = cl.Disconnect(&paho.Disconnect{})
			}
		}
	}()
	for i := range clients {
		cl, err := connect(ctx, addr, fmt.Sprintf("bench-pub-%d-%d", time.Now().UnixNano(), i), nil)
		if err != nil {
			return 0, err
		}
		clients[i] = cl
	}
	end := time.Now().Add(d)
	for i, cl := range clients {
		for range c.inflight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					resp, err := cl.Publish(pctx, &paho.Publish{QoS: 1, Topic: topic + "/" + strconv.Itoa(i), Payload: payload})
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if resp == nil || resp.ReasonCode == 0 {
						ok.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return ok.Load(), errors.Join(all...)
}

// mosquittoPid is the pid of the mosquitto process listening on addr's port, or 0
// (not found, or not on this machine's /proc).
func mosquittoPid(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	out, err := exec.Command("ss", "-ltnpH", "sport = :"+port).Output()
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(out), "pid=")
	if !ok {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimRightFunc(rest[:strings.IndexAny(rest+",", ",)")], func(r rune) bool { return r < '0' || r > '9' }))
	return pid
}

// metric is the value of the series name{mapping="<mapping>"} (of name without labels
// when mapping is empty) at httpAddr's /metrics; 0 when there is none.
func metric(httpAddr, name, mapping string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	prefix := name + `{mapping="` + mapping + `"} `
	if mapping == "" {
		prefix = name + " "
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}
