// Package embedtest shows, and tests, the suites running inside someone
// else's Ginkgo tree. The user's suite has its own BeforeSuite that starts
// the cloud and fills in the config the registered specs read lazily.
package embedtest
