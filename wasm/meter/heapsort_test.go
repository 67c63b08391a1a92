package meter

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type ints []int

func (s ints) Len() int           { return len(s) }
func (s ints) Less(i, j int) bool { return s[i] < s[j] }
func (s ints) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

func TestHeapSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 70 {
		for _, span := range []int{3, 1000} {
			v := make(ints, n)
			for i := range v {
				v[i] = r.IntN(span)
			}
			want := slices.Clone(v)
			slices.Sort(want)
			heapSort(v)
			if !slices.Equal(v, want) {
				t.Fatalf("n=%d span=%d: got %v, want %v", n, span, v, want)
			}
			heapSort(v) // sorted input stays as it is
			if !slices.Equal(v, want) {
				t.Fatalf("n=%d span=%d, sorted input: got %v", n, span, v)
			}
		}
	}
}
