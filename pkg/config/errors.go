package config

import (
	"fmt"
	"sort"
	"strings"
)

// Diagnostic is one problem in a config, at a position: an error, or a
// warning (a key that matches nothing in the model).
type Diagnostic struct {
	File string
	Line int // 1-based; every diagnostic has one
	Col  int // 1-based
	Msg  string
	// Hint is a "did you mean" suggestion, or "".
	Hint string
}

// Error formats the diagnostic as "file:line:col: message (did you mean "x"?)".
func (d *Diagnostic) Error() string {
	s := fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Msg)
	if d.Hint != "" {
		s += fmt.Sprintf(" (did you mean %q?)", d.Hint)
	}
	return s
}

// ErrorList is every error found in a config, sorted by position.
type ErrorList []*Diagnostic

// Error joins the errors one per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, d := range l {
		msgs[i] = d.Error()
	}
	return strings.Join(msgs, "\n")
}

// sortDiagnostics orders by file, line, column and message, and drops
// duplicates (a bad anchored spec is reported once, not at every alias).
func sortDiagnostics(ds []*Diagnostic) []*Diagnostic {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		return a.Msg < b.Msg
	})
	out := ds[:0]
	for i, d := range ds {
		if i > 0 && d.Error() == ds[i-1].Error() {
			continue
		}
		out = append(out, d)
	}
	return out
}

// didYouMean returns the candidate closest to s, if it is close enough to
// be a typo (edit distance at most a third of its length, and at least 1
// allowed for short words), or "".
func didYouMean(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(len(s)/3, 2)
	if best == "" || bestD > limit || best == s {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
