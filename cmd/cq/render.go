package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/olekukonko/tablewriter"
	"golang.org/x/term"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeTable draws rows as a table on a terminal, and as tab-separated
// lines (header included, no decoration) when piped.
func (a *App) writeTable(header []string, rows [][]string) error {
	if a.stdoutIsTerminal() {
		return a.drawTable(header, rows)
	}
	w := bufio.NewWriter(a.Stdout)
	w.WriteString(strings.Join(header, "\t") + "\n")
	for _, r := range rows {
		if err := writeTSVRow(w, r); err != nil {
			return err
		}
	}
	return w.Flush()
}

var tsvCleaner = strings.NewReplacer("\t", " ", "\n", " ")

// writeTSVRow writes one tab-separated line; tabs and newlines inside a
// cell become spaces.
func writeTSVRow(w *bufio.Writer, r []string) error {
	for i, c := range r {
		if i > 0 {
			w.WriteByte('\t')
		}
		w.WriteString(tsvCleaner.Replace(c))
	}
	return w.WriteByte('\n')
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ---- drawing for a terminal ----

// columnGap is the blank between two columns of a drawn table.
const columnGap = "  "

// timeColumns are the columns whose instants a terminal shows as ages;
// a header names them (any command's table gets this by its header).
var timeColumns = map[string]bool{
	"CREATED": true, "UPDATED": true, "STARTED": true, "ENDED": true,
	"FINISHED": true, "LAST_SEEN": true, "LAST SEEN": true,
}

// drawTable writes rows as aligned columns that fit the terminal's width:
// the widest columns give way first, and a cut cell ends with "…". Cells
// of a STATE column are coloured, and instants in a time column are told
// as ages; the cells are not changed for anything but the eye.
func (a *App) drawTable(header []string, rows [][]string) error {
	now := a.now()
	color := a.colorOn()
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, header)
	for _, r := range rows {
		out := make([]string, len(header))
		for i := range out {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			if timeColumns[header[i]] {
				c = ageOf(c, now)
			}
			out[i] = cleanCell(c)
		}
		cells = append(cells, out)
	}
	natural := make([]int, len(header))
	for _, r := range cells {
		for i, c := range r {
			natural[i] = max(natural[i], runewidth.StringWidth(c))
		}
	}
	width := a.termWidth()
	widths := fitWidths(natural, keepWidths(header, natural), width-len(columnGap)*(len(header)-1))
	narrow := sumInts(widths)+len(columnGap)*(len(header)-1) > width

	fitted := make([][]string, len(cells))
	for n, r := range cells {
		fitted[n] = make([]string, len(widths))
		for i := range widths {
			c := runewidth.Truncate(r[i], widths[i], "…")
			switch {
			case narrow || !color:
			case n == 0:
				c = sgr("1", c)
			case header[i] == "STATE":
				c = sgr(stateColor[c], c)
			}
			fitted[n][i] = c
		}
	}
	// tablewriter lays the fitted cells out (it measures them without
	// their colour codes); the fitting above is what it lacks.
	var buf bytes.Buffer
	t := tablewriter.NewWriter(&buf)
	t.SetHeader(fitted[0])
	t.SetAutoFormatHeaders(false)
	t.SetAutoWrapText(false)
	t.SetAlignment(tablewriter.ALIGN_LEFT)
	t.SetHeaderAlignment(tablewriter.ALIGN_LEFT)
	t.SetBorder(false)
	t.SetHeaderLine(false)
	t.SetColumnSeparator("")
	t.SetCenterSeparator("")
	t.SetRowSeparator("")
	t.SetTablePadding(columnGap)
	t.SetNoWhiteSpace(true)
	t.AppendBulk(fitted[1:])
	t.Render()
	w := bufio.NewWriter(a.Stdout)
	for _, s := range strings.SplitAfter(buf.String(), "\n") {
		if s == "" {
			continue
		}
		s = strings.TrimRight(s, " \n")
		if narrow {
			// Not even a cell a column fits: the line itself is cut.
			s = runewidth.Truncate(s, width, "…")
		}
		w.WriteString(s + "\n")
	}
	return w.Flush()
}

// handleWidth is how narrow the first column of a drawn table gets while
// another column can still give way: it is each row's handle (a task or
// run id, a queue name), and a task id cut to 12 characters and "…" is
// still a prefix that names it.
const handleWidth = 13

// keepWidths is how narrow each column gets while another can still give
// way: the first column handleWidth, a STATE column and a time column
// their whole width (a state or an age is a word or two, and cut it
// reads as nothing), any other one cell.
func keepWidths(header []string, natural []int) []int {
	keep := make([]int, len(natural))
	for i := range keep {
		switch {
		case i == 0:
			keep[i] = min(natural[i], handleWidth)
		case header[i] == "STATE", timeColumns[header[i]]:
			keep[i] = natural[i]
		}
	}
	return keep
}

// fitWidths shrinks column widths so that they add up to budget at most,
// taking from the widest first: every column wider than some cap is cut
// to it (none below its keep width), and what is left of the budget
// widens the first of those by one each. When even a cap of one cell
// does not fit, the keep widths are given up.
func fitWidths(natural, keep []int, budget int) []int {
	floor := append([]int(nil), keep...)
	width := func(i, c int) int { return min(natural[i], max(c, floor[i])) }
	sum := func(c int) int {
		s := 0
		for i := range natural {
			s += width(i, c)
		}
		return s
	}
	widest := 0
	for _, w := range natural {
		widest = max(widest, w)
	}
	out := append([]int(nil), natural...)
	if sum(widest) <= budget {
		return out
	}
	if sum(1) > budget {
		clear(floor)
	}
	// The largest cap that fits: sum(c) grows with c.
	lo, hi := 1, widest
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if sum(mid) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	left := budget - sum(lo)
	for i := range natural {
		out[i] = width(i, lo)
		if out[i] == lo && natural[i] > lo && left > 0 {
			out[i]++
			left--
		}
	}
	return out
}

// cleanCell shows tabs, newlines and other control characters as spaces:
// in a drawn table they would break the columns or drive the terminal.
func cleanCell(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s)
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// termWidth is the width tables fit: $COLUMNS when it is set to a number,
// else the terminal's, else 80.
func (a *App) termWidth() int {
	if n, err := strconv.Atoi(a.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := a.Stdout.(*os.File); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return 80
}

// colorOn reports whether stdout gets colours: a terminal, unless
// NO_COLOR is set to anything or the terminal says it is dumb.
func (a *App) colorOn() bool {
	return a.stdoutIsTerminal() && a.Getenv("NO_COLOR") == "" && a.Getenv("TERM") != "dumb"
}

// stateColor is the SGR colour of each task and run state; one that is
// not here is printed plain.
var stateColor = map[string]string{
	"done": "32", "succeeded": "32",
	"failed": "31", "timeout": "31",
	"cancelled": "33", "cancelling": "33", "blocked": "33",
	"doing": "36", "running": "36",
	"inbox": "2",
}

// sgr wraps s in an ANSI colour (Select Graphic Rendition) code.
func sgr(code, s string) string {
	if code == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// ageOf tells an RFC 3339 instant as how long ago it was ("3m ago"), or
// how soon it comes ("in 5s"); anything else is returned as it is.
func ageOf(s string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + roughly(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return roughly(d) + " ago"
}

// roughly is d in its largest whole unit: 45s, 3m, 2h, 5d.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// humanDuration is a run's length as a person reads it: 850ms, 1.2s,
// 3m04s, 2h05m, 3d04h.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Truncate(100*time.Millisecond).Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// printItems prints a listing for scripts: with -q each item's id, one per
// line; with -o json one array; with -o jsonl one object per line. It
// reports false for a table, which the caller draws.
func printItems[T any](a *App, items []T, id func(T) string) (bool, error) {
	switch {
	case a.Quiet:
		for _, it := range items {
			if _, err := fmt.Fprintln(a.Stdout, id(it)); err != nil {
				return true, err
			}
		}
		return true, nil
	case a.format() == "json":
		return true, writeJSON(a.Stdout, items)
	case a.format() == "jsonl":
		for _, it := range items {
			if err := writeJSONLine(a.Stdout, it); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, nil
}
