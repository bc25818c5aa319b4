package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gorun/gorun/train/data"
)

// DataResult is one measurement of the data pipeline: images decoded,
// transformed and batched per second.
type DataResult struct {
	ImagesPerSec float64 `json:"images_per_sec"`
	Workers      int     `json:"workers"`
	Images       int     `json:"images"`
	Batch        int     `json:"batch"`
	Seconds      float64 `json:"seconds"`
	Transform    string  `json:"transform"`
	Decoder      string  `json:"decoder"`
	Source       string  `json:"source"` // files (an image folder) or shards
}

// MeasureData runs a batch and then images images of ds through a loader
// of batch-sized batches with tf on workers goroutines, and times the
// images from the first batch's arrival (the workers warm up on it) to
// the last's. The images
// are drawn in a random order, repeated when ds has fewer; shards are
// read as training reads them (EpochOrder, one rank), epoch after epoch.
func MeasureData(ds *data.Dataset, tf data.Transform, batch, workers, images int) (DataResult, error) {
	if images < 2*batch {
		return DataResult{}, fmt.Errorf("bench data: %d images at batch %d: want at least two batches", images, batch)
	}
	if ds.Len() == 0 {
		return DataResult{}, fmt.Errorf("bench data: %s has no images", ds.Name)
	}
	l, err := data.NewLoader(ds, batch, tf, data.LoaderConfig{Prefetch: 2 * workers, Workers: workers})
	if err != nil {
		return DataResult{}, err
	}
	defer l.Stop()
	r := rand.New(rand.NewPCG(1, 2))
	var start time.Time
	n := 0
	for epoch := 0; n < images; epoch++ {
		var idx []int
		if ds.Shards != nil {
			if idx, err = ds.Shards.EpochOrder(1, epoch, 0, 1); err != nil {
				return DataResult{}, err
			}
		} else {
			idx = make([]int, images+batch)
			for i := range idx {
				idx[i] = r.IntN(ds.Len())
			}
		}
		left := images - n
		if start.IsZero() {
			left += batch // the warm-up batch
		}
		idx = idx[:min(len(idx), left)]
		if err := l.Start(epoch, idx); err != nil {
			return DataResult{}, err
		}
		for b, ok := l.Next(); ok; b, ok = l.Next() {
			if start.IsZero() {
				start = time.Now()
				continue
			}
			n += b.Len()
		}
		if err := l.Err(); err != nil {
			return DataResult{}, err
		}
	}
	sec := time.Since(start).Seconds()
	what := "RandomResizedCrop+flip+normalise"
	if !tf.ResizedCrop {
		what = "Resize+CenterCrop+normalise"
	}
	source := "files"
	if ds.Shards != nil {
		source = "shards"
	}
	return DataResult{ImagesPerSec: float64(n) / sec, Workers: workers, Images: n, Batch: batch, Seconds: sec,
		Transform: fmt.Sprintf("%s to %d×%d", what, ds.Shape[2], ds.Shape[1]), Decoder: l.Decoder(), Source: source}, nil
}
