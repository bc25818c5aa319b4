package data

import (
	"fmt"
	"slices"
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

	// While the workers fill it: how many images are left, and those
	// that could not be read.
	pending sync.WaitGroup
	mu      sync.Mutex
	failed  []failure
	fatal   error // a shard that cannot be read: the epoch ends
}

// failure is an image of a batch that could not be read.
type failure struct {
	slot int
	err  error
}

// Len returns the number of images in the batch.
func (b *Batch) Len() int { return len(b.Labels) }

// LoaderConfig sets how a Loader works.
type LoaderConfig struct {
	// Prefetch is the number of batches kept ready ahead of the consumer
	// (at least 1).
	Prefetch int
	// Workers is the number of goroutines that decode and transform the
	// images of data read from files (Dataset.Files), all working on the
	// oldest unfinished batch first; 0 means 1. Data held in memory is
	// transformed by one goroutine.
	Workers int
	// SkipBad leaves out of their batch the images whose file cannot be
	// read or decoded, counting them (Skipped), instead of ending the
	// epoch with an error naming the file.
	SkipBad bool
}

// Loader prepares batches on background goroutines while the caller
// trains on earlier ones: up to Prefetch batches wait ready. Buffers are
// recycled, so an epoch of data held in memory allocates nothing.
type Loader struct {
	ds    *Dataset
	batch int
	tf    Transform
	cfg   LoaderConfig
	tab   lut
	bufs  []*Batch
	free  chan *Batch
	ready chan *Batch
	done  chan struct{}
	wg    sync.WaitGroup
	cur   *Batch
	ended bool // Next has seen the epoch's end
	// Written by the collector before it closes ready.
	err     error
	skipped []string
}

// job is one image for a worker: image index of the dataset into slot of
// batch b; raw holds its file's contents when it comes from a shard
// (where names it).
type job struct {
	b           *Batch
	slot, index int
	raw         []byte
	where       string
}

// NewLoader returns a loader of batchSize images from ds through tf.
func NewLoader(ds *Dataset, batchSize int, tf Transform, cfg LoaderConfig) (*Loader, error) {
	if batchSize < 1 {
		return nil, fmt.Errorf("data: batch size %d", batchSize)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("data: %d loader workers", cfg.Workers)
	}
	if ds.Streamed() {
		if tf.Pad > 0 {
			return nil, fmt.Errorf("data: %s is read from files, which take RandomResizedCrop, not a padded crop", ds.Name)
		}
		if ds.Shape[0] != 3 || (!tf.ResizedCrop && ds.Shape[1] != ds.Shape[2]) {
			return nil, fmt.Errorf("data: %s is read from files as %v images: want 3 channels, and a square for evaluation's center crop", ds.Name, ds.Shape)
		}
	} else if tf.ResizedCrop {
		return nil, fmt.Errorf("data: RandomResizedCrop is for images read from files; %s is held in memory", ds.Name)
	}
	cfg.Prefetch, cfg.Workers = max(cfg.Prefetch, 1), max(cfg.Workers, 1)
	if !ds.Streamed() {
		cfg.Workers = 1
	}
	// Prefetch ready, one with the consumer, and one being filled.
	buffers := cfg.Prefetch + 2
	if err := checkFits(buffers, batchSize, ds.Shape); err != nil {
		return nil, err
	}
	l := &Loader{ds: ds, batch: batchSize, tf: tf, cfg: cfg, tab: tf.table(ds.Shape[0])}
	per := ds.ImageSize()
	for range buffers {
		b := &Batch{data: make([]float32, batchSize*per), Labels: make([]int32, 0, batchSize)}
		b.X = &tensor.Tensor{Shape: []int{batchSize, ds.Shape[0], ds.Shape[1], ds.Shape[2]}, Data: b.data}
		l.bufs = append(l.bufs, b)
	}
	return l, nil
}

// Start begins an epoch over indices (positions in the dataset), in
// order, batchSize at a time; the last batch may be smaller. It stops the
// previous epoch's goroutines if they are still running.
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
	l.err, l.skipped, l.ended = nil, nil, false
	// Closed by the collector when an unreadable image ends the epoch.
	halt := make(chan struct{})
	for _, b := range l.bufs {
		l.free <- b
	}
	l.cur = nil
	filling := make(chan *Batch, len(l.bufs))
	var jobs chan job
	if l.ds.Streamed() {
		jobs = make(chan job, l.batch)
		for range l.cfg.Workers {
			l.wg.Add(1)
			go l.work(epoch, jobs, l.done, halt)
		}
	}
	l.wg.Add(2)
	go l.produce(epoch, indices, jobs, filling, l.done, halt)
	go l.collect(filling, l.ready, l.done, halt)
	return nil
}

// produce hands out the images of each batch, in order, as buffers come
// free: to the workers, or transformed here when there are none.
func (l *Loader) produce(epoch int, indices []int, jobs chan<- job, filling chan<- *Batch, done, halt <-chan struct{}) {
	defer l.wg.Done()
	defer close(filling)
	if jobs != nil {
		defer close(jobs)
	}
	per := l.ds.ImageSize()
	var shards *shardStream
	if l.ds.Shards != nil {
		shards = newShardStream(l.ds.Shards, len(l.ds.Classes), indices)
		defer shards.close()
	}
	for first := 0; first < len(indices); first += l.batch {
		var b *Batch
		select {
		case b = <-l.free:
		case <-done:
			return
		case <-halt:
			return
		}
		idx := indices[first:min(first+l.batch, len(indices))]
		b.First = first
		b.Labels = b.Labels[:len(idx)]
		b.X.Shape[0] = len(idx)
		b.X.Data = b.data[:len(idx)*per]
		b.failed, b.fatal = b.failed[:0], nil
		b.pending.Add(len(idx))
		filling <- b // (room for every buffer)
		for j, i := range idx {
			jb := job{b: b, slot: j, index: i}
			switch {
			case shards != nil:
				s, err := shards.get(i)
				if err != nil {
					b.fatal = err
					b.pending.Add(j - len(idx))
					return
				}
				b.Labels[j], jb.raw, jb.where = s.label, s.image, s.where
			default:
				b.Labels[j] = l.ds.Labels[i]
			}
			if jobs == nil {
				l.tf.apply(l.tab, l.ds.Image(i), l.ds.Shape, b.X.Data[j*per:(j+1)*per], epoch, i)
				b.pending.Done()
				continue
			}
			select {
			case jobs <- jb:
			case <-done:
				b.pending.Add(j - len(idx)) // never handed out
				return
			case <-halt:
				b.pending.Add(j - len(idx))
				return
			}
		}
	}
}

// work transforms images read from files until jobs closes.
func (l *Loader) work(epoch int, jobs <-chan job, done, halt <-chan struct{}) {
	defer l.wg.Done()
	wk := &fileWorker{reader: NewImageReader()}
	defer wk.reader.Close()
	per := l.ds.ImageSize()
	for j := range jobs {
		select {
		case <-done: // stopping: only account for it
		case <-halt:
		default:
			out := j.b.X.Data[j.slot*per : (j.slot+1)*per]
			var err error
			if j.raw != nil {
				err = l.tf.applyBytes(wk, l.tab, j.raw, j.where, l.ds.Shape, out, epoch, j.index)
			} else {
				err = l.tf.applyFile(wk, l.tab, l.ds.Files[j.index], l.ds.Shape, out, epoch, j.index)
			}
			if err != nil {
				j.b.mu.Lock()
				j.b.failed = append(j.b.failed, failure{j.slot, err})
				j.b.mu.Unlock()
			}
		}
		j.b.pending.Done()
	}
}

// collect hands the batches to the consumer in order as each is
// finished, without the images that failed when SkipBad is set; else the
// first failure ends the epoch.
func (l *Loader) collect(filling <-chan *Batch, ready chan<- *Batch, done <-chan struct{}, halt chan struct{}) {
	defer l.wg.Done()
	defer close(ready)
	defer func() {
		for range filling { // until the producer has stopped
		}
	}()
	per := l.ds.ImageSize()
	for b := range filling {
		b.pending.Wait()
		if b.fatal != nil {
			l.err = fmt.Errorf("data: %w", b.fatal)
			close(halt)
			return
		}
		if len(b.failed) > 0 {
			slices.SortFunc(b.failed, func(x, y failure) int { return x.slot - y.slot })
			if !l.cfg.SkipBad {
				l.err = fmt.Errorf("data: %w (--skip-bad-images leaves such files out)", b.failed[0].err)
				close(halt)
				return
			}
			l.dropFailed(b, per)
			if b.Len() == 0 {
				l.err = fmt.Errorf("data: not one image of the batch at position %d could be read (%d skipped so far; the last: %w)", b.First, len(l.skipped), b.failed[len(b.failed)-1].err)
				close(halt)
				return
			}
		}
		select {
		case ready <- b:
		case <-done:
			return
		}
	}
}

// dropFailed moves a batch's readable images together, counting the
// others as skipped.
func (l *Loader) dropFailed(b *Batch, per int) {
	keep, f := 0, 0
	for j := range b.Len() {
		if f < len(b.failed) && b.failed[f].slot == j {
			l.skipped = append(l.skipped, b.failed[f].err.Error())
			f++
			continue
		}
		if keep != j {
			copy(b.X.Data[keep*per:(keep+1)*per], b.X.Data[j*per:(j+1)*per])
			b.Labels[keep] = b.Labels[j]
		}
		keep++
	}
	b.Labels = b.Labels[:keep]
	b.X.Shape[0] = keep
	b.X.Data = b.X.Data[:keep*per]
}

// Next returns the next batch of the epoch, or false at its end or after
// an error (Err), by when the epoch's goroutines have finished. The
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
		// The epoch is over: let its goroutines finish (after an error
		// some may still be winding down), so that nothing reads the
		// dataset once Next has said so.
		l.wg.Wait()
		l.ended = true
		return nil, false
	}
	l.cur = b
	return b, true
}

// Err returns the error that ended the epoch early, once Next has
// returned false: an image file that could not be read (without
// SkipBad).
func (l *Loader) Err() error {
	if !l.ended {
		return nil
	}
	return l.err
}

// Decoder describes how JPEG files are decoded (ImageReader.Decoder).
func (l *Loader) Decoder() string {
	r := NewImageReader()
	defer r.Close()
	return r.Decoder()
}

// Skipped returns the errors of the images left out of the epoch so far
// (SkipBad), each naming its file; valid once Next has returned false.
func (l *Loader) Skipped() []string { return l.skipped }

// Stop ends the current epoch early and waits for the goroutines to exit.
func (l *Loader) Stop() {
	if l.done == nil {
		return
	}
	close(l.done)
	l.wg.Wait()
	l.done, l.ready, l.cur = nil, nil, nil
}
