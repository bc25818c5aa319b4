package data

import (
	"fmt"
	"sync"

	"github.com/gorun/gorun/model/tensor"
)

// Batch is one batch of transformed images and their labels. It belongs to
// the Loader and is valid until the next call to Next.
type Batch struct {
	X      *tensor.Tensor // [n, C, H, W]
	Labels []int32        // n labels
	// First is the position of the batch's first image in the epoch's
	// index list.
	First int
	data  []float32
}

// Len returns the number of images in the batch.
func (b *Batch) Len() int { return len(b.Labels) }

// Loader prepares batches on a background goroutine while the caller
// trains on earlier ones: up to Prefetch batches wait ready. Buffers are
// recycled, so a running epoch allocates nothing.
type Loader struct {
	ds    *Dataset
	batch int
	tf    Transform
	tab   lut
	bufs  []*Batch
	free  chan *Batch
	ready chan *Batch
	done  chan struct{}
	wg    sync.WaitGroup
	cur   *Batch
}

// NewLoader returns a loader of batchSize images from ds through tf,
// keeping prefetch batches ready ahead of the consumer (at least 1).
func NewLoader(ds *Dataset, batchSize int, tf Transform, prefetch int) (*Loader, error) {
	if batchSize < 1 {
		return nil, fmt.Errorf("data: batch size %d", batchSize)
	}
	prefetch = max(prefetch, 1)
	l := &Loader{ds: ds, batch: batchSize, tf: tf, tab: tf.table(ds.Shape[0])}
	per := ds.ImageSize()
	for range prefetch + 1 {
		b := &Batch{data: make([]float32, batchSize*per), Labels: make([]int32, 0, batchSize)}
		b.X = &tensor.Tensor{Shape: []int{batchSize, ds.Shape[0], ds.Shape[1], ds.Shape[2]}, Data: b.data}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

// Start begins an epoch over indices (positions in the dataset), in
// order, batchSize at a time; the last batch may be smaller. It stops the
// previous epoch's producer if one is still running.
func (l *Loader) Start(epoch int, indices []int) error {
	for _, i := range indices {
		if i < 0 || i >= l.ds.Len() {
			return fmt.Errorf("data: index %d outside the dataset's %d images", i, l.ds.Len())
		}
	}
	l.Stop()
	l.free = make(chan *Batch, len(l.bufs))
	l.ready = make(chan *Batch, len(l.bufs))
	l.done = make(chan struct{})
	for _, b := range l.bufs {
		l.free <- b
	}
	l.cur = nil
	l.wg.Add(1)
	go l.produce(epoch, indices, l.free, l.ready, l.done)
	return nil
}

func (l *Loader) produce(epoch int, indices []int, free <-chan *Batch, ready chan<- *Batch, done <-chan struct{}) {
	defer l.wg.Done()
	defer close(ready)
	per := l.ds.ImageSize()
	for first := 0; first < len(indices); first += l.batch {
		var b *Batch
		select {
		case b = <-free:
		case <-done:
			return
		}
		idx := indices[first:min(first+l.batch, len(indices))]
		b.First = first
		b.Labels = b.Labels[:len(idx)]
		b.X.Shape[0] = len(idx)
		b.X.Data = b.data[:len(idx)*per]
		for j, i := range idx {
			b.Labels[j] = l.ds.Labels[i]
			l.tf.apply(l.tab, l.ds.Image(i), l.ds.Shape, b.X.Data[j*per:(j+1)*per], epoch, i)
		}
		select {
		case ready <- b:
		case <-done:
			return
		}
	}
}

// Next returns the next batch of the epoch, or false at its end. The
// previous batch's buffer is handed back for reuse.
func (l *Loader) Next() (*Batch, bool) {
	if l.ready == nil {
		return nil, false
	}
	if l.cur != nil {
		l.free <- l.cur
		l.cur = nil
	}
	b, ok := <-l.ready
	if !ok {
		return nil, false
	}
	l.cur = b
	return b, true
}

// Stop ends the current epoch early and waits for the producer to exit.
func (l *Loader) Stop() {
	if l.done == nil {
		return
	}
	close(l.done)
	l.wg.Wait()
	l.done, l.ready, l.cur = nil, nil, nil
}
