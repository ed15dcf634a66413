// Package promtext writes gauges in the Prometheus text exposition format
// (version 0.0.4), the format node_exporter's textfile collector reads.
//
// cq writes a handful of gauges once per `cq health -o prometheus` call.
// The Prometheus client library would do it too, but linking it costs
// every cq invocation (an enqueue included) package initialisation and
// resident memory (docs/performance.md), so the few lines of the
// format cq needs are written here. The tests parse the output back with
// the Prometheus project's own parser and linter.
package promtext

import (
	"bufio"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Family is one gauge family: a name, its help text and its series.
type Family struct {
	Name   string
	Help   string
	Series []Series
}

// Series is one sample: its labels (name, value pairs) and its value.
type Series struct {
	Labels []Label
	Value  float64
}

// Label is one label pair.
type Label struct{ Name, Value string }

// Set collects families by name.
type Set struct{ fams map[string]*Family }

// Gauge adds an unlabelled gauge.
func (s *Set) Gauge(name, help string, v float64) {
	f := s.family(name, help)
	f.Series = append(f.Series, Series{Value: v})
}

// Labelled adds one series to a family with a single label.
func (s *Set) Labelled(name, help, label, value string, v float64) {
	f := s.family(name, help)
	f.Series = append(f.Series, Series{Labels: []Label{{label, value}}, Value: v})
}

func (s *Set) family(name, help string) *Family {
	if s.fams == nil {
		s.fams = map[string]*Family{}
	}
	f := s.fams[name]
	if f == nil {
		f = &Family{Name: name, Help: help}
		s.fams[name] = f
	}
	return f
}

// Write writes the families sorted by name, each family's series sorted
// by their label values, as the client library does. A family with no
// series is left out, also as the client library does.
func (s *Set) Write(w io.Writer) error {
	names := make([]string, 0, len(s.fams))
	for n, f := range s.fams {
		if len(f.Series) > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	bw := bufio.NewWriter(w)
	for _, n := range names {
		f := s.fams[n]
		sort.SliceStable(f.Series, func(i, j int) bool { return labelKey(f.Series[i]) < labelKey(f.Series[j]) })
		bw.WriteString("# HELP " + f.Name + " " + escapeHelp(f.Help) + "\n")
		bw.WriteString("# TYPE " + f.Name + " gauge\n")
		for _, se := range f.Series {
			bw.WriteString(f.Name)
			if len(se.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range se.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(l.Name + `="` + escapeLabel(l.Value) + `"`)
				}
				bw.WriteByte('}')
			}
			bw.WriteString(" " + FormatValue(se.Value) + "\n")
		}
	}
	return bw.Flush()
}

func labelKey(s Series) string {
	var b strings.Builder
	for _, l := range s.Labels {
		b.WriteString(l.Value)
		b.WriteByte(0)
	}
	return b.String()
}

// FormatValue formats a sample value as the exposition format spells it.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }
