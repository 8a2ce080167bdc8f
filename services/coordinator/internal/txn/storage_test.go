package txn

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// markerStorage answers WriteTxnMarkers of one marker each: the first answers of a
// channel come from script (a Kafka code, or -100 for an UNAVAILABLE call), then
// code 0. It records the calls per channel and the most in flight at once.
type markerStorage struct {
	storagev1.StorageServiceClient
	mu              sync.Mutex
	script          map[string][]int32
	calls           map[string]int
	inFlight, maxIn int
}

func (f *markerStorage) WriteTxnMarkers(_ context.Context, req *storagev1.WriteTxnMarkersRequest, _ ...grpc.CallOption) (*storagev1.WriteTxnMarkersResponse, error) {
	ch := req.Markers[0].GetChannel()
	f.mu.Lock()
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	n := f.calls[ch]
	f.calls[ch]++
	code := int32(0)
	if n < len(f.script[ch]) {
		code = f.script[ch][n]
	}
	f.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	if code == -100 {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	return &storagev1.WriteTxnMarkersResponse{Results: []*storagev1.TxnMarkerResult{{Channel: ch, ErrorCode: code}}}, nil
}

// TestRoutedMarkers: with a raft cluster behind it, markers go one per call, at most
// maxMarkerCalls at once; a marker answered NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS
// or UNAVAILABLE is resent alone (the others are not), other codes are kept, and a
// marker still unavailable after markerRetries resends answers NOT_LEADER_OR_FOLLOWER
// (the set fails only when every marker's call does).
func TestRoutedMarkers(t *testing.T) {
	f := &markerStorage{calls: map[string]int{}, script: map[string][]int32{
		channel.KafkaPartition("t", 3): {codeNotLeaderOrFollower},
		channel.KafkaPartition("t", 4): {-100, codeNotEnoughReplicas},
		channel.KafkaPartition("t", 5): {codeUnknownTopicOrPartition},
		channel.KafkaPartition("t", 6): {codeInvalidProducerEpoch},
	}}
	w := StorageMarkers(f, true)
	ms := make([]Marker, 40)
	for i := range ms {
		ms[i] = Marker{Topic: "t", Partition: int32(i), ProducerID: 7, ProducerEpoch: 1, Commit: true}
	}
	got, err := w.WriteMarkers(context.Background(), ms)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		want := int16(0)
		switch i {
		case 5:
			want = codeUnknownTopicOrPartition
		case 6:
			want = codeInvalidProducerEpoch
		}
		if c != want {
			t.Fatalf("marker %d: code %d, want %d", i, c, want)
		}
		ch := channel.KafkaPartition("t", int32(i))
		wantCalls := 1
		switch i {
		case 3:
			wantCalls = 2
		case 4:
			wantCalls = 3
		}
		if f.calls[ch] != wantCalls {
			t.Fatalf("marker %d sent %d times, want %d", i, f.calls[ch], wantCalls)
		}
	}
	if f.maxIn > maxMarkerCalls || f.maxIn < 2 {
		t.Fatalf("%d marker calls in flight at once, want 2..%d", f.maxIn, maxMarkerCalls)
	}

	f.script = map[string][]int32{channel.KafkaPartition("t", 1): {-100, -100, -100, -100, -100, -100}}
	f.calls = map[string]int{}
	if got, err := w.WriteMarkers(context.Background(), ms[:3]); err != nil || !codesEqual(got, 0, codeNotLeaderOrFollower, 0) {
		t.Fatalf("a marker unavailable on every try: %v, %v; want [0 NOT_LEADER_OR_FOLLOWER 0]", got, err)
	}
	if f.calls[channel.KafkaPartition("t", 1)] != markerRetries+1 {
		t.Fatalf("unavailable marker sent %d times, want %d", f.calls[channel.KafkaPartition("t", 1)], markerRetries+1)
	}
	// Every call failing fails the whole (nothing is known written).
	f.script = map[string][]int32{channel.KafkaPartition("t", 1): {-100, -100, -100, -100, -100, -100}}
	f.calls = map[string]int{}
	if _, err := w.WriteMarkers(context.Background(), ms[1:2]); status.Code(err) != codes.Unavailable {
		t.Fatalf("the only marker unavailable on every try: %v, want UNAVAILABLE", err)
	}

	// A transaction of one partition (the common case) is resent alike: an election
	// under it must not leave the transaction to the next sweep.
	f.script = map[string][]int32{channel.KafkaPartition("t", 0): {-100, codeNotLeaderOrFollower, codeNotEnoughReplicas}}
	f.calls = map[string]int{}
	if got, err := w.WriteMarkers(context.Background(), ms[:1]); err != nil || len(got) != 1 || got[0] != codeNone {
		t.Fatalf("one marker through an election: %v %v, want [0]", got, err)
	}
	if n := f.calls[channel.KafkaPartition("t", 0)]; n != 4 {
		t.Fatalf("the one marker sent %d times, want 4", n)
	}
}
