// Command allreduce is the smallest gorun program: every rank contributes
// its rank number and all of them print the sum.
//
//	go run ./cmd/gorun -np 4 go run ./examples/allreduce
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/gorun/gorun/comm"
)

func main() {
	ctx := context.Background()
	g, err := comm.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	buf := []float32{float32(g.Rank()), 1}
	if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rank %d of %d: sum of ranks = %v, ranks counted = %v\n", g.Rank(), g.Size(), buf[0], buf[1])
}
