// Package report turns a training run's progress into what people and
// tools read: the workshops' log lines, a terminal progress bar, JSON lines
// metrics, and TensorBoard event files.
package report
