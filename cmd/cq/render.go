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
