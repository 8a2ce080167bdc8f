package queue

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestSpans(t *testing.T) {
	var s spans
	for _, off := range []int64{5, 7, 6, 1, 2, 10, 0, 9, 9} {
		s.add(off)
	}
	if fmt.Sprint(s) != "[{0 3} {5 8} {9 11}]" {
		t.Fatalf("spans %v", s)
	}
	if !s.contains(6) || s.contains(3) || s.contains(8) || !s.contains(10) || s.contains(11) {
		t.Fatal("contains")
	}
	if n := s.count(1, 10); n != 6 {
		t.Fatalf("count %d", n)
	}
	if f := s.raiseFloor(0); f != 3 || fmt.Sprint(s) != "[{5 8} {9 11}]" {
		t.Fatalf("raiseFloor %d %v", f, s)
	}
	s.dropBelow(6)
	if fmt.Sprint(s) != "[{6 8} {9 11}]" {
		t.Fatalf("dropBelow %v", s)
	}
}

// The acked bucket's spans match an in-memory set under random adds and trims.
func TestAckedBucket(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "x.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rnd := rand.New(rand.NewSource(1))
	want := map[int64]bool{}
	floor := int64(0)
	for round := 0; round < 200; round++ {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("a"))
			if err != nil {
				return err
			}
			for i := 0; i < 20; i++ {
				off := floor + rnd.Int63n(100)
				if rnd.Intn(2) == 0 {
					n := 1 + rnd.Int63n(12)
					for o := off; o < off+n; o++ {
						want[o] = true
					}
					if err := putAckedRange(b, off, off+n); err != nil {
						return err
					}
					continue
				}
				want[off] = true
				if err := putAckedOffset(b, off); err != nil {
					return err
				}
			}
			// The stored spans themselves (not merged on reading) neither overlap
			// nor touch.
			prevEnd := int64(-1)
			if err := b.ForEach(func(k, v []byte) error {
				if keyOff(k) <= prevEnd {
					return fmt.Errorf("round %d: stored span at %d overlaps or touches the one ending at %d", round, keyOff(k), prevEnd)
				}
				prevEnd = spanEnd(k, v)
				return nil
			}); err != nil {
				return err
			}
			if round%10 == 9 {
				floor += rnd.Int63n(30)
				for off := range want {
					if off < floor {
						delete(want, off)
					}
				}
				if err := trimAckedBelow(b, floor); err != nil {
					return err
				}
			}
			got, err := readAckedSpans(b)
			if err != nil {
				return err
			}
			n := 0
			for i, sp := range got {
				if i > 0 && got[i-1].To >= sp.From {
					return fmt.Errorf("spans overlap or touch: %v", got)
				}
				for off := sp.From; off < sp.To; off++ {
					if !want[off] {
						return fmt.Errorf("round %d: %d in %v but not acked", round, off, sp)
					}
					n++
				}
			}
			if n != len(want) {
				return fmt.Errorf("round %d: %d offsets in spans, want %d", round, n, len(want))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestAckedBucketLegacyEntries: single offsets stored with an empty value, one key
// each (state files of older versions, neighbours not merged), mix with the spans
// putAckedOffset and putAckedRange write: the bucket always reads as the acked set.
func TestAckedBucketLegacyEntries(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "x.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for seed := int64(1); seed <= 200; seed++ {
		rnd := rand.New(rand.NewSource(seed))
		want := map[int64]bool{}
		err := db.Update(func(tx *bolt.Tx) error {
			_ = tx.DeleteBucket([]byte("a"))
			b, err := tx.CreateBucket([]byte("a"))
			if err != nil {
				return err
			}
			for i := 0; i < 15; i++ {
				off := rnd.Int63n(40)
				want[off] = true
				if err := b.Put(offKey(off), nil); err != nil {
					return err
				}
			}
			for i := 0; i < 10; i++ {
				off, n := rnd.Int63n(45), 1+rnd.Int63n(6)
				if rnd.Intn(2) == 0 {
					n = 1
					if err := putAckedOffset(b, off); err != nil {
						return err
					}
				} else if err := putAckedRange(b, off, off+n); err != nil {
					return err
				}
				for o := off; o < off+n; o++ {
					want[o] = true
				}
				got, err := readAckedSpans(b)
				if err != nil {
					return err
				}
				have := map[int64]bool{}
				for _, sp := range got {
					for o := sp.From; o < sp.To; o++ {
						have[o] = true
					}
				}
				if fmt.Sprint(have) != fmt.Sprint(want) {
					return fmt.Errorf("seed %d step %d: bucket holds %v, want %v", seed, i, got, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
