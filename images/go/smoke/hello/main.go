// A tiny program for the go image's smoke test: standard library only.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// WordCounts counts the words of text, case-folded.
func WordCounts(text string) map[string]int {
	counts := map[string]int{}
	for _, w := range strings.Fields(strings.ToLower(text)) {
		counts[strings.Trim(w, ".,;:!?")]++
	}
	return counts
}

func main() {
	text := "the quick brown fox jumps over the lazy dog. The end."
	counts := WordCounts(text)
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := struct {
		Words  []string       `json:"words"`
		Counts map[string]int `json:"counts"`
		SHA256 string         `json:"sha256"`
	}{keys, counts, fmt.Sprintf("%x", sha256.Sum256([]byte(text)))}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
