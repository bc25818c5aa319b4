package comm_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
)

// BenchmarkAllReduce runs real np-process jobs over loopback TCP. Each rank
// times b.N float32 all-reduces after a warm-up; ns/op is the slowest
// rank's time per call, busbw the nccl-tests bus bandwidth
// (bytes/time × 2(n−1)/n).
//
//	go test ./comm -run '^$' -bench AllReduce -count 5 | tee new.txt; benchstat new.txt
func BenchmarkAllReduce(b *testing.B) {
	for _, np := range []int{2, 4} {
		for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("np=%d/bytes=%d", np, size), func(b *testing.B) {
				benchJob(b, np, size)
			})
		}
	}
}

// BenchmarkAllReduceCrossover forces each algorithm at the sizes around the
// crossover, to choose ring.DefaultSmallBytes from measurements.
func BenchmarkAllReduceCrossover(b *testing.B) {
	for _, np := range []int{2, 4} {
		for _, size := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
			for _, algo := range []struct{ name, small string }{{"ring", "-1"}, {"doubling", "1073741824"}} {
				b.Run(fmt.Sprintf("np=%d/bytes=%d/%s", np, size, algo.name), func(b *testing.B) {
					benchJob(b, np, size, "GORUN_SMALL_BYTES="+algo.small)
				})
			}
		}
	}
}

// BenchmarkAllReduceCompression measures S2 payload compression on
// incompressible (random) and compressible (constant) data, np=2.
func BenchmarkAllReduceCompression(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20} {
		for _, data := range []string{"random", "constant"} {
			for _, comp := range []string{"none", "s2"} {
				b.Run(fmt.Sprintf("bytes=%d/%s/compress=%s", size, data, comp), func(b *testing.B) {
					benchJob(b, 2, size, "GORUN_COMPRESS="+comp, "BENCH_DATA="+data)
				})
			}
		}
	}
}

func benchJob(b *testing.B, np, size int, env ...string) {
	iters := b.N
	if iters == 1 {
		return // the sizing run: jobs cost process starts, go straight to the real one
	}
	env = append(env, fmt.Sprintf("BENCH_BYTES=%d", size), fmt.Sprintf("BENCH_ITERS=%d", iters))
	res, out := runJob(b, np, "bench", env...)
	if err := res.Error(); err != nil {
		b.Fatalf("job failed: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`NS-PER-OP ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("no timing in output:\n%s", out)
	}
	ns, _ := strconv.ParseFloat(m[1], 64)
	b.ReportMetric(ns, "ns/op")
	b.ReportMetric(float64(size)/ns*2*float64(np-1)/float64(np), "busbw_GB/s")
}
