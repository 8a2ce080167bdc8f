package group

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// maxLagSeries bounds how many partitions one scrape reports (and asks storage-core
// about), so a huge number of groups cannot stall a scrape.
const maxLagSeries = 10000

// offsetCollector exports, at scrape time, each group's committed offset per partition
// and its lag: the partition's high watermark (storage-core's GetChannel; the HWM
// sequence is numerically the Kafka log end offset) minus the committed offset.
type offsetCollector struct {
	store   *store.Store
	storage storagev1.StorageServiceClient
	log     *zap.Logger

	committed *prometheus.Desc
	lag       *prometheus.Desc
}

func newOffsetCollector(st *store.Store, storage storagev1.StorageServiceClient, log *zap.Logger) *offsetCollector {
	labels := []string{"group", "topic", "partition"}
	return &offsetCollector{
		store:   st,
		storage: storage,
		log:     log,
		committed: prometheus.NewDesc("tributary_group_committed_offset",
			"Committed offset (next offset to consume) of a consumer group per partition.", labels, nil),
		lag: prometheus.NewDesc("tributary_group_lag",
			"Records between a consumer group's committed offset and the partition's high watermark.", labels, nil),
	}
}

func (o *offsetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- o.committed
	ch <- o.lag
}

func (o *offsetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := o.store.GroupOffsetsForMetrics(ctx, maxLagSeries)
	if err != nil {
		o.log.Warn("read committed offsets for metrics", zap.Error(err))
		return
	}
	hwms := map[string]int64{}
	for _, r := range rs {
		p := strconv.Itoa(int(r.Partition))
		ch <- prometheus.MustNewConstMetric(o.committed, prometheus.GaugeValue, float64(r.Offset), r.Group, r.Topic, p)
		if o.storage == nil || ctx.Err() != nil {
			continue
		}
		name := channel.KafkaPartition(r.Topic, r.Partition)
		hwm, ok := hwms[name]
		if !ok {
			resp, err := o.storage.GetChannel(ctx, &storagev1.GetChannelRequest{Name: name})
			if err != nil {
				hwms[name] = -1
				continue
			}
			hwm = resp.GetChannel().GetHighWatermark()
			hwms[name] = hwm
		}
		if hwm < 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(o.lag, prometheus.GaugeValue, float64(max(hwm-r.Offset, 0)), r.Group, r.Topic, p)
	}
}
