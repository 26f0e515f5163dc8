package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how far a replay is: a bar with rate and ETA on a
// terminal, a plain line every few seconds otherwise (logs, CI). It counts
// offsets, which end at the total even where compaction left gaps, and
// records, for the summary.
type progress struct {
	bar     *progressbar.ProgressBar
	w       io.Writer
	title   string
	total   int64 // offsets
	done    atomic.Int64
	records atomic.Int64
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
}

// plainEvery is how often the plain form prints a line.
var plainEvery = 5 * time.Second

func newProgress(w io.Writer, title string, total int64) *progress {
	p := &progress{w: w, title: title, total: total, start: time.Now(), stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(title),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("offsets"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(plainEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.line()
			}
		}
	}()
	return p
}

func (p *progress) add(records int, offsets int64) {
	p.records.Add(int64(records))
	p.done.Add(offsets)
	if p.bar != nil {
		p.bar.Add64(offsets)
	}
}

func (p *progress) line() {
	done, el := p.done.Load(), time.Since(p.start)
	rate := float64(done) / el.Seconds()
	eta := "?"
	if rate > 0 && p.total >= done {
		eta = time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(done) / float64(p.total)
	}
	fmt.Fprintf(p.w, "%s: %d/%d offsets (%.1f%%), %d records, %.0f offsets/s, ETA %s\n", p.title, done, p.total, pct, p.records.Load(), rate, eta)
}

// finish ends the display and returns the records seen and the time taken.
func (p *progress) finish() (int64, time.Duration) {
	el := time.Since(p.start)
	if p.bar != nil {
		p.bar.Finish()
	} else {
		close(p.stop)
		p.wg.Wait()
		p.line()
	}
	return p.records.Load(), el
}
