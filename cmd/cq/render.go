package main

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
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
		t := tablewriter.NewTable(a.Stdout)
		h := make([]any, len(header))
		for i, c := range header {
			h[i] = c
		}
		t.Header(h...)
		if err := t.Bulk(rows); err != nil {
			return err
		}
		return t.Render()
	}
	w := bufio.NewWriter(a.Stdout)
	w.WriteString(strings.Join(header, "\t") + "\n")
	for _, r := range rows {
		clean := make([]string, len(r))
		for i, c := range r {
			clean[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		w.WriteString(strings.Join(clean, "\t") + "\n")
	}
	return w.Flush()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
