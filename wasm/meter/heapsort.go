package meter

// sortable is sort.Interface. The meter sorts with heapSort rather than
// package sort: sort's pdqsort and stable merge are a few KB of the browser
// module's brotli budget, for lists that are short or already sorted. Every
// order sorted here is total, so stability does not matter.
type sortable interface {
	Len() int
	Less(i, j int) bool
	Swap(i, j int)
}

// heapSort sorts data in place: O(n) when it is already sorted, else
// O(n log n), without allocating.
func heapSort(data sortable) {
	n := data.Len()
	i := 1
	for i < n && !data.Less(i, i-1) {
		i++
	}
	if i >= n {
		return
	}
	for i := n/2 - 1; i >= 0; i-- {
		siftDown(data, i, n)
	}
	for i := n - 1; i > 0; i-- {
		data.Swap(0, i)
		siftDown(data, 0, i)
	}
}

// siftDown restores the max-heap order of data[root:hi] below root.
func siftDown(data sortable, root, hi int) {
	for {
		child := 2*root + 1
		if child >= hi {
			return
		}
		if child+1 < hi && data.Less(child, child+1) {
			child++
		}
		if !data.Less(root, child) {
			return
		}
		data.Swap(root, child)
		root = child
	}
}
