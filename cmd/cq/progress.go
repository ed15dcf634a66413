package main

import (
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progressBar is a bar on stderr for a long step of a command run at a
// terminal. A nil *progressBar (stderr is no terminal) draws nothing, so
// piped runs write nothing more to stderr.
type progressBar struct {
	p   *mpb.Progress
	bar *mpb.Bar
}

// newProgress starts a bar named name counting up to total, if stderr is
// a terminal.
func (a *App) newProgress(name string, total int) *progressBar {
	if !a.stderrIsTerminal() {
		return nil
	}
	p := mpb.New(mpb.WithOutput(a.Stderr), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	bar := p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name(name+" "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Elapsed(decor.ET_STYLE_MMSS, decor.WCSyncSpace)))
	return &progressBar{p: p, bar: bar}
}

// set moves the bar to n done.
func (b *progressBar) set(n int) {
	if b != nil {
		b.bar.SetCurrent(int64(n))
	}
}

// finish draws the bar a last time, complete at what is done if ok, else
// cut short, and ends its line.
func (b *progressBar) finish(ok bool) {
	if b == nil {
		return
	}
	if ok {
		b.bar.SetTotal(-1, true)
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}
