package pgtest

import (
	"errors"
	"strings"
	"testing"
)

// TestChoose: $CQ_TEST_PG_URL, when set, is the server, and one that does
// not answer fails the tests (the run asked for it); "skip" skips them;
// unset, the local server is used when it answers, and the tests skip,
// saying why, when it does not.
func TestChoose(t *testing.T) {
	t.Parallel()
	down := errors.New("dial tcp 127.0.0.1:1: connect:\nconnection refused")
	probe := func(answers ...string) func(string) error {
		return func(url string) error {
			for _, a := range answers {
				if a == url {
					return nil
				}
			}
			return down
		}
	}
	const mine = "postgres://me@db/x"
	for _, tc := range []struct {
		why       string
		env       string
		set       bool
		answers   []string
		url, skip string
		fail      string
	}{
		{"set, answers", mine, true, []string{mine}, mine, "", ""},
		{"set, down", mine, true, []string{DefaultURL}, "", "", "cannot be used: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"skip", "skip", true, []string{DefaultURL}, "", "$CQ_TEST_PG_URL=skip", ""},
		{"unset, local answers", "", false, []string{DefaultURL}, DefaultURL, "", ""},
		{"empty, local answers", "", true, []string{DefaultURL}, DefaultURL, "", ""},
		{"unset, none", "", false, nil, "", "no PostgreSQL server at " + DefaultURL, ""},
	} {
		c := choose(tc.env, tc.set, probe(tc.answers...))
		if c.url != tc.url || !strings.Contains(c.skip, tc.skip) || (tc.skip == "") != (c.skip == "") ||
			!strings.Contains(c.fail, tc.fail) || (tc.fail == "") != (c.fail == "") {
			t.Errorf("%s: %+v", tc.why, c)
		}
		if strings.Contains(c.skip+c.fail, "\n") {
			t.Errorf("%s: more than one line: %+v", tc.why, c)
		}
	}
}
