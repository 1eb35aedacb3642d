package main

import "testing"

func TestWordCounts(t *testing.T) {
	got := WordCounts("The cat. the CAT, a dog")
	want := map[string]int{"the": 2, "cat": 2, "a": 1, "dog": 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: got %d, want %d", k, got[k], v)
		}
	}
}
