package promtext

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestRoundTrip writes awkward label values, help texts and special
// values and reads them back with the Prometheus project's own parser.
func TestRoundTrip(t *testing.T) {
	var s Set
	odd := "a\"b\\c\nd é"
	s.Labelled("x_items", "Items by kind, with a \\ and a\nnewline.", "kind", odd, 3)
	s.Labelled("x_items", "Items by kind, with a \\ and a\nnewline.", "kind", "", 0.25)
	s.Labelled("x_items", "Items by kind, with a \\ and a\nnewline.", "kind", "b", -1e300)
	s.Gauge("a_inf", "Plus infinity.", math.Inf(1))
	s.Gauge("b_nan", "Not a number.", math.NaN())
	s.Gauge("c_big", "A large integer.", 1<<53)
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text)
	}
	if got := mfs["x_items"].GetHelp(); got != "Items by kind, with a \\ and a\nnewline." {
		t.Errorf("help = %q", got)
	}
	got := map[string]float64{}
	for _, m := range mfs["x_items"].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	want := map[string]float64{odd: 3, "": 0.25, "b": -1e300}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("x_items{kind=%q} = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if v := mfs["a_inf"].GetMetric()[0].GetGauge().GetValue(); !math.IsInf(v, 1) {
		t.Errorf("a_inf = %v", v)
	}
	if v := mfs["b_nan"].GetMetric()[0].GetGauge().GetValue(); !math.IsNaN(v) {
		t.Errorf("b_nan = %v", v)
	}
	if v := mfs["c_big"].GetMetric()[0].GetGauge().GetValue(); v != 1<<53 {
		t.Errorf("c_big = %v", v)
	}
	// Families sorted by name, series by label value.
	order := []string{}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			order = append(order, strings.Fields(line)[2])
		}
	}
	if strings.Join(order, ",") != "a_inf,b_nan,c_big,x_items" {
		t.Errorf("family order %v", order)
	}
	if i, j := strings.Index(text, `kind=""`), strings.Index(text, `kind="b"`); i < 0 || j < 0 || i > j {
		t.Errorf("series not sorted by label value:\n%s", text)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
}

func TestEmptyFamilyLeftOut(t *testing.T) {
	var s Set
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil || buf.Len() != 0 {
		t.Fatalf("empty set wrote %q, %v", buf.String(), err)
	}
}
