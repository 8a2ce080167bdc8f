package server

import (
	"context"
	"strings"
	"testing"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// BenchmarkGRPCAppendBatches sends ~1 MiB produce batches (1 KiB records) over gRPC
// from 4 concurrent callers to one channel, as kafka-gateway does for one partition.
func BenchmarkGRPCAppendBatches(b *testing.B) {
	c, stop := startServerTB(b, b.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.bench"}); err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 1000)
	for i := range vals {
		vals[i] = strings.Repeat("v", 1024)
	}
	batch := kafkaBatch(b, -1, -1, -1, vals...)
	b.SetBytes(int64(len(batch)))
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.bench", Batches: batch}}})
			if err != nil || r.Results[0].Error != 0 {
				b.Fatal(err, r)
			}
		}
	})
}

// BenchmarkGRPCFetch reads 1 MiB per Fetch call over gRPC.
func BenchmarkGRPCFetch(b *testing.B) {
	c, stop := startServerTB(b, b.TempDir())
	defer stop()
	ctx := context.Background()
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: "kafka.bench"}); err != nil {
		b.Fatal(err)
	}
	vals := make([]string, 16)
	for i := range vals {
		vals[i] = strings.Repeat("v", 1024)
	}
	batch := kafkaBatch(b, -1, -1, -1, vals...)
	var all []byte
	for i := 0; i < 64; i++ {
		all = append(all, batch...)
	}
	for i := 0; i < 40; i++ {
		if _, err := c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "kafka.bench", Batches: all}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	seq := int64(1)
	for i := 0; i < b.N; i++ {
		r, err := c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: "kafka.bench", FromSequence: seq, MaxBytes: 1 << 20}}, MaxBytes: 1 << 20})
		if err != nil || len(r.Results[0].Batches) == 0 {
			b.Fatal(err)
		}
		seq += int64(len(r.Results[0].Batches) / len(batch) * 16)
		if seq > 40*64*16-100 {
			seq = 1
		}
	}
}
