package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// mqttFormat is the mosquitto_sub -F line that shows everything an MQTT 5 message
// carries: topic, QoS, retain, content type, correlation data, expiry, payload format,
// response topic, user properties in order, payload as hex.
const mqttFormat = "%t|q=%q|r=%r|ct=%C|cd=%D|exp=%E|pf=%F|rt=%R|up=%P|%x"

// mosqSub is a running mosquitto_sub whose formatted message lines are collected.
type mosqSub struct {
	lines chan string
	cmd   *exec.Cmd
}

// startMosqSub runs mosquitto_sub -V 5 with args against addr and returns once the
// broker acknowledged the subscription (SUBACK in its -d output).
func startMosqSub(t *testing.T, addr string, args ...string) *mosqSub {
	t.Helper()
	bin := testenv.RequireBinary(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(addr)
	full := append([]string{"-V", "5", "-h", host, "-p", port, "-d", "-F", mqttFormat}, args...)
	// Line-buffered: mosquitto_sub's -d lines would otherwise sit in a pipe buffer.
	cmd := exec.Command("stdbuf", append([]string{"-oL", bin}, full...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := &mosqSub{lines: make(chan string, 10000), cmd: cmd}
	subscribed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		closed := false
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "Client ") || strings.HasPrefix(l, "Subscribed") {
				if !closed && strings.Contains(l, "SUBACK") {
					close(subscribed)
					closed = true
				}
				continue
			}
			s.lines <- l
		}
		close(s.lines)
	}()
	select {
	case <-subscribed:
	case <-time.After(20 * time.Second):
		t.Fatalf("mosquitto_sub %v: no SUBACK within 20s", args)
	}
	return s
}

// next returns the next n message lines, failing the test after timeout.
func (s *mosqSub) next(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("mosquitto_sub ended after %d of %d lines: %q", len(out), n, out)
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("mosquitto_sub: %d of %d lines within %v: %q", len(out), n, timeout, out)
		}
	}
	return out
}

// mosqPub runs mosquitto_pub -V 5 against addr with args and fails the test on error.
func mosqPub(t *testing.T, addr string, args ...string) {
	t.Helper()
	bin := testenv.RequireBinary(t, "mosquitto_pub")
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(bin, append([]string{"-V", "5", "-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub %v: %v\n%s", args, err, out)
	}
}

// pahoConnect connects an MQTT 5 paho client (clean start) to addr.
func pahoConnect(ctx context.Context, addr, clientID, username string) (*paho.Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: clientID})
	cp := &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}
	if username != "" {
		cp.Username, cp.UsernameFlag = username, true
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if ca.ReasonCode != 0 {
		_ = conn.Close()
		return nil, fmt.Errorf("connack reason %#x", ca.ReasonCode)
	}
	return c, nil
}

// bridgeMetric reads one counter of a bridge's /metrics (0 when absent).
func bridgeMetric(t *testing.T, p *stack.Proc, name, mapping string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := name + `{mapping="` + mapping + `"} `
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
