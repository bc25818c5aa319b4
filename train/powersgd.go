package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019), as PyTorch's
// powerSGD_hook: each gradient matrix M (a parameter's gradient viewed as
// shape[0] × the rest) is replaced by a rank-r approximation P·Qᵀ found
// by one step of power iteration, warm-started from the last step's Q:
//
//	P = M·Q, averaged across ranks, then orthogonalized;
//	Q = Mᵀ·P, averaged across ranks;
//	M ≈ P·Qᵀ.
//
// Only P and Q travel: r·(rows+cols) numbers instead of rows·cols. What
// the approximation leaves out of this rank's M is kept (error feedback)
// and added to the next step's gradient before compressing. Gradients
// where compression does not pay — vectors (biases, batch norm) and
// matrices for which rows·cols < 2·r·(rows+cols), PyTorch's
// min_compression_rate — travel uncompressed, in the same all-reduce as
// the P matrices. Before step Start every gradient travels uncompressed
// (PyTorch's start_powerSGD_iter), and error feedback begins at Start.
type powerSGD struct {
	rank, start int
	steps       int // reductions done
	eng         *gemm.Engine
	buckets     []psgdBucket // parallel to DDP.buckets
}

// psgdBucket is one gradient bucket's compression state.
type psgdBucket struct {
	mats    []psgdMatrix
	plain   [][2]int  // [lo, hi) ranges of the bucket that travel uncompressed
	plainAt int       // where the uncompressed elements start in first
	first   []float32 // every matrix's P, then the uncompressed elements
	second  []float32 // every matrix's Q (kept: the next step's warm start)
	work    *comm.Work
	started time.Time // when this step's first all-reduce began
}

// psgdMatrix is one compressed gradient.
type psgdMatrix struct {
	off, rows, cols int       // the gradient: rows×cols from off in the bucket, row-major
	p, q            []float32 // rows×r in first, cols×r in second
	err             []float32 // error feedback, rows×cols
}

// parsePowerSGD reads "powersgd:R" or "powersgd:R:START".
func parsePowerSGD(kind string) (rank, start int, ok bool, err error) {
	rest, found := strings.CutPrefix(kind, "powersgd:")
	if !found {
		return 0, 0, false, nil
	}
	r, s, hasStart := strings.Cut(rest, ":")
	rank, err = strconv.Atoi(r)
	if err != nil || rank < 1 {
		return 0, 0, true, fmt.Errorf("--grad-compression %s: the rank after powersgd: must be a whole number ≥ 1", kind)
	}
	if hasStart {
		start, err = strconv.Atoi(s)
		if err != nil || start < 0 {
			return 0, 0, true, fmt.Errorf("--grad-compression %s: the start step after the rank must be a whole number ≥ 0", kind)
		}
	}
	return rank, start, true, nil
}

// newPowerSGD lays out the compression of d's buckets at rank r. Q starts
// from the same pseudo-random normal values on every rank.
func newPowerSGD(d *DDP, r, start int) *powerSGD {
	ps := &powerSGD{rank: r, start: start, eng: gemm.New(1)}
	for bi, b := range d.buckets {
		var pb psgdBucket
		nP, nQ, nPlain := 0, 0, 0
		for i, shape := range b.shapes {
			lo, hi := b.offs[i], b.offs[i]+numel(shape)
			rows := 0
			if len(shape) >= 2 {
				rows = shape[0]
			}
			if rows > 0 && compressionPays(rows, (hi-lo)/rows, r) {
				cols := (hi - lo) / rows
				pb.mats = append(pb.mats, psgdMatrix{off: lo, rows: rows, cols: cols, err: make([]float32, hi-lo)})
				nP += rows * r
				nQ += cols * r
				continue
			}
			if k := len(pb.plain); k > 0 && pb.plain[k-1][1] == lo {
				pb.plain[k-1][1] = hi // adjacent: one range
			} else {
				pb.plain = append(pb.plain, [2]int{lo, hi})
			}
			nPlain += hi - lo
		}
		pb.first, pb.second, pb.plainAt = make([]float32, nP+nPlain), make([]float32, nQ), nP
		rng := rand.New(rand.NewPCG(0x50_57_45_52, uint64(bi)))
		p, q := 0, 0
		for i := range pb.mats {
			m := &pb.mats[i]
			m.p, m.q = pb.first[p:p+m.rows*r], pb.second[q:q+m.cols*r]
			for j := range m.q {
				m.q[j] = float32(rng.NormFloat64())
			}
			p += m.rows * r
			q += m.cols * r
		}
		ps.buckets = append(ps.buckets, pb)
	}
	return ps
}

// describe says what travels: "PowerSGD rank 2 on 3 gradient matrices,
// 0.41 MB a step on the wire instead of 4.80 MB, from step 0".
func (ps *powerSGD) describe() string {
	mats := 0
	var now, plain int64
	for _, pb := range ps.buckets {
		mats += len(pb.mats)
		now += 4 * int64(len(pb.first)+len(pb.second))
		plain += 4 * int64(len(pb.first)-pb.plainAt)
		for _, m := range pb.mats {
			plain += 4 * int64(m.rows*m.cols)
		}
	}
	return fmt.Sprintf("PowerSGD rank %d on %d gradient matrices, %.2f MB a step on the wire instead of %.2f MB, from step %d", ps.rank, mats, float64(now)/1e6, float64(plain)/1e6, ps.start)
}

// compressionPays reports whether a rows×cols matrix at rank r sends at
// most half its elements, PyTorch's default min_compression_rate of 2.
func compressionPays(rows, cols, r int) bool {
	return rows*cols >= 2*r*(rows+cols)
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// active reports whether this step compresses.
func (ps *powerSGD) active() bool { return ps.steps >= ps.start }

// launch adds the error feedback to bucket bi's matrices (buf), computes
// their P = M·Q, and starts averaging the P matrices with the uncompressed
// gradients. It returns the bytes handed to the all-reduce.
func (ps *powerSGD) launch(d *DDP, bi int, buf []float32) int64 {
	pb := &ps.buckets[bi]
	r := ps.rank
	for i := range pb.mats {
		m := &pb.mats[i]
		g := buf[m.off : m.off+m.rows*m.cols]
		addInto(g, m.err) // M = gradient + what earlier steps left out
		copy(m.err, g)    // M, until the approximation is subtracted
		ps.gemm(m.rows, r, m.cols, g, false, m.q, false, m.p)
	}
	at := pb.plainAt
	for _, rg := range pb.plain {
		at += copy(pb.first[at:], buf[rg[0]:rg[1]])
	}
	pb.work = comm.AllReduceAsync(d.ctx, d.g, pb.first, comm.Avg)
	return 4 * int64(len(pb.first))
}

// second waits for bucket bi's first all-reduce, puts the averaged
// uncompressed gradients back into buf, orthogonalizes each P, computes
// Q = Mᵀ·P and starts averaging the Q matrices. It returns the bytes
// handed to the all-reduce.
func (ps *powerSGD) second(d *DDP, bi int, buf []float32) (int64, error) {
	pb := &ps.buckets[bi]
	if err := pb.work.Wait(); err != nil {
		return 0, err
	}
	pb.started, _ = pb.work.Span()
	at := pb.plainAt
	for _, rg := range pb.plain {
		at += copy(buf[rg[0]:rg[1]], pb.first[at:])
	}
	r := ps.rank
	for i := range pb.mats {
		m := &pb.mats[i]
		orthogonalize(m.p, m.rows, r)
		ps.gemm(m.cols, r, m.rows, m.err, true, m.p, false, m.q) // Mᵀ·P (err holds M)
	}
	pb.work = comm.AllReduceAsync(d.ctx, d.g, pb.second, comm.Avg)
	return 4 * int64(len(pb.second)), nil
}

// finish waits for bucket bi's second all-reduce and replaces each
// matrix's gradient in buf with P·Qᵀ, keeping M − P·Qᵀ as the error.
func (ps *powerSGD) finish(bi int, buf []float32) error {
	pb := &ps.buckets[bi]
	if err := pb.work.Wait(); err != nil {
		return err
	}
	for i := range pb.mats {
		m := &pb.mats[i]
		g := buf[m.off : m.off+m.rows*m.cols]
		ps.gemm(m.rows, m.cols, ps.rank, m.p, false, m.q, true, g)
		subInto(m.err, g)
	}
	return nil
}

// gemm sets c (m×n) to op(a)·op(b), where op(a) is m×k and op(b) k×n, all
// row-major and packed; ta and tb say a and b are stored transposed.
func (ps *powerSGD) gemm(m, n, k int, a []float32, ta bool, b []float32, tb bool, c []float32) {
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	// The shapes are the ones built here; an error is a bug.
	if err := ps.eng.Sgemm(m, n, k, 1, gemm.Matrix{Data: a, Stride: lda, Trans: ta}, gemm.Matrix{Data: b, Stride: ldb, Trans: tb}, 0, gemm.Matrix{Data: c, Stride: n}); err != nil {
		panic(fmt.Sprintf("train: PowerSGD product %d×%d×%d: %v", m, n, k, err))
	}
}

// orthogonalize makes the r columns of p (rows×r, row-major) orthonormal
// by Gram–Schmidt, as PyTorch's hook does; a column that vanishes is
// left (near) zero rather than divided by zero.
func orthogonalize(p []float32, rows, r int) {
	for j := range r {
		for k := range j {
			var dot float64
			for i := range rows {
				dot += float64(p[i*r+j]) * float64(p[i*r+k])
			}
			for i := range rows {
				p[i*r+j] -= float32(dot) * p[i*r+k]
			}
		}
		var norm float64
		for i := range rows {
			norm += float64(p[i*r+j]) * float64(p[i*r+j])
		}
		scale := float32(1 / (math.Sqrt(norm) + 1e-8))
		for i := range rows {
			p[i*r+j] *= scale
		}
	}
}

func addInto(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

func subInto(dst, src []float32) {
	for i, v := range src {
		dst[i] -= v
	}
}

// PowerSGD's state in a checkpoint's training file: the step count, each
// bucket's Q (the same on every replica: it was averaged) and every
// replica's error feedback, gathered to rank 0, so that a resumed run
// compresses exactly as an uninterrupted one would.
const (
	psgdStepsName = "powersgd.steps"
	psgdQName     = "powersgd.q.%d"     // by bucket
	psgdErrorName = "powersgd.error.%d" // by replica, every matrix's error feedback in bucket order
)

// errorLen is the number of error-feedback values one replica keeps.
func (ps *powerSGD) errorLen() int {
	n := 0
	for _, b := range ps.buckets {
		for _, m := range b.mats {
			n += len(m.err)
		}
	}
	return n
}

// state gathers the compression state for a checkpoint onto rank 0 (nil
// elsewhere). Every replica calls it.
func (ps *powerSGD) state(ctx context.Context, g *comm.Group) ([]nn.Var, error) {
	n := ps.errorLen()
	mine := make([]float32, 0, n)
	for _, b := range ps.buckets {
		for _, m := range b.mats {
			mine = append(mine, m.err...)
		}
	}
	var all []float32
	if g.Rank() == 0 {
		all = make([]float32, n*g.Size())
	}
	if err := g.Gather(ctx, mine, all, 0); err != nil {
		return nil, fmt.Errorf("gathering PowerSGD's error feedback for the checkpoint: %w", err)
	}
	if g.Rank() != 0 {
		return nil, nil
	}
	steps := int64(ps.steps)
	vars := []nn.Var{{Name: psgdStepsName, Count: &steps}}
	for bi, b := range ps.buckets {
		vars = append(vars, nn.Var{Name: fmt.Sprintf(psgdQName, bi), Value: vector(append([]float32(nil), b.second...))})
	}
	for r := range g.Size() {
		vars = append(vars, nn.Var{Name: fmt.Sprintf(psgdErrorName, r), Value: vector(all[r*n : (r+1)*n])})
	}
	return vars, nil
}

// restore loads the state saved by state from a checkpoint into replica
// rank of world. It returns why it started afresh instead ("" when it
// restored everything): a checkpoint without PowerSGD's state, or with
// another layout (another rank or model), starts compression over as a
// new run does; one saved by another number of replicas keeps the step
// count and Q and starts the error feedback at zero.
func (ps *powerSGD) restore(s syncState, rank, world int) (string, error) {
	st, ok := s.get(psgdStepsName)
	if !ok {
		return "the checkpoint holds no PowerSGD state (saved without it, or by an older build): PowerSGD starts afresh", nil
	}
	if len(st.I64) != 1 || st.I64[0] < 0 {
		return "", fmt.Errorf("%s: %s: want one step count ≥ 0, have %s %v", s.path, st.Name, st.DType, st.Shape)
	}
	qs := make([][]float32, len(ps.buckets))
	for bi, b := range ps.buckets {
		q, ok := s.get(fmt.Sprintf(psgdQName, bi))
		if !ok || len(q.F32) != len(b.second) {
			return "the checkpoint's PowerSGD state has another layout (another rank or model): PowerSGD starts afresh", nil
		}
		qs[bi] = q.F32
	}
	if _, ok := s.get(fmt.Sprintf(psgdQName, len(ps.buckets))); ok {
		return "the checkpoint's PowerSGD state has another layout (more gradient buckets): PowerSGD starts afresh", nil
	}
	saved := 0
	for {
		if _, ok := s.get(fmt.Sprintf(psgdErrorName, saved)); !ok {
			break
		}
		saved++
	}
	var mine []float32
	if saved == world {
		e, _ := s.get(fmt.Sprintf(psgdErrorName, rank))
		if n := ps.errorLen(); len(e.F32) != n {
			return "", fmt.Errorf("%s: %s holds %d values, want %d", s.path, e.Name, len(e.F32), n)
		}
		mine = e.F32
	}
	ps.steps = int(st.I64[0])
	for bi := range ps.buckets {
		b := &ps.buckets[bi]
		copy(b.second, qs[bi])
		for i := range b.mats {
			m := &b.mats[i]
			if mine == nil {
				clear(m.err)
				continue
			}
			mine = mine[copy(m.err, mine):]
		}
	}
	if saved != world {
		return fmt.Sprintf("the checkpoint holds PowerSGD's error feedback of %d replicas, this run has %d: it starts at zero", saved, world), nil
	}
	return "", nil
}

// vector is v as a one-dimensional host tensor (sharing v).
func vector(v []float32) *tensor.Tensor { return &tensor.Tensor{Shape: []int{len(v)}, Data: v} }
