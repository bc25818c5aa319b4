package comm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/ring"
)

// probeStream carries the join's measurement of the link between hosts.
// Its two ranks are on different hosts, which never share a local stream.
const probeStream = localStream

// sharedMemoryLink prices a step through shared memory for the cost model:
// 1 µs and 10 GB/s (measured on the 2-core VM: 0.49 µs per step of a
// 2-rank all-reduce and 14 GB/s of bus bandwidth; BENCHMARKS.md, "Shared
// memory"), rounded towards a host busier than a 2-rank test.
func sharedMemoryLink() ring.Link {
	return ring.Link{Step: time.Microsecond, BytesPerSec: 10e9}
}

// parseNet reads GORUN_NET: "auto" (measure the link between hosts while
// joining, when the job spans hosts), "none" (no cost model: the
// collectives choose by fixed sizes), or "STEP,RATE" (e.g. 50us,10gbit;
// rates in tc's words, gbit, mbit or kbit, or in bytes, GB/s or MB/s).
func parseNet(v string) (mode string, link ring.Link, err error) {
	switch v {
	case "", "auto":
		return "auto", ring.Link{}, nil
	case "none":
		return "none", ring.Link{}, nil
	}
	step, rate, ok := strings.Cut(v, ",")
	if !ok {
		return "", ring.Link{}, fmt.Errorf("GORUN_NET=%q: want auto, none, or STEP,RATE like 50us,10gbit", v)
	}
	d, err := time.ParseDuration(strings.TrimSpace(step))
	if err != nil || d < 0 {
		return "", ring.Link{}, fmt.Errorf("GORUN_NET=%q: %q is not a step time like 50us", v, step)
	}
	bps, err := parseRate(strings.TrimSpace(rate))
	if err != nil {
		return "", ring.Link{}, fmt.Errorf("GORUN_NET=%q: %w", v, err)
	}
	return "set", ring.Link{Step: d, BytesPerSec: bps}, nil
}

// parseRate reads a link rate in bytes per second.
func parseRate(s string) (float64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"GB/s", 1e9}, {"MB/s", 1e6}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f <= 0 || math.IsInf(f, 0) {
				break
			}
			return f * u.scale, nil
		}
	}
	return 0, fmt.Errorf("%q is not a rate like 10gbit, 100mbit or 1.25GB/s", s)
}

// netLink settles the link between hosts every rank prices collectives
// with: GORUN_NET's, or measured now between rank 0 and the first rank on
// another host and shared with every rank (an all-reduce, so all hold
// the same). The zero Link: no model (one host, hosts unknown, or
// GORUN_NET=none).
func netLink(ctx context.Context, w *world, g *Group) (ring.Link, error) {
	s := &w.settings
	hostOf := w.data.hostOf
	if s.NetMode == "none" || hostOf == nil {
		return ring.Link{}, nil
	}
	other := slices.IndexFunc(hostOf, func(h int) bool { return h != hostOf[0] })
	if other < 0 {
		return ring.Link{}, nil
	}
	if s.NetMode == "set" {
		return s.Net, nil
	}
	measured := []float64{0, 0, 0} // seconds per step, bytes per second, a small all-reduce's seconds
	if s.Rank == 0 || s.Rank == other {
		peer := other
		if s.Rank == other {
			peer = 0
		}
		l, err := probeLink(ctx, w.data, peer, s.Rank == 0, time.Now)
		if err != nil {
			return ring.Link{}, fmt.Errorf("measuring the link between hosts with rank %d (GORUN_NET=none skips it): %w", peer, err)
		}
		if s.Rank == 0 { // the side that timed it
			measured[0], measured[1] = l.Step.Seconds(), l.BytesPerSec
		}
	}
	// A step as collectives meet it costs more than a quiet round trip:
	// the other ranks are busy too, and share the cores. Time small
	// all-reduces of the whole job (after as many untimed: the first calls
	// after joining are slower); the slowest rank's lower third settles
	// the step that makes the model predict it.
	algo := g.ring.AllReduceAlgorithm(4)
	one := []float32{0}
	calls := make([]time.Duration, 2*calibrationCalls)
	for i := range calls {
		start := time.Now()
		if err := g.AllReduce(ctx, one, Sum); err != nil {
			return ring.Link{}, err
		}
		calls[i] = time.Since(start)
	}
	calls = calls[calibrationCalls:]
	slices.Sort(calls)
	measured[2] = calls[len(calls)/3].Seconds()
	if err := AllReduce(ctx, g, measured, Max); err != nil {
		return ring.Link{}, err
	}
	link := ring.Link{Step: time.Duration(measured[0] * 1e9), BytesPerSec: measured[1]}
	link.Step = max(link.Step, stepFor(w, link, algo, measured[2]))
	return link, nil
}

// calibrationCalls is how many small all-reduces netLink times (after as
// many untimed).
const calibrationCalls = 9

// stepFor returns the step between hosts at which the cost model, with
// link's rate, predicts seconds for a 4-byte all-reduce by algo among all
// ranks (0 when it cannot tell).
func stepFor(w *world, link ring.Link, algo ring.Algo, seconds float64) time.Duration {
	all := make([]int, w.settings.Size)
	for i := range all {
		all[i] = i
	}
	predict := func(step time.Duration) float64 {
		m := costsOver(w.data.hostOf, ring.Link{Step: step, BytesPerSec: link.BytesPerSec}, all, 1)
		if m == nil {
			return math.NaN()
		}
		d, ok := m.Predict(algo, 4, nil)
		if !ok {
			return math.NaN()
		}
		return d.Seconds()
	}
	p0, p1 := predict(0), predict(time.Second) // the prediction is p0 + step·(p1 − p0)
	if k := p1 - p0; k > 0 && seconds > p0 {
		return time.Duration((seconds - p0) / k * 1e9)
	}
	return 0
}

// Probe sizes: round trips of a small frame for the step, and one-way
// frames of probeSmall and probeBig bytes (each answered by a small one)
// for the rate.
const (
	probeTrips = 16
	probeSends = 3
	probeSmall = 1 << 20
	probeBig   = 4 << 20
)

// probeLink measures the link to peer: the step is half the median round
// trip of 8 bytes; the rate is the difference of a large and a small
// frame's sizes over the difference of their times (the best of
// probeSends each, timed from sending to the peer's answer, by the clock
// now), so that what both pay alike — a round trip, and what a shaped
// link banked while it idled and lets through at once before it holds
// to its rate (tc's token bucket: 1.25 MB at 10 Gbit/s, which made one
// 2 MiB frame less a round trip look twice as fast as the link) — drops
// out. lead says which side times; the other answers (and returns
// nothing of use).
func probeLink(ctx context.Context, t ring.Transport, peer int, lead bool, now func() time.Time) (ring.Link, error) {
	small, big := make([]byte, 8), make([]byte, probeBig)
	var meta [4]uint64
	exchange := func(send, recv []byte) error {
		ticket, err := t.Post(peer, probeStream, recv)
		if err != nil {
			return err
		}
		if !lead { // answer what arrives
			if _, _, err := t.Wait(ctx, peer, probeStream, ticket); err != nil {
				return err
			}
			return t.Send(ctx, peer, probeStream, meta, small)
		}
		if err := t.Send(ctx, peer, probeStream, meta, send); err != nil {
			return err
		}
		_, _, err = t.Wait(ctx, peer, probeStream, ticket)
		return err
	}
	trips := make([]time.Duration, probeTrips)
	for i := range trips {
		start := now()
		if err := exchange(small, small); err != nil {
			return ring.Link{}, err
		}
		trips[i] = now().Sub(start)
	}
	slices.Sort(trips)
	trip := trips[len(trips)/2]
	recv := small
	if !lead {
		recv = big
	}
	// A first large frame, untimed, spends what a shaped link banked while
	// it idled; after it every timed frame finds the same: what the link
	// banks during one answer.
	if err := exchange(big, recv); err != nil {
		return ring.Link{}, err
	}
	var fastest [2]time.Duration // the best time of probeSmall and of probeBig bytes
	for range probeSends {
		for i, n := range []int{probeSmall, probeBig} {
			start := now()
			if err := exchange(big[:n], recv); err != nil {
				return ring.Link{}, err
			}
			if d := now().Sub(start); fastest[i] == 0 || d < fastest[i] {
				fastest[i] = d
			}
		}
	}
	rate := 0.0
	switch {
	case fastest[1] > fastest[0]:
		rate = (probeBig - probeSmall) / (fastest[1] - fastest[0]).Seconds()
	case fastest[1] > trip: // the clock could not tell them apart
		rate = probeBig / (fastest[1] - trip).Seconds()
	}
	return ring.Link{Step: trip / 2, BytesPerSec: rate}, nil
}

// costsFor returns the cost model of a group of peers (world ranks) that
// spans hosts, or nil: no link measured or set, hosts unknown, or the
// peers on one host. share divides the link between hosts among the
// groups that use it at once (a hierarchy's cross groups).
func costsFor(w *world, peers []int, share int) *ring.Costs {
	m := costsOver(w.data.hostOf, w.net, peers, share)
	if m != nil {
		m.Chunk = chunkBytes(w, peers)
	}
	return m
}

// costsOver is costsFor with the hosts of the world's ranks and the link
// between hosts given.
func costsOver(hostOf []int, net ring.Link, peers []int, share int) *ring.Costs {
	if net.BytesPerSec == 0 || !spansHosts(hostOf, peers) {
		return nil
	}
	hosts := make([]int, len(peers))
	for i, p := range peers {
		hosts[i] = hostOf[p]
	}
	net.BytesPerSec /= float64(share)
	return &ring.Costs{Net: net, Local: sharedMemoryLink(), Reduce: reduceRate, Host: hosts}
}

// reduceRate prices the element-wise reduction for the cost model, in
// bytes of the result per second: a float32 sum of 16 MiB out of cache
// ran at 18 GB/s on the 2-core VM (ring's BenchmarkReduce, Intel family 6
// model 207), rounded towards slower memory and a busier host. A
// constant, so that every rank prices alike.
const reduceRate = 10e9
