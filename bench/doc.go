// Package bench is gorun's benchmark harness: collectives over a range of
// message sizes and world sizes, reported as nccl-tests reports them
// (time, algorithm and bus bandwidth, and a count of wrong results), and
// the training scaling table.
package bench
