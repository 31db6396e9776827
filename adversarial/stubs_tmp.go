package adversarial

import "context"

func runDirector(ctx context.Context, e *env, t *tally, n int) error { return nil }
func runCLI(ctx context.Context, e *env, t *tally, n int) error      { return nil }
