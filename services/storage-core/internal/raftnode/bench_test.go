package raftnode

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleGroups is the idle-channel benchmark of issue 16 step 3: 1, 1,000 and
// 10,000 idle groups on 3 in-process nodes (WALs, transports and gRPC on loopback,
// production timing: 100 ms ticks, 1 s election timeout, 250 ms liveness), once with
// quiescence and once without (Config.DisableQuiesce, step 2's behaviour), in one run.
// Once every group has a leader (and, with quiescence, every group quiesced), it
// measures a 5 s window: CPU time per second per node (the process's user+system time
// over the window, divided by 3), ExchangeRequests (packets) and raft messages sent
// per second per node, and the loop's ticks per second per node (10 when the loop
// keeps up with its 100 ms ticker; fewer when a pass takes longer, as time.Ticker
// drops ticks). Run: go test -run '^$' -bench BenchmarkIdleGroups -benchtime 1x.
func BenchmarkIdleGroups(b *testing.B) {
	const window = 5 * time.Second
	for _, groups := range []int{1, 1000, 10000} {
		for _, quiesce := range []bool{true, false} {
			name := fmt.Sprintf("groups=%d/quiesce=%v", groups, quiesce)
			b.Run(name, func(b *testing.B) {
				opts := []func(*cluster){withGroups(groups - 1), func(c *cluster) {
					c.tune = func(cfg *Config) {
						cfg.Tick, cfg.DisableQuiesce = 100*time.Millisecond, !quiesce
					}
				}}
				c := newCluster(b, opts...)
				settle(b, c, quiesce)
				for i := 0; i < b.N; i++ {
					cpu0 := cpuTime()
					var req0, msg0, tick0 [4]uint64
					for id := uint64(1); id <= 3; id++ {
						req0[id], msg0[id] = c.m[id].tr.Stats()
						tick0[id] = c.m[id].n.Stats().Ticks
					}
					time.Sleep(window)
					cpu := cpuTime() - cpu0
					var req, msg, ticks uint64
					for id := uint64(1); id <= 3; id++ {
						r, m := c.m[id].tr.Stats()
						req, msg = req+r-req0[id], msg+m-msg0[id]
						ticks += c.m[id].n.Stats().Ticks - tick0[id]
					}
					sec := window.Seconds()
					cpuMs := float64(cpu.Milliseconds()) / sec / 3
					pkts, msgs, tps := float64(req)/sec/3, float64(msg)/sec/3, float64(ticks)/sec/3
					b.ReportMetric(cpuMs, "cpu-ms/s/node")
					b.ReportMetric(pkts, "packets/s/node")
					b.ReportMetric(msgs, "msgs/s/node")
					b.ReportMetric(tps, "ticks/s/node")
					fmt.Printf("idle groups %6d  quiesce %-5v  cpu %7.1f ms/s/node  packets %8.1f/s/node  raft messages %9.1f/s/node  loop ticks %4.1f/s/node (10 = on time)\n",
						groups, quiesce, cpuMs, pkts, msgs, tps)
				}
				b.StopTimer()
			})
		}
	}
}

// settle waits until every group has a leader known to all three nodes and, with
// quiescence, every group is quiesced on every node.
func settle(b *testing.B, c *cluster, quiesce bool) {
	deadline := time.Now().Add(3 * time.Minute)
	for _, g := range c.groups {
		for {
			l1, _, _, _ := c.m[1].n.Leader(g)
			l2, _, _, _ := c.m[2].n.Leader(g)
			l3, _, _, _ := c.m[3].n.Leader(g)
			if l1 != 0 && l1 == l2 && l2 == l3 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("group %d has no agreed leader", g)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for id := uint64(1); quiesce && id <= 3; id++ {
		for c.m[id].n.Stats().Quiesced != len(c.groups) {
			if time.Now().After(deadline) {
				b.Fatalf("node %d: %d of %d groups quiesced", id, c.m[id].n.Stats().Quiesced, len(c.groups))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(time.Second) // the last elections' and quiesce heartbeats' traffic ends
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
