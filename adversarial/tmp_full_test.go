package adversarial

import (
	"os"
	"strings"
	"testing"
)

func TestTmpFull(t *testing.T) {
	a := os.Getenv("ADV_AREAS")
	if a == "" {
		return
	}
	runAreas(t, Config{Seed: 7, Scale: Scale(os.Getenv("ADV_SCALE")), Areas: strings.Split(a, ",")})
}
