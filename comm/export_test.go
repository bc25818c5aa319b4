package comm

// SetShrinkHook makes g's world call hook at named points of Shrink
// ("input sent", "estimate sent to one", "agreed", "built"), so that a test
// can kill a rank there.
func SetShrinkHook(g *Group, hook func(point string)) { g.w.hook = hook }
