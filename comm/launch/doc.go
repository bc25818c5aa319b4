// Package launch starts the ranks of a job on this machine, the way mpirun
// and torchrun do: it sets the variables comm.Init reads, labels every
// output line with its rank, forwards signals, and stops the whole job —
// naming the rank that failed first — as soon as one rank fails. Rank 0
// may report its progress on a status pipe (Config.Status), which
// StatusTerminal keeps at the bottom of a terminal below the ranks' lines.
package launch
