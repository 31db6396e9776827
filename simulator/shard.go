package simulator

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Shard is one of Count shards of a seed range: `--shard 3/16` is
// Shard{Index: 3, Count: 16}. Shards split a range into contiguous blocks:
// with L seeds from A, shard k of n runs the seeds
//
//	A + ⌊(k−1)·L/n⌋ … A + ⌊k·L/n⌋ − 1
//
// so every seed belongs to exactly one shard and block sizes differ by at
// most one. The zero Shard means the whole range (1/1).
type Shard struct {
	// Index is the shard's number, from 1 to Count.
	Index uint64
	// Count is the number of shards.
	Count uint64
}

// ErrBadShard is wrapped by the errors of ParseShard and Shard.Of.
var ErrBadShard = errors.New("bad shard")

// ParseShard reads "K/N" with 1 ≤ K ≤ N.
func ParseShard(text string) (Shard, error) {
	k, n, ok := strings.Cut(strings.TrimSpace(text), "/")
	ki, kerr := strconv.ParseUint(k, 10, 64)
	ni, nerr := strconv.ParseUint(n, 10, 64)
	if !ok || kerr != nil || nerr != nil || ni == 0 || ki == 0 || ki > ni {
		return Shard{}, fmt.Errorf("%w %q: want K/N with 1 ≤ K ≤ N, e.g. 3/16", ErrBadShard, text)
	}
	return Shard{Index: ki, Count: ni}, nil
}

// String is "K/N".
func (s Shard) String() string {
	s = s.orWhole()
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Set parses text into s, so a *Shard is a flag.Value.
func (s *Shard) Set(text string) error {
	v, err := ParseShard(text)
	if err == nil {
		*s = v
	}
	return err
}

func (s Shard) orWhole() Shard {
	if s.Count == 0 {
		return Shard{Index: 1, Count: 1}
	}
	return s
}

// Of returns the block of r that the shard runs. It is an error for the
// range to hold fewer seeds than there are shards (a shard would be empty)
// or all 2^64 seeds.
func (s Shard) Of(r SeedRange) (SeedRange, error) {
	s = s.orWhole()
	if s.Index == 0 || s.Index > s.Count {
		return SeedRange{}, fmt.Errorf("%w %s: want K/N with 1 ≤ K ≤ N", ErrBadShard, s)
	}
	l := r.Len()
	if l == 0 {
		return SeedRange{}, fmt.Errorf("%w %s: the range %s is too large to shard", ErrBadShard, s, r)
	}
	if l < s.Count {
		return SeedRange{}, fmt.Errorf("%w %s: the range %s holds %d seeds, fewer than the %d shards", ErrBadShard, s, r, l, s.Count)
	}
	lo := blockStart(l, s.Index-1, s.Count)
	hi := blockStart(l, s.Index, s.Count)
	return SeedRange{From: r.From + Seed(lo), To: r.From + Seed(hi) - 1}, nil
}

// blockStart is ⌊k·l/n⌋ without overflow (k ≤ n, so the quotient fits).
func blockStart(l, k, n uint64) uint64 {
	hi, lo := bits.Mul64(l, k)
	q, _ := bits.Div64(hi, lo, n)
	return q
}

// ShardOf returns the shard of n that runs seed, a seed of r.
func ShardOf(seed Seed, r SeedRange, n uint64) (Shard, error) {
	if seed < r.From || seed > r.To {
		return Shard{}, fmt.Errorf("seed %s is not in the range %s", seed, r)
	}
	l, off := r.Len(), uint64(seed-r.From)
	if l == 0 || l < n || n == 0 {
		return Shard{}, fmt.Errorf("%w: cannot split %s into %d shards", ErrBadShard, r, n)
	}
	// The block k (0-based) holds off when ⌊k·l/n⌋ ≤ off < ⌊(k+1)·l/n⌋;
	// start from the estimate ⌊off·n/l⌋ and correct it.
	hi, lo := bits.Mul64(off, n)
	k, _ := bits.Div64(hi, lo, l)
	for k+1 < n && blockStart(l, k+1, n) <= off {
		k++
	}
	for k > 0 && blockStart(l, k, n) > off {
		k--
	}
	return Shard{Index: k + 1, Count: n}, nil
}
