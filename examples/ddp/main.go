// Command ddp is a complete data-parallel training run on gorun's
// collectives, small enough to read in one sitting: a softmax classifier on
// Fashion-MNIST. Rank 0's initial weights are broadcast; every rank takes
// its own shard of each batch, computes gradients, and AllReduce averages
// them, so all ranks take the same step. At the end the test accuracy is
// computed on each rank's share of the test set and summed across ranks.
//
//	go build -o bin/ ./cmd/gorun ./examples/ddp && bin/gorun -np 2 bin/ddp
//
// The CNN trainer (cmd/train) will replace this example as the main job.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/gorun/gorun/comm"
)

const (
	pixels  = 28 * 28
	classes = 10
)

func main() {
	dir := flag.String("data", "/usr/share/datasets/fashion-mnist", "directory with the MNIST-format files (train-images-idx3-ubyte.gz, ...)")
	epochs := flag.Int("epochs", 3, "passes over the training set")
	batch := flag.Int("batch-size", 64, "global batch size (split across ranks)")
	lr := flag.Float64("lr", 0.1, "learning rate")
	flag.Parse()
	if err := run(*dir, *epochs, *batch, float32(*lr)); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, epochs, batch int, lr float32) error {
	ctx := context.Background()
	g, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	if batch%g.Size() != 0 {
		return fmt.Errorf("--batch-size %d is not divisible by the %d ranks", batch, g.Size())
	}
	trainX, trainY, err := load(dir, "train")
	if err != nil {
		return fmt.Errorf("%w (install the data with: apt-get install dataset-fashion-mnist)", err)
	}
	testX, testY, err := load(dir, "t10k")
	if err != nil {
		return err
	}

	// Parameters: weights then biases, one flat slice so one AllReduce moves them.
	params := make([]float32, classes*pixels+classes)
	grad := make([]float32, len(params))
	rng := rand.New(rand.NewPCG(uint64(g.Rank()), 1)) // deliberately different per rank...
	for i := range classes * pixels {
		params[i] = float32(rng.NormFloat64() * 0.01)
	}
	if err := g.Broadcast(ctx, params, 0); err != nil { // ...until rank 0's are broadcast
		return err
	}

	n := len(trainY)
	local := batch / g.Size()
	order := rand.New(rand.NewPCG(42, 0)) // the same shuffle on every rank
	perm := make([]int, n)
	start := time.Now()
	var commTime time.Duration
	for epoch := 1; epoch <= epochs; epoch++ {
		for i := range perm {
			perm[i] = i
		}
		order.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var lossSum float64
		steps := n / batch
		for step := range steps {
			clear(grad)
			mine := perm[step*batch+g.Rank()*local : step*batch+(g.Rank()+1)*local]
			for _, idx := range mine {
				lossSum += backward(params, grad, trainX[idx*pixels:(idx+1)*pixels], trainY[idx])
			}
			t0 := time.Now()
			if err := g.AllReduce(ctx, grad, comm.Sum); err != nil {
				return err
			}
			commTime += time.Since(t0)
			scale := lr / float32(batch)
			for i := range params {
				params[i] -= scale * grad[i]
			}
			if g.Rank() == 0 && (step+1)%200 == 0 {
				fmt.Printf("Train Epoch: %d [%d/%d (%.0f%%)]\tLoss: %.6f\n", epoch, (step+1)*batch, n,
					100*float64(step+1)/float64(steps), lossSum/float64((step+1)*local))
			}
		}
		correct, err := evaluate(ctx, g, params, testX, testY)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			fmt.Printf("Test set: epoch %d accuracy %d/%d (%.2f%%)\n", epoch, correct, len(testY), 100*float64(correct)/float64(len(testY)))
		}
	}
	if g.Rank() == 0 {
		fmt.Printf("Training time = %.2f s on %d ranks (all-reduce %.2f s)\n", time.Since(start).Seconds(), g.Size(), commTime.Seconds())
	}
	return nil
}

// backward adds the cross-entropy gradient of one example to grad and returns its loss.
func backward(params, grad, x []float32, label uint8) float64 {
	var logits [classes]float32
	forward(params, x, logits[:])
	var maxv float32 = logits[0]
	for _, v := range logits {
		maxv = max(maxv, v)
	}
	var sum float64
	var p [classes]float64
	for c, v := range logits {
		p[c] = math.Exp(float64(v - maxv))
		sum += p[c]
	}
	w, b := grad[:classes*pixels], grad[classes*pixels:]
	for c := range classes {
		d := float32(p[c] / sum)
		if c == int(label) {
			d--
		}
		row := w[c*pixels : (c+1)*pixels]
		for i, xi := range x {
			row[i] += d * xi
		}
		b[c] += d
	}
	return -math.Log(p[label]/sum + 1e-12)
}

func forward(params, x, logits []float32) {
	w, b := params[:classes*pixels], params[classes*pixels:]
	for c := range classes {
		row := w[c*pixels : (c+1)*pixels]
		s := b[c]
		for i, xi := range x {
			s += row[i] * xi
		}
		logits[c] = s
	}
}

// evaluate counts correct test predictions on this rank's share and sums the counts.
func evaluate(ctx context.Context, g *comm.Group, params, x []float32, y []uint8) (int, error) {
	var logits [classes]float32
	count := []int64{0}
	for i := g.Rank(); i < len(y); i += g.Size() {
		forward(params, x[i*pixels:(i+1)*pixels], logits[:])
		best := 0
		for c := range classes {
			if logits[c] > logits[best] {
				best = c
			}
		}
		if best == int(y[i]) {
			count[0]++
		}
	}
	err := comm.AllReduce(ctx, g, count, comm.Sum)
	return int(count[0]), err
}

// load reads an MNIST-format split (images scaled to [0,1]).
func load(dir, split string) ([]float32, []uint8, error) {
	images, err := readIDX(filepath.Join(dir, split+"-images-idx3-ubyte.gz"), 0x803)
	if err != nil {
		return nil, nil, err
	}
	labels, err := readIDX(filepath.Join(dir, split+"-labels-idx1-ubyte.gz"), 0x801)
	if err != nil {
		return nil, nil, err
	}
	if len(images) != len(labels)*pixels {
		return nil, nil, fmt.Errorf("%s: %d images' worth of pixels for %d labels", split, len(images)/pixels, len(labels))
	}
	x := make([]float32, len(images))
	for i, v := range images {
		x[i] = float32(v) / 255
	}
	return x, labels, nil
}

func readIDX(path string, magic uint32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(zr, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if got := binary.BigEndian.Uint32(hdr[:]); got != magic {
		return nil, fmt.Errorf("%s: magic %#x at offset 0, want %#x", path, got, magic)
	}
	dims := int(magic & 0xff)
	size := 1
	for d := range dims {
		if _, err := io.ReadFull(zr, hdr[:]); err != nil {
			return nil, fmt.Errorf("%s: dimension %d: %w", path, d, err)
		}
		size *= int(binary.BigEndian.Uint32(hdr[:]))
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(zr, data); err != nil {
		return nil, fmt.Errorf("%s: %d bytes of data expected after the %d-byte header: %w", path, size, 4+4*dims, err)
	}
	return data, nil
}
