package train_test

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/train"
	"github.com/gorun/gorun/train/data"
)

// Train the MNIST net for one epoch on generated data and evaluate it. In a
// job of several ranks (gorun -np N), pass train.WithGroup(g) with the
// group from comm.Init, and the same code trains data-parallel.
func Example() {
	ctx := context.Background()
	cfg, _ := train.Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 2
	trainSet, _ := data.Synthetic(data.FormatMNIST, 1536, 1)
	testSet, _ := data.Synthetic(data.FormatMNIST, 128, 2)
	be := cpu.New(cfg.Threads)
	defer be.Close()
	t, err := train.New(ctx, cfg, be, trainSet, testSet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	if err := t.Run(ctx); err != nil {
		fmt.Println(err)
		return
	}
	ev, err := t.Evaluate(ctx, testSet)
	fmt.Printf("%d test images, better than guessing: %v, error: %v\n", ev.Total, ev.Accuracy() > 0.5, err)
	// Output: 128 test images, better than guessing: true, error: <nil>
}
