package stats

// Exported for tests only (and for package stats_test).

// Has reports whether the answer had a column called name.
func (r Row) Has(name string) bool {
	_, ok := r.h.cols[name]
	return ok
}
