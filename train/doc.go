// Package train is the trainer: it runs epochs of a zoo model over a
// dataset (train/data), evaluates, reports progress (train/report), keeps
// a breakdown of where the time goes, and saves and resumes checkpoints
// (train/checkpoint).
//
// New sets a run up, alone or as one rank of a job (WithGroup), resumed
// or not (ResumeFrom); Run trains. How a rank trains is two strategies
// chosen once in New (mode.go): its compute — the whole model or one
// pipeline stage (pipeline.go, stages.go) — and its gradient sync — none,
// or DDP across the ranks that hold the same layers (ddp.go). The training
// loop (trainer.go) calls them where the modes differ and has no mode
// checks of its own; a new mode is a new implementation of one of the two
// interfaces. Evaluation is in evaluate.go, inference from saved weights
// in infer.go, the pipeline's end-of-run report in summary.go.
package train
