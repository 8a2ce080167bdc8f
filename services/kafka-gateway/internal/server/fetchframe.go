package server

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Fetch response is mostly stored record batches, which encodeResponse copies into the
// frame (kmsg appends them): on a consume run that copy was a sixth of the gateway's
// memmove. encodeFetch frames the response without them: each partition's batches are
// swapped for a 16-byte marker while kmsg encodes the rest, the markers are found again
// (in order, each behind the length kmsg gave it) and the frame is handed to the writer
// as pieces, the batches by reference.

// fetchMarker is the random prefix of the markers (a 4-byte partition index follows):
// never sent, so neither a client's topic names nor stored bytes can contain it except
// by a 2^-96 chance, and a marker not found where expected falls back to a plain encode.
var fetchMarker = func() (m [fetchMarkerLen - 4]byte) {
	_, _ = rand.Read(m[:])
	return m
}()

// fetchMarkerLen is the length of a marker (below 127: its compact length is one byte).
const fetchMarkerLen = 16

// fetchFrame is a framed Fetch response in pieces: head[bounds[i]:bounds[i+1]] then
// batches[i] for each i, then the rest of head.
type fetchFrame struct {
	enc     []byte // kmsg's encoding with the markers (scratch)
	head    []byte
	bounds  []int
	batches [][]byte
	marks   []byte // the markers, fetchMarkerLen bytes each
}

// encode frames resp for corr into f; false (f unusable) when resp has no batches to
// pass by reference or a marker was not where it should be: the caller then uses
// encodeResponse.
func (f *fetchFrame) encode(corr int32, resp *kmsg.FetchResponse) bool {
	var fields []*[]byte
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			fields = append(fields, &resp.Topics[ti].Partitions[pi].RecordBatches)
		}
	}
	return f.encodeFields(corr, resp, fields)
}

// encodeShare is encode for a ShareFetch response (KIP-932), whose partitions' Records
// are record batches as a Fetch response's are.
func (f *fetchFrame) encodeShare(corr int32, resp *kmsg.ShareFetchResponse) bool {
	var fields []*[]byte
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			fields = append(fields, &resp.Topics[ti].Partitions[pi].Records)
		}
	}
	return f.encodeFields(corr, resp, fields)
}

// encodeFields frames resp with the bytes fields (batches, in encoding order) passed
// by reference.
func (f *fetchFrame) encodeFields(corr int32, resp kmsg.Response, fields []*[]byte) bool {
	f.batches = f.batches[:0]
	f.marks = f.marks[:0]
	for _, b := range fields {
		if len(*b) == 0 {
			continue
		}
		f.marks = append(f.marks, fetchMarker[:]...)
		f.marks = binary.BigEndian.AppendUint32(f.marks, uint32(len(f.batches)))
		f.batches = append(f.batches, *b)
		*b = f.marks[len(f.marks)-fetchMarkerLen:]
	}
	if len(f.batches) == 0 {
		return false
	}
	f.enc = encodeResponse(f.enc, corr, resp)
	// Put the batches back (every non-empty one is a marker now): the response is the
	// caller's again.
	i := 0
	for _, b := range fields {
		if len(*b) > 0 {
			*b = f.batches[i]
			i++
		}
	}
	flexible := resp.IsFlexible()
	f.head = f.head[:0]
	f.bounds = append(f.bounds[:0], 0)
	from := 0
	size := 0
	for i, b := range f.batches {
		mark := f.marks[i*fetchMarkerLen : (i+1)*fetchMarkerLen]
		at := bytes.Index(f.enc[from:], mark)
		if at < 0 {
			return false
		}
		at += from
		// The length kmsg wrote before the marker: compact (uvarint of length+1) when
		// flexible, else int32.
		var lenAt int
		if flexible {
			lenAt = at - 1
			if lenAt < from || f.enc[lenAt] != fetchMarkerLen+1 {
				return false
			}
		} else {
			lenAt = at - 4
			if lenAt < from || binary.BigEndian.Uint32(f.enc[lenAt:]) != fetchMarkerLen {
				return false
			}
		}
		f.head = append(f.head, f.enc[from:lenAt]...)
		if flexible {
			f.head = binary.AppendUvarint(f.head, uint64(len(b))+1)
		} else {
			f.head = binary.BigEndian.AppendUint32(f.head, uint32(len(b)))
		}
		f.bounds = append(f.bounds, len(f.head))
		size += len(b)
		from = at + fetchMarkerLen
	}
	f.head = append(f.head, f.enc[from:]...)
	binary.BigEndian.PutUint32(f.head, uint32(len(f.head)+size-4))
	return true
}

// pieces returns the frame's pieces in order, appended to out.
func (f *fetchFrame) pieces(out [][]byte) [][]byte {
	for i, b := range f.batches {
		out = append(out, f.head[f.bounds[i]:f.bounds[i+1]], b)
	}
	return append(out, f.head[f.bounds[len(f.batches)]:])
}

// reset drops the references to batches (they go back to their pool once written).
func (f *fetchFrame) reset() {
	clear(f.batches)
	f.batches = f.batches[:0]
}
