package store

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	Appends         prometheus.Counter
	AppendBytes     prometheus.Counter
	AppendErrors    *prometheus.CounterVec
	Fsyncs          prometheus.Counter
	FsyncSeconds    prometheus.Histogram
	GroupCommitSize prometheus.Histogram
	// TailTruncations counts torn tails cut at start (one per segment, not per batch).
	TailTruncations  prometheus.Counter
	RetentionDeleted prometheus.Counter
	// WALFsyncs and WALFsyncSeconds: fsync rounds of the node write-ahead log (WAL
	// mode); GroupCommitSize then counts records per round.
	WALFsyncs       prometheus.Counter
	WALFsyncSeconds prometheus.Histogram
	// Log cleaner (compacted channels, cleaner.go): dirty ratio and last pass time
	// per compacted channel, bytes read, written and removed by passes.
	CleanerDirtyRatio   *prometheus.GaugeVec
	CleanerLastClean    *prometheus.GaugeVec
	CleanerReadBytes    prometheus.Counter
	CleanerWrittenBytes prometheus.Counter
	CleanerRemovedBytes prometheus.Counter
}

// NewMetrics creates the engine collectors and registers them on reg (when non-nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_appends_total", Help: "Successful appends (one per channel per call)."}),
		AppendBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_append_bytes_total", Help: "Bytes of record batches appended."}),
		AppendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_storage_append_errors_total", Help: "Refused appends by reason."}, []string{"reason"}),
		Fsyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_fsyncs_total", Help: "fsync calls on segment files."}),
		FsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_storage_fsync_seconds", Help: "fsync latency.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)}),
		GroupCommitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_storage_group_commit_appends", Help: "Appends made durable by one fsync.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		TailTruncations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_tail_truncations_total", Help: "Torn tails truncated at start (one per segment cut, however many batches it held)."}),
		RetentionDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_retention_deleted_segments_total", Help: "Segments deleted by retention or DeleteRecords."}),
		WALFsyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_wal_fsyncs_total", Help: "fsync rounds of the node write-ahead log (WAL mode)."}),
		WALFsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_storage_wal_fsync_seconds", Help: "Write and fsync latency of a write-ahead log round (WAL mode).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)}),
		CleanerDirtyRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_storage_cleaner_dirty_ratio", Help: "Share of a compacted channel's cleanable bytes not yet cleaned (min.cleanable.dirty.ratio compares with it)."}, []string{"channel"}),
		CleanerLastClean: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_storage_cleaner_last_clean_timestamp_seconds", Help: "Unix time of a compacted channel's last cleaner pass."}, []string{"channel"}),
		CleanerReadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_cleaner_read_bytes_total", Help: "Segment bytes the log cleaner read to rewrite them."}),
		CleanerWrittenBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_cleaner_written_bytes_total", Help: "Bytes of cleaned segments the log cleaner wrote."}),
		CleanerRemovedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_storage_cleaner_removed_bytes_total", Help: "Bytes the log cleaner removed (superseded records, tombstones and markers past their delete horizon, aborted batches)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Appends, m.AppendBytes, m.AppendErrors, m.Fsyncs, m.FsyncSeconds, m.GroupCommitSize, m.TailTruncations, m.RetentionDeleted, m.WALFsyncs, m.WALFsyncSeconds,
			m.CleanerDirtyRatio, m.CleanerLastClean, m.CleanerReadBytes, m.CleanerWrittenBytes, m.CleanerRemovedBytes)
	}
	return m
}
