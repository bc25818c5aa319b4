package comm

// SetHook makes g's world call hook at named points of Shrink ("input
// sent", "estimate sent to one", "agreed", "built") and Close ("unmapping",
// when the shared-memory rings are about to go), so that a test can kill
// a rank there or look at what is still running.
func SetHook(g *Group, hook func(point string)) { g.w.hook = hook }

// WithBuild makes a rank announce build b when joining, as a binary
// stamped with that gorun version would.
func WithBuild(b string) Option { return func(s *Settings) { s.build = b } }
