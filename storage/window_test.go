package storage

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustWindow(t *testing.T, w Window) *Window {
	t.Helper()
	if err := w.validate(); err != nil {
		t.Fatal(err)
	}
	return &w
}

func TestWindowOpenIsHalfOpen(t *testing.T) {
	w := mustWindow(t, Window{Schedule: "0 3 * * *", Duration: 2 * time.Hour})
	day := time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Duration
		open bool
	}{{2*time.Hour + 59*time.Minute, false}, {3 * time.Hour, true}, {4*time.Hour + 59*time.Minute, true}, {5 * time.Hour, false}} {
		if got := w.Open(day.Add(c.at)); got != c.open {
			t.Errorf("Open(%s) = %v, want %v", day.Add(c.at), got, c.open)
		}
	}
	if n := w.Next(day.Add(5 * time.Hour)); !n.Equal(day.Add(27 * time.Hour)) {
		t.Errorf("Next after the window = %s, want the next day's 03:00", n)
	}
}

func TestWindowLongerThanADayStaysOpen(t *testing.T) {
	// Saturdays 00:00 for 72 h: open all of Monday morning too, which a
	// 24-hour look-back would miss.
	w := mustWindow(t, Window{Schedule: "0 0 * * 6", Duration: 72 * time.Hour})
	sat := time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC)
	if sat.Weekday() != time.Saturday {
		t.Fatal("fixture date is not a Saturday")
	}
	for _, at := range []time.Duration{0, 30 * time.Hour, 71 * time.Hour} {
		if !w.Open(sat.Add(at)) {
			t.Errorf("closed %s into a 72 h window", at)
		}
	}
	if w.Open(sat.Add(72 * time.Hour)) {
		t.Error("open after 72 h")
	}
}

func TestWindowInTimeZone(t *testing.T) {
	w := mustWindow(t, Window{Schedule: "0 3 * * *", Duration: time.Hour, TimeZone: "Asia/Tokyo"})
	// 03:00 JST is 18:00 UTC the day before.
	if !w.Open(time.Date(2026, 5, 3, 18, 30, 0, 0, time.UTC)) {
		t.Error("closed at 03:30 Tokyo time")
	}
	if w.Open(time.Date(2026, 5, 4, 3, 30, 0, 0, time.UTC)) {
		t.Error("open at 03:30 UTC, which is 12:30 in Tokyo")
	}
}

func TestWindowDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// Spring forward: 2026-03-08 02:00 EST jumps to 03:00 EDT. A 02:30
	// start moves to 03:30 EDT that day instead of being skipped.
	w := mustWindow(t, Window{Schedule: "30 2 * * *", Duration: time.Hour, TimeZone: "America/New_York"})
	got := w.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, ny))
	if want := time.Date(2026, 3, 8, 3, 30, 0, 0, ny); !got.Equal(want) {
		t.Errorf("start on the spring-forward day = %s, want %s", got, want)
	}
	// Fall back: 01:30 happens twice on 2026-11-01; the window opens once.
	w = mustWindow(t, Window{Schedule: "30 1 * * *", Duration: 30 * time.Minute, TimeZone: "America/New_York"})
	first := w.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, ny))
	if _, off := first.Zone(); off != -4*3600 {
		t.Errorf("first start %s is not the EDT occurrence", first)
	}
	second := w.Next(first.Add(30 * time.Minute))
	if second.Sub(first) < 24*time.Hour {
		t.Errorf("the repeated hour opened the window twice: %s then %s", first, second)
	}
}

func TestWindowAlwaysOpenAndInvalid(t *testing.T) {
	w := mustWindow(t, Window{Schedule: AlwaysOpen})
	if !w.Open(time.Date(2026, 1, 1, 13, 0, 0, 0, time.UTC)) {
		t.Error("AlwaysOpen is closed")
	}
	for _, bad := range []Window{
		{Schedule: "not cron"},
		{Schedule: "0 4 31 2 *"}, // 31 February never comes
		{Schedule: "@every 1h"},
		{Schedule: "0 3 * * *", TimeZone: "Mars/Olympus"},
		{Schedule: "0 3 * * *", Duration: time.Second},
		{Schedule: "0 0 3 * * *"}, // 6 fields: seconds are not part of the standard
	} {
		if err := bad.validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%+v: err = %v, want ErrInvalidPolicy", bad, err)
		}
	}
	var unvalidated Window
	if unvalidated.Open(time.Date(2026, 1, 1, 3, 30, 0, 0, time.UTC)) {
		t.Error("an unvalidated window is open")
	}
}

// nextStart's memo answers as a search from scratch would, for moments
// that mostly move forward a little (as a controller's ticks do) and now
// and then jump back or far ahead, across daylight-saving changes
// (including zones that change at midnight or by 30 minutes).
func TestWindowMemoAnswersAsTheSearch(t *testing.T) {
	schedules := []string{"0 3 * * *", "30 2 * * *", "0 0 * * *", "30 1 * * *", "0 */6 * * *", "0 2 * * 0", "15,45 0-3 * * *", "0 0 1 * *", "@hourly", "0 0 29 2 *"}
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "America/Santiago", "Australia/Lord_Howe", "America/Havana", "Asia/Beirut"}
	rapid.Check(t, func(t *rapid.T) {
		w := Window{
			Schedule: rapid.SampledFrom(schedules).Draw(t, "schedule"),
			Duration: time.Duration(rapid.IntRange(1, 72).Draw(t, "hours")) * time.Hour,
			TimeZone: rapid.SampledFrom(zones).Draw(t, "zone"),
		}
		if err := w.validate(); err != nil {
			t.Fatal(err)
		}
		plain := w
		plain.memo = nil // every answer searched for
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.IntRange(0, 3*365*24*60).Draw(t, "start")) * time.Minute)
		for i := range 300 {
			switch rapid.IntRange(0, 19).Draw(t, fmt.Sprint("move", i)) {
			case 0:
				at = at.Add(-time.Duration(rapid.IntRange(1, 48*60).Draw(t, fmt.Sprint("back", i))) * time.Minute)
			case 1:
				at = at.Add(time.Duration(rapid.IntRange(1, 60*24*60).Draw(t, fmt.Sprint("jump", i))) * time.Minute)
			default:
				at = at.Add(time.Duration(rapid.IntRange(1, 90).Draw(t, fmt.Sprint("tick", i))) * time.Minute)
			}
			if got, want := w.Open(at), plain.Open(at); got != want {
				t.Fatalf("Open(%s) = %v, the search says %v", at, got, want)
			}
			if got, want := w.Next(at), plain.Next(at); !got.Equal(want) {
				t.Fatalf("Next(%s) = %s, the search says %s", at, got, want)
			}
		}
	})
}
