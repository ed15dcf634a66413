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
		t := tablewriter.NewWriter(a.Stdout)
		t.SetHeader(header)
		t.SetAutoFormatHeaders(false)
		t.SetAutoWrapText(false)
		t.AppendBulk(rows)
		t.Render()
		return nil
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
