package queue

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the queue engine's Prometheus collectors (totals over every queue).
type Metrics struct {
	Deliveries   prometheus.Counter
	Acks         prometheus.Counter
	Nacks        prometheus.Counter
	Expired      prometheus.Counter
	DeadLettered prometheus.Counter
	Copied       prometheus.Counter
	CopyLoaded   prometheus.Counter
	Filtered     prometheus.Counter
	Dropped      prometheus.Counter
	StateCommits prometheus.Counter
	// StateJournalCommits counts the StateCommits made through the state journal.
	StateJournalCommits prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (when non-nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_queue_" + name, Help: help})
	}
	m := &Metrics{
		Deliveries:          c("deliveries_total", "Messages leased by Receive (each delivery counted)."),
		Acks:                c("acks_total", "Messages acked (Ack)."),
		Nacks:               c("nacks_total", "Leases ended by ModifyAckDeadline 0."),
		Expired:             c("expired_leases_total", "Leases that ended at their deadline."),
		DeadLettered:        c("dead_lettered_total", "Messages appended to a dead-letter log."),
		Copied:              c("binding_copied_total", "Source records copied into queues by bindings."),
		CopyLoaded:          c("binding_loaded_total", "Copied records loaded into their queue's window as they were appended, without reading them back from the queue log."),
		Filtered:            c("binding_filtered_total", "Source records a binding's filter left out."),
		Dropped:             c("retention_dropped_total", "Unacked messages dropped past message_retention_ms."),
		StateCommits:        c("state_commits_total", "Group commits of queue state (each one durable write, shared by the changes waiting): transactions of queues.db, or appends to its journal."),
		StateJournalCommits: c("state_journal_commits_total", "State commits appended to queues.db.journal (one fdatasync each, against a queues.db transaction's two)."),
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Acks, m.Nacks, m.Expired, m.DeadLettered, m.Copied, m.CopyLoaded, m.Filtered, m.Dropped, m.StateCommits, m.StateJournalCommits)
	}
	return m
}
