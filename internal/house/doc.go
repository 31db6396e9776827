// Package house checks the layout rules of cpilab's code base in its tests.
//
// The rules are the ones a newcomer relies on when walking the tree: every
// package says what it holds in one short sentence (its go doc synopsis),
// no function is too long to read in one sitting (table-shaped route and
// flag registrations aside, each named in the test), the project names
// no machine path, and the suites are layered: the machinery every suite
// uses (suites) imports no suite, and no other suite imports the CPI
// suite (suites/cpisuite). That only the Director imports its store is
// director/store's own test. The package holds no code; `go test
// ./internal/house` is the check.
package house
