package comm_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gorun/gorun/comm"
)

// inProcess runs fn as every rank of an n-rank job whose ranks are
// goroutines of this process. A real program is started as n processes
// (gorun -np n prog, srun, torchrun or mpirun) and each calls
// comm.Init(ctx), which reads its rank and the rendezvous address from the
// environment.
func inProcess(n int, fn func(ctx context.Context, g *comm.Group) error) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ctx := context.Background()
			g, err := comm.Init(ctx, comm.WithRank(r, n), comm.WithMaster("127.0.0.1", port),
				comm.WithToken("example"), comm.WithJoinTimeout(20*time.Second))
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Close()
			errs[r] = fn(ctx, g)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// Every rank contributes its buffer; every rank ends with the sum.
func ExampleGroup_AllReduce() {
	results := make([][]float32, 3)
	err := inProcess(3, func(ctx context.Context, g *comm.Group) error {
		r := float32(g.Rank())
		buf := []float32{r, 10 * r}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
		results[g.Rank()] = buf
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for r, buf := range results {
		fmt.Printf("rank %d: %v\n", r, buf)
	}
	// Output:
	// rank 0: [3 30]
	// rank 1: [3 30]
	// rank 2: [3 30]
}

// Ranks compare what they must hold alike before they rely on it; every
// rank gets the same error, naming what differs and where.
func ExampleGroup_CheckSame() {
	err := inProcess(3, func(ctx context.Context, g *comm.Group) error {
		lr := "0.1"
		if g.Rank() == 2 {
			lr = "0.5" // one node started with another flag
		}
		return g.CheckSame(ctx, []comm.Setting{{Name: "--lr", Value: lr}, {Name: "--epochs", Value: "3"}})
	})
	fmt.Println(err)
	// Output:
	// rank 0: the ranks differ where they must agree: --lr is 0.1 on ranks 0, 1 but 0.5 on rank 2
}

// The generic functions take any element type.
func ExampleAllReduce() {
	var got []int64
	err := inProcess(2, func(ctx context.Context, g *comm.Group) error {
		counts := []int64{int64(g.Rank() + 1), 7}
		if err := comm.AllReduce(ctx, g, counts, comm.Max); err != nil {
			return err
		}
		if g.Rank() == 0 {
			got = counts
		}
		return nil
	})
	fmt.Println(got, err)
	// Output: [2 7] <nil>
}

// Split divides a group as MPI_Comm_split does: ranks with the same color
// form a new group, ordered by key. Collectives on the new groups run
// independently.
func ExampleGroup_Split() {
	lines := make([]string, 4)
	err := inProcess(4, func(ctx context.Context, g *comm.Group) error {
		color := g.Rank() % 2 // even ranks and odd ranks
		sub, err := g.Split(ctx, color, g.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		buf := []float32{float32(g.Rank())}
		if err := sub.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
		lines[g.Rank()] = fmt.Sprintf("rank %d is rank %d of %d in group %d; sum of its members' ranks %v", g.Rank(), sub.Rank(), sub.Size(), color, buf[0])
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0 is rank 0 of 2 in group 0; sum of its members' ranks 2
	// rank 1 is rank 0 of 2 in group 1; sum of its members' ranks 4
	// rank 2 is rank 1 of 2 in group 0; sum of its members' ranks 2
	// rank 3 is rank 1 of 2 in group 1; sum of its members' ranks 4
}

// Send and Recv move a buffer from one rank to another; the tag keeps
// apart messages between the same pair.
func ExampleGroup_Send() {
	var got []float32
	err := inProcess(2, func(ctx context.Context, g *comm.Group) error {
		const tag = 5
		if g.Rank() == 0 {
			return g.Send(ctx, []float32{1.5, 2.5, 3.5}, 1, tag)
		}
		buf := make([]float32, 3)
		if err := g.Recv(ctx, buf, 0, tag); err != nil {
			return err
		}
		got = buf
		return nil
	})
	fmt.Println(got, err)
	// Output: [1.5 2.5 3.5] <nil>
}
