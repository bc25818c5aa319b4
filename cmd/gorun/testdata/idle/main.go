// Command idle joins a job, prints its process id and sleeps outside any
// collective: the rank a killed launcher must not leave behind.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gorun/gorun/comm"
)

func main() {
	g, err := comm.Init(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer g.Close()
	fmt.Printf("PID %d\n", os.Getpid())
	time.Sleep(time.Minute)
}
