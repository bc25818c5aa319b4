package report

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// LogLines prints the workshops' familiar lines, every Interval batches:
//
//	Train Epoch: 1 [6400/60000 (11%)]	Loss: 0.546140
//
// and after each epoch
//
//	Test set: Average loss: 0.3301, Accuracy: 8813/10000 (88.13%)
//
// It suits logs: Slurm output files, pipes.
type LogLines struct {
	W        io.Writer
	Interval int
}

// Step implements Reporter.
func (l *LogLines) Step(s Step) error {
	if s.Batch%max(l.Interval, 1) != 0 {
		return nil
	}
	_, err := fmt.Fprintf(l.W, "Train Epoch: %d [%d/%d (%.0f%%)]\tLoss: %.6f\n",
		s.Epoch, s.Seen, s.Total, 100*float64(s.Batch)/float64(s.Batches), s.Loss)
	return err
}

// Epoch implements Reporter.
func (l *LogLines) Epoch(e Epoch) error {
	return printEpoch(l.W, e)
}

func printEpoch(w io.Writer, e Epoch) error {
	_, err := fmt.Fprintf(w, "Epoch %d: train loss %.4f, %.1f s, %.0f img/s\n", e.Epoch, e.TrainLoss, e.Seconds, e.ImagesPerSec)
	if err == nil && e.Skipped > 0 {
		_, err = fmt.Fprintf(w, "Epoch %d: skipped %d unreadable images, e.g. %s\n", e.Epoch, e.Skipped, e.SkippedExample)
	}
	if err == nil && e.TestTotal > 0 {
		top5 := ""
		if e.ShowsTop5() {
			top5 = fmt.Sprintf(", Top-5: %d/%d (%.2f%%)", e.TestTop5, e.TestTotal, 100*e.TestTop5Accuracy())
		}
		skipped := ""
		if e.TestSkipped > 0 {
			skipped = fmt.Sprintf(" (%d unreadable images skipped)", e.TestSkipped)
		}
		_, err = fmt.Fprintf(w, "\nTest set: Average loss: %.4f, Accuracy: %d/%d (%.2f%%)%s%s\n\n",
			e.TestLoss, e.TestCorrect, e.TestTotal, 100*e.TestAccuracy(), top5, skipped)
	}
	return err
}

// Close implements Reporter.
func (l *LogLines) Close() error { return nil }

// Progress draws a one-line progress bar on a terminal, redrawn at most
// ten times a second: epoch, bar, step within the epoch, loss, images/s
// (over all ranks) and the epoch's remaining time. Epoch summaries go to W.
type Progress struct {
	W io.Writer
	// Bar, when set, receives the bar instead of W, one line of text per
	// redraw, for a launcher to draw (gorun's GORUN_STATUS_FD).
	Bar    io.Writer
	Epochs int
	Width  int // of the bar; 30 when 0
	last   time.Time
	drawn  bool
}

// Step implements Reporter.
func (p *Progress) Step(s Step) error {
	now := time.Now()
	final := s.Batch == s.Batches-1
	if !final && now.Sub(p.last) < 100*time.Millisecond {
		return nil
	}
	p.last = now
	width := p.Width
	if width == 0 {
		width = 30
	}
	done := float64(s.Batch+1) / float64(max(s.Batches, 1))
	fill := int(done * float64(width))
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill < width {
		bar = bar[:fill] + ">" + bar[fill+1:]
	}
	eta := "?"
	if done > 0 {
		eta = (time.Duration(float64(s.Elapsed)/done) - s.Elapsed).Round(time.Second).String()
	}
	text := fmt.Sprintf("Epoch %d/%d [%s] %3.0f%%  step %d/%d  loss %.4f  %.0f img/s  ETA %s",
		s.Epoch, p.Epochs, bar, 100*done, s.Batch+1, s.Batches, s.Loss, s.ImagesPerSec, eta)
	if p.Bar != nil {
		_, err := io.WriteString(p.Bar, text+"\n")
		return err
	}
	_, err := io.WriteString(p.W, "\r\033[K"+text)
	p.drawn = true
	return err
}

// Epoch implements Reporter.
func (p *Progress) Epoch(e Epoch) error {
	if p.drawn {
		fmt.Fprintln(p.W)
		p.drawn = false
	}
	return printEpoch(p.W, e)
}

// Close implements Reporter.
func (p *Progress) Close() error {
	if p.drawn {
		_, err := fmt.Fprintln(p.W)
		return err
	}
	return nil
}

// IsTerminal reports whether f is a terminal (a character device), where a
// progress bar makes sense.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
