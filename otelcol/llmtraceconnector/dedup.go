package llmtraceconnector

import (
	"hash/maphash"
	"math/bits"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// recentSpans remembers the (trace id, span id) of the last n request spans
// counted, so that one delivered again (an exporter retrying a send that
// arrived, a queue re-sending) is not counted twice. Its memory is fixed
// when first used: a ring of the last n fingerprints in arrival order and
// an open-addressing set of them (linear probing, at most half full), 24
// to 40 bytes a span. Not safe for concurrent use; the connector's lock
// guards it.
//
// A fingerprint is a 64-bit hash of the two ids under a per-process random
// seed, so a span producer cannot make two spans collide on purpose; two
// distinct spans share one by chance with probability about n/2⁶⁴ for
// each span checked (5·10⁻¹⁵ for the default n), and the later is then
// taken for a duplicate.
type recentSpans struct {
	n     int
	seed  maphash.Seed
	ring  []uint64 // fingerprints, oldest at next once full
	next  int
	table []uint64 // 0: an empty slot; no fingerprint is 0
	mask  uint64
}

func newRecentSpans(n int) *recentSpans {
	if n <= 0 {
		return nil
	}
	return &recentSpans{n: n, seed: maphash.MakeSeed()}
}

// seen reports whether the span (traceID, spanID) is among the last n
// spans seen, and remembers it (forgetting the oldest) when it is not.
// Spans with an empty id are never taken for duplicates: they share their
// ids with every other such span. A nil recentSpans remembers nothing.
func (s *recentSpans) seen(traceID pcommon.TraceID, spanID pcommon.SpanID) bool {
	if s == nil || traceID.IsEmpty() || spanID.IsEmpty() {
		return false
	}
	if s.table == nil {
		size := uint64(1) << bits.Len64(uint64(2*s.n-1)) // a power of two ≥ 2n
		s.table, s.mask = make([]uint64, size), size-1
		s.ring = make([]uint64, 0, s.n)
	}
	var key [24]byte
	copy(key[:16], traceID[:])
	copy(key[16:], spanID[:])
	fp := maphash.Bytes(s.seed, key[:])
	if fp == 0 {
		fp = 1
	}
	i := fp & s.mask
	for ; s.table[i] != 0; i = (i + 1) & s.mask {
		if s.table[i] == fp {
			return true
		}
	}
	if len(s.ring) < s.n {
		s.ring = append(s.ring, fp)
	} else {
		s.remove(s.ring[s.next])
		s.ring[s.next] = fp
		s.next = (s.next + 1) % s.n
		// The removal may have shifted entries into fp's probe path:
		// find its free slot again.
		for i = fp & s.mask; s.table[i] != 0; i = (i + 1) & s.mask {
		}
	}
	s.table[i] = fp
	return false
}

// remove deletes fp, which the table holds, by backward shift: the entries
// after it in its cluster that may move closer to their home slot do, so
// no probe path is broken and no tombstone is left.
func (s *recentSpans) remove(fp uint64) {
	i := fp & s.mask
	for s.table[i] != fp {
		i = (i + 1) & s.mask
	}
	for j := (i + 1) & s.mask; s.table[j] != 0; j = (j + 1) & s.mask {
		home := s.table[j] & s.mask
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (j-home)&s.mask >= (j-i)&s.mask {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = 0
}
