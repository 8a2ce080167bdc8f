package obs

import (
	"os"
	"runtime/debug"
)

// Data-path garbage-collector settings for services that move MiB-sized request buffers
// (Produce and Fetch bytes) over a live heap of a few tens of MiB. At Go's default
// GOGC=100 the collector ran every few requests; at 400 the heap may grow to ~5x the
// live heap between collections, for ~10-25% more produce and consume throughput in
// kafkabench. DataPathMemoryLimit bounds that growth: as the heap nears it the runtime
// collects sooner whatever the percent (a soft limit, in bytes).
const (
	DataPathGCPercent   = 400
	DataPathMemoryLimit = 1 << 30
)

// TuneDataPathGC applies DataPathGCPercent and DataPathMemoryLimit, except where the
// GOGC or GOMEMLIMIT environment variables are set: those win.
func TuneDataPathGC() {
	TuneGCPercent()
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DataPathMemoryLimit)
	}
}

// TuneGCPercent applies DataPathGCPercent alone (no memory limit), unless the GOGC
// environment variable is set: it wins. For a process whose allocations are many
// small, short-lived ones over a small live heap (the MQTT bridge: a few KiB per
// message that die within milliseconds), where the default target (collect when the
// heap doubles) spent about a tenth of the CPU on collection.
func TuneGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DataPathGCPercent)
	}
}
